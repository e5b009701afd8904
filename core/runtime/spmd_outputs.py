"""Where each output leaf's sharding of an SPMD run comes from, and what is done when it was only inferred.

An output leaf's sharding says which device holds which tile of the global output: it reassembles the
devices' outputs and splits a global ``--expected`` per device. XLA's optimized per-partition module rarely
prints it, so :func:`resolve_output_shardings` takes, per leaf, the first of:

1. ``root``: the root instruction's ``sharding={...}``;
2. ``capture``: the shardings ``fusegen capture`` stored beside the module (``NAME.shardings.json``,
   :mod:`fusegen.runtime.sharding_sidecar`) or a :class:`~fusegen.jax_capture.Captured` carries;
3. ``alias``: the parameter the output is aliased to (``input_output_alias`` in the module header: a donated
   train-step parameter; XLA aliases a buffer only to one of the same per-partition shape and sharding);
4. ``parameter``: the parameters of the same per-partition shape whose sharding cuts the expected global shape
   into it, when they all say the same (when they disagree it is ambiguous, not a choice: the row-major guess
   is used and each of theirs is a candidate);
5. ``replicated``: the expected global shape is the per-partition one (each device holds the whole array);
6. ``shape``: the row-major guess (tiles = global / per-partition dims, devices in row-major order as jit
   assigns a 1-D mesh, any remaining partitions replicating).

(The entry computation layout holds the per-partition shapes only, no device order; it is what a stated
sharding is checked against.) Without a global ``--expected`` nothing is judged by the sharding, only the
global outputs are assembled: ``agree`` (the partitions' outputs are bitwise equal: replicated), then
``parameter`` (same per-partition shape), then ``dim0`` (tiled along dimension 0).

The first three are **stated** by the module or its capture; the rest are **inferred**. An inferred leaf
carries its *candidates*: every other distinct sharding that fits (each fitting parameter's and the row-major
guess). :func:`settle` re-judges an inferred leaf that is a mismatch against ``expected`` with each candidate;
the first that explains it is used (the reason says so). When none does, and the kernel path agrees with the
reference and the f64 oracle on every device (so the difference is with ``expected`` alone), the leaf is
``undetermined`` ("cannot tell"; ``ok`` false, exit 1), not a mismatch, unless the leaf's sharding was
stated or is the only one that fits. No XLA counterpart: jax's ``Compiled.output_shardings`` is what states it.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import attrs
import numpy as np

from fusegen.evaluator.spmd_plan import SpmdPlan
from fusegen.hlo.ir import Module, Shape
from fusegen.hlo.sharding import Sharding, ShardingError, iota_devices, parse_sharding

__all__ = ["STATED", "LeafSharding", "resolve_output_shardings", "settle", "sharding_notes", "aliases",
           "row_major_guess"]

#: Sources that the module or its capture state (a leaf from any other source was inferred).
STATED = ("root", "capture", "alias")
_REPLICATED = Sharding("replicated", "{replicated}")


@attrs.frozen
class LeafSharding:
    """One output leaf's sharding and where it came from.

    Attributes:
        sharding: the :class:`Sharding` the leaf is assembled and split with.
        source: ``root``, ``capture``, ``alias``, ``parameter``, ``replicated``, ``shape``, ``agree`` or ``dim0``
            (see the module docstring).
        detail: what it came from, for people (``parameter 0 (%param)``, the sidecar's path, ...).
        candidates: an inferred leaf's other shardings that fit (each a LeafSharding), tried on a mismatch.
        note: what :func:`settle` did (the sharding that was first inferred and why it was left), else "".
    """

    sharding: Sharding
    source: str
    detail: str
    candidates: tuple = ()
    note: str = ""

    @property
    def inferred(self) -> bool:
        return self.source not in STATED

    @property
    def certain(self) -> bool:
        """Stated, or the only sharding that fits (a replicated leaf of no other fitting sharding)."""
        return not self.inferred or (self.source == "replicated" and not self.candidates)

    def describe(self) -> str:
        return f"{self.sharding.text} from {self.detail}"

    def to_json(self, i: int) -> dict:
        """``{"name", "sharding", "source", "from", "inferred"[, "note"]}`` (``--json``'s
        ``output_sharding_sources``)."""
        d = {"name": f"o{i}", "sharding": self.sharding.text, "source": self.source, "from": self.detail,
             "inferred": self.inferred}
        if self.note:
            d["note"] = self.note
        return d


def _same(a: Sharding, b: Sharding) -> bool:
    if a.kind != b.kind:
        return False
    if a.kind != "tiled":
        return a.kind != "maximal" or a.device == b.device
    return a.data_rank == b.data_rank and a.tiles.shape == b.tiles.shape and bool(np.array_equal(a.tiles, b.tiles))


def row_major_guess(local: tuple[int, ...], glob: tuple[int, ...], p: int) -> Sharding:
    """The sharding that cuts ``glob`` into ``local`` with devices in row-major order over the tiles (``p``
    partitions; those left over replicate: ``last_tile_dim_replicate``).

    Raises:
        ShardingError: ``glob`` is no tiling of ``local`` over a divisor of ``p``.
    """
    if len(local) != len(glob):
        raise ShardingError(f"per-partition shape {list(local)} and global {list(glob)} differ in rank")
    tiles = []
    for lo, g in zip(local, glob):
        t = -(-g // lo) if lo else 1
        if (lo == 0 and g != 0) or (lo and -(-g // t) != lo):
            raise ShardingError(f"global shape {list(glob)} is not a tiling of {list(local)}")
        tiles.append(t)
    t = int(np.prod(tiles, dtype=np.int64))
    if t == 1:
        return _REPLICATED
    if p % t:
        raise ShardingError(f"global shape {list(glob)} needs {t} tiles of {list(local)}, not a divisor of {p} "
                            "partitions")
    dims = tiles + ([p // t] if p // t > 1 else [])
    text = "{devices=[" + ",".join(map(str, dims)) + f"]<=[{p}]" + (" last_tile_dim_replicate}" if p // t > 1 else "}")
    return Sharding("tiled", text, tiles=iota_devices(dims), data_rank=len(tiles))


def _leaf_paths(shape: Shape, prefix: tuple = ()) -> list[tuple[int, ...]]:
    if not shape.is_tuple:
        return [prefix]
    return [p for k, s in enumerate(shape.tuple_shapes or ()) for p in _leaf_paths(s, prefix + (k,))]


_ALIAS = re.compile(r"\{([\d,\s]*)\}\s*:\s*\(\s*(\d+)\s*,\s*\{([\d,\s]*)\}")


def aliases(module: Module) -> dict[int, tuple[int, tuple[int, ...]]]:
    """Output leaf -> ``(parameter number, shape index in it)`` from the header's ``input_output_alias``
    (``{ {0}: (0, {}, may-alias), ... }``, ``HloInputOutputAliasConfig::ToString``)."""
    text = module.attrs.get("input_output_alias")
    if not text:
        return {}
    paths = {p: k for k, p in enumerate(_leaf_paths(module.entry.root.shape))}
    out = {}
    for m in _ALIAS.finditer(str(text)):
        at = tuple(int(x) for x in m.group(1).replace(",", " ").split())
        if at in paths:
            out[paths[at]] = (int(m.group(2)), tuple(int(x) for x in m.group(3).replace(",", " ").split()))
    return out


def _param_label(q: Any) -> str:
    return f"parameter {q.parameter_number} (%{q.name})"


def _fits(s: Sharding, glob: tuple[int, ...] | None, local: tuple[int, ...]) -> bool:
    try:
        return glob is None or s.local_shape(glob) == local
    except ShardingError:
        return False


def _distinct(items: list[tuple[Sharding, str]]) -> list[tuple[Sharding, list[str]]]:
    """Shardings that differ, each with the labels of the parameters that have it."""
    out: list[tuple[Sharding, list[str]]] = []
    for s, label in items:
        hit = next((o for o in out if _same(o[0], s)), None)
        if hit is None:
            out.append((s, [label]))
        else:
            hit[1].append(label)
    return out


def _stated_leaf(s: Sharding, source: str, detail: str, i: int, local: tuple, glob: tuple | None) -> LeafSharding:
    if not _fits(s, glob, local):
        try:
            got = list(s.local_shape(glob))
        except ShardingError as e:
            got = str(e)
        raise ShardingError(f"output o{i}: {source} sharding {s.text} (from {detail}) cuts the expected global "
                            f"shape {list(glob)} into {got}, not the per-partition {list(local)}")
    return LeafSharding(s, source, detail)


def resolve_output_shardings(module: Module, plan: SpmdPlan, per_device: list[list[np.ndarray]],
                             expected: list[np.ndarray] | None, stated: Any = None,
                             param_shardings: list[Sharding] | None = None) -> list[LeafSharding]:
    """Each output leaf's sharding and its source (see the module docstring).

    Args:
        per_device: per device, its output leaves (their shapes are the per-partition ones; without
            ``expected`` their values decide ``agree``).
        expected: the global expected leaves, or None.
        stated: a :class:`~fusegen.runtime.sharding_sidecar.StatedShardings` (capture), or None.
        param_shardings: each entry parameter's sharding (default: read from the module).

    Raises:
        ShardingError: a root sharding that does not parse; a stated sharding that does not cut the expected
            global shape into the output; an expected array that is no tiling of the per-partition output.
        fusegen.runtime.inputs.InputError: an expected array whose shape is not the capture's.
    """
    from fusegen.runtime.inputs import InputError
    from fusegen.runtime.spmd_io import param_shardings as read_params

    p = plan.num_partitions
    n = len(per_device[0])
    params = list(zip(module.entry.parameters, param_shardings or read_params(module)))
    text = module.entry.root.attrs.get("sharding")
    root = parse_sharding(text) if text else None
    alias = aliases(module)
    out = []
    for i in range(n):
        local = tuple(np.asarray(per_device[0][i]).shape)
        glob = tuple(np.asarray(expected[i]).shape) if expected is not None else None
        if root is not None:
            s = root.leaf(i) if root.kind == "tuple" else root
            out.append(_stated_leaf(s, "root", "the root's sharding", i, local, glob))
            continue
        if stated is not None:
            if glob is not None and glob != stated.global_shapes[i]:
                raise InputError(f"expected o{i} has the global shape {list(glob)}, {stated.where} says "
                                 f"{list(stated.global_shapes[i])}")
            out.append(LeafSharding(stated.shardings[i], "capture", stated.where))
            continue
        if i in alias:
            k, index = alias[i]
            q, s = next(((q, s) for q, s in params if q.parameter_number == k), (None, None))
            if q is not None:
                s = s.leaf(index[0]) if s.kind == "tuple" and index else s
                out.append(_stated_leaf(s, "alias", f"{_param_label(q)}, aliased to it", i, local, glob))
                continue
        like = [(s, _param_label(q)) for q, s in params
                if not q.shape.is_tuple and s.kind == "tiled" and tuple(q.shape.dimensions) == local
                and _fits(s, glob, local)]
        fitting = _distinct(like)
        cands = tuple(LeafSharding(s, "parameter", " and ".join(labels) + " (same per-partition shape)")
                      for s, labels in fitting)
        if glob is not None:
            try:
                guess = row_major_guess(local, glob, p)
            except ShardingError as e:
                if not cands:
                    raise ShardingError(f"output o{i}: {e}") from None
                guess = None
            if guess is not None and guess.kind == "replicated":
                out.append(LeafSharding(guess, "replicated", "its per-partition shape, which is the global one",
                                        cands))
            elif len(cands) == 1:
                alt = (LeafSharding(guess, "shape", "the shapes (row-major guess)"),) \
                    if guess is not None and not _same(guess, cands[0].sharding) else ()
                out.append(attrs.evolve(cands[0], candidates=alt))
            elif guess is None:  # uneven tiles no row-major cut makes: the parameters' own
                out.append(attrs.evolve(cands[0], source="shape", candidates=cands[1:],
                                        detail=f"{cands[0].detail} (ambiguous: " + "; ".join(
                                            f"{c.detail} say {c.sharding.text}" for c in cands) + ")"))
            else:
                why = "" if not cands else " (ambiguous: " + "; ".join(
                    f"{c.detail} say {c.sharding.text}" for c in cands) + ")"
                out.append(LeafSharding(guess, "shape", "the shapes (row-major guess)" + why,
                                        tuple(c for c in cands if not _same(c.sharding, guess))))
            continue
        first = np.asarray(per_device[0][i])
        if all(np.array_equal(np.asarray(per_device[d][i]), first, equal_nan=first.dtype.kind in "fc")
               for d in range(p)):
            out.append(LeafSharding(_REPLICATED, "agree", "the partitions' outputs, equal bitwise (replicated)"))
        elif len(cands) == 1:
            out.append(cands[0])
        elif cands:  # nothing is judged by it without a global expected: the first assembles the outputs
            others = "; ".join(f"{c.detail} say {c.sharding.text}" for c in cands[1:])
            out.append(attrs.evolve(cands[0], candidates=cands[1:], detail=f"{cands[0].detail}; ambiguous: {others}"))
        elif local:
            dims = [p] + [1] * (len(local) - 1)
            out.append(LeafSharding(row_major_guess(local, tuple(a * b for a, b in zip(local, dims)), p), "dim0",
                                    "nothing (a guess: tiled along dimension 0)"))
        else:
            out.append(LeafSharding(_REPLICATED, "dim0", "nothing (a scalar the partitions differ on: partition 0's)"))
    return out


def settle(leaves: list[LeafSharding], verdict: Any,
           judge: Callable[[list[Sharding], bool], Any]) -> list[LeafSharding]:
    """Re-judge each inferred leaf that ``verdict`` calls a mismatch against ``expected`` (see the module
    docstring); updates ``verdict.outputs`` in place and returns the leaves' final shardings.

    Args:
        judge: ``judge(shardings, with_expected)`` -> a ModuleVerdict of the whole run with those shardings
            (``with_expected=False``: kernel vs reference vs f64 only, which no sharding changes).
    """
    leaves = list(leaves)
    plain = None
    for i, leaf in enumerate(leaves):
        v = verdict.outputs[i]
        if v.status != "mismatch" or not leaf.inferred:
            continue
        if plain is None:
            plain = judge([x.sharding for x in leaves], False)
        if plain.outputs[i].status == "mismatch":
            continue  # wrong against the reference or the f64 oracle: a mismatch whatever the sharding
        for c in leaf.candidates:
            trial = [x.sharding for x in leaves]
            trial[i] = c.sharding
            w = judge(trial, True).outputs[i]
            if w.status != "mismatch":
                note = (f"judged with {c.describe()}: the {leaf.source} sharding {leaf.describe()} made it a "
                        "mismatch")
                w.reason = "; ".join(x for x in (w.reason, note) if x)
                verdict.outputs[i] = w
                leaves[i] = attrs.evolve(c, note=note)
                break
        else:
            tried = [leaf.sharding.text] + [c.sharding.text for c in leaf.candidates]
            if leaf.certain:
                v.reason = "; ".join(x for x in (v.reason, f"its sharding {leaf.describe()} is the only one that "
                                                           "fits") if x)
                continue
            v.status = "undetermined"
            v.reason = (f"cannot tell: no sharding stated for it, and none that fits ({', '.join(tried)}) makes it "
                        f"match expected (inferred {leaf.describe()}); kernel, reference and f64 agree on every "
                        "device. State it: fusegen capture's NAME.shardings.json, or a folder of "
                        "part{K}.expected.npz")
            leaves[i] = attrs.evolve(leaf, note="cannot tell")
    return leaves


def sharding_notes(leaves: list[LeafSharding]) -> list[str]:
    """A verdict line per inferred leaf: ``o1: sharding {...} inferred from parameter 1 (%param.3)``."""
    return [f"o{i}: sharding {x.describe()} (inferred)" + (f"; {x.note}" if x.note else "")
            for i, x in enumerate(leaves) if x.inferred]
