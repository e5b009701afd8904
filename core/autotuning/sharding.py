"""Sharded autotuning: N processes tune disjoint shards of the unique tunable instructions.

Mirrors XLA's ``xla_gpu_shard_autotuning`` (``GemmFusionAutotuner``,
``xla/service/gpu/autotuning/gemm_fusion_autotuner.cc``): every process of a multi-process compile
collects the *unique* tunable instructions (by autotune cache key), orders them the same way, tunes the
``K``-th of ``N`` contiguous slices of ``ceil(U / N)`` instructions, and the results meet in a shared
store. XLA exchanges them through the distributed key-value store; fusegen's store is the cache directory
(``xla_gpu_per_fusion_autotune_cache_dir``), written atomically one file per key, so ``N`` processes
pointed at one directory (or whose directories are merged afterwards) hold what one process would have
tuned, given the same measurements.

The order is by key digest (sha256 of the key), so it does not depend on the order the modules were given
in, on instruction names, or on which process looks.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable, Sequence

import attrs

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.autotuning.autotuner import Autotuner, InstructionReport
    from fusegen.cache.key import CacheKey
    from fusegen.hlo.ir import Instruction, Module


@attrs.define
class UniqueInstruction:
    """One autotune cache key and every instruction (of every module) that has it, in module order."""

    key: "CacheKey"
    instructions: list["Instruction"] = attrs.field(factory=list)

    @property
    def digest(self) -> str:
        return self.key.digest


def unique_instructions(tuner: "Autotuner", modules: Iterable["Module"]) -> list[UniqueInstruction]:
    """The tunable instructions of ``modules`` grouped by ``tuner``'s cache key, ordered by key digest.

    Tunable as :meth:`Autotuner.tune_module` would tune them (``tune_emitter_fusions``,
    ``retune_configured`` from the tuner's options).
    """
    from fusegen.autotuning.autotuner import tunable_instructions

    groups: dict[str, UniqueInstruction] = {}
    for m in modules:
        for instr in tunable_instructions(m, tuner.options.tune_emitter_fusions, tuner.options.retune_configured):
            key = tuner.key_for(instr)
            groups.setdefault(key.digest, UniqueInstruction(key)).instructions.append(instr)
    return [groups[d] for d in sorted(groups)]


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)`` with ``0 <= K < N``.

    Raises:
        ValueError: not ``K/N`` with integers, ``N < 1`` or ``K`` out of range (the message says which).
    """
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m:
        raise ValueError(f"--shard {text!r}: expected K/N, e.g. 0/2 (the K-th of N shards, counting from 0)")
    k, n = int(m.group(1)), int(m.group(2))
    if n < 1:
        raise ValueError(f"--shard {text!r}: N must be at least 1")
    if k >= n:
        raise ValueError(f"--shard {text!r}: K must be in 0..{n - 1}")
    return k, n


def shard_range(total: int, k: int, n: int) -> range:
    """Indices of shard ``k`` of ``n`` over ``total`` items: slices of ``ceil(total / n)`` (the last shorter or
    empty), as XLA's sharded GEMM autotuning splits its sorted unique fusions."""
    size = -(-total // n) if total else 0
    return range(min(k * size, total), min((k + 1) * size, total))


def shard(groups: Sequence[UniqueInstruction], k: int, n: int) -> list[UniqueInstruction]:
    """The ``k``-th of ``n`` shards of ``groups`` (already in digest order)."""
    return [groups[i] for i in shard_range(len(groups), k, n)]


@attrs.define
class ShardRun:
    """What :func:`tune_shard` did: the shard's keys (digests), the count of unique keys over all shards, and
    one report per instruction of the shard."""

    keys: list[str]
    unique: int
    reports: list["InstructionReport"]


def tune_shard(tuner: "Autotuner", modules: Sequence["Module"], k: int, n: int,
               raise_on_error: bool = False) -> ShardRun:
    """Tune shard ``k`` of ``n``: every instruction of the shard's keys (the first of a key tunes, the others
    are served from the tuner's memory, as :meth:`Autotuner.tune_module` does for identical keys).

    Instructions of other shards are left untouched. Results go to the tuner's cache (its directory, when
    configured, is the store the shards share).

    Raises:
        AutotuneError: with ``raise_on_error``, as :meth:`Autotuner.tune_module`.
    """
    groups = unique_instructions(tuner, modules)
    mine = shard(groups, k, n)
    instrs = [i for g in mine for i in g.instructions]
    reports = tuner.tune_module(modules[0], instructions=instrs, raise_on_error=raise_on_error) if modules else []
    return ShardRun([g.digest for g in mine], len(groups), reports)
