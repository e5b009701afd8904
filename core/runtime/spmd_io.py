"""Global arrays in and out of an SPMD module: split inputs by each parameter's sharding, reassemble outputs.

* Inputs: ``--inputs GLOBAL.npz`` holds the arrays the program saw (``p0``, ``p1``, ... or parameter names);
  each parameter's ``sharding={...}`` gives every device its shard (:meth:`Sharding.shard`; a parameter
  without one must be given at its per-partition shape and is replicated). ``--inputs DIR`` is a folder of
  per-partition ``part{K}.inputs.npz`` (partition ``K``'s shards at the module's parameter shapes).
* Outputs: each output leaf is reassembled, and a global ``--expected`` split per device, by the leaf's sharding,
  which :mod:`fusegen.runtime.spmd_outputs` decides (the root's, the capture's, an aliased parameter's, ...) and
  names the source of.

Partition ``K`` of a tile assignment is device ``K``'s tile; with replicas, replica 0's partitions are the ones
reassembled and every replica gets the same input shards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fusegen.evaluator.spmd_plan import SpmdPlan
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Module
from fusegen.hlo.sharding import Sharding, ShardingError, parse_sharding
from fusegen.runtime.inputs import (InputError, _read_npz_member, check_array, check_npz_headers, from_npz_dtype,
                                    load_expected, load_inputs)

__all__ = ["param_shardings", "split_inputs", "load_spmd_inputs", "load_expected_parts", "assemble_leaves",
           "split_leaves", "seeded_inputs"]


def param_shardings(module: Module) -> list[Sharding]:
    """Each entry parameter's sharding (``replicated`` where none is printed).

    Raises:
        InputError: a sharding that does not parse (names the parameter).
    """
    out = []
    for p in module.entry.parameters:
        text = p.attrs.get("sharding")
        try:
            out.append(parse_sharding(text) if text else Sharding("replicated", "{replicated}"))
        except ShardingError as e:
            raise InputError(f"{module.filename}: parameter {p.parameter_number} (%{p.name}): {e}") from None
    return out


def split_inputs(module: Module, plan: SpmdPlan, arrays: list[np.ndarray], where: str) -> list[list[Any]]:
    """Per device, its shard of every global entry argument.

    Raises:
        InputError: a global array whose shape does not shard to the parameter's per-partition shape.
    """
    shardings = param_shardings(module)
    per_device: list[list[Any]] = [[] for _ in range(plan.devices)]
    for p, s, a in zip(module.entry.parameters, shardings, arrays):
        if p.shape.is_tuple:
            raise InputError(f"{where}: parameter {p.parameter_number} (%{p.name}) is a tuple; global tuple "
                             "inputs are not split (pass a folder of part{K}.inputs.npz)")
        local = tuple(p.shape.dimensions)
        try:
            got = s.local_shape(tuple(a.shape))
        except ShardingError as e:
            raise InputError(f"{where}: parameter {p.parameter_number} (%{p.name}): {e}") from None
        if got != local:
            raise InputError(f"{where}: array for parameter {p.parameter_number} (%{p.name}) has the global shape "
                             f"{list(a.shape)}, which sharding {s.text} cuts into shards of {list(got)}, not the "
                             f"module's {list(local)}" + (" (it looks like one partition's shard: pass a folder of "
                                                          "part{K}.inputs.npz)" if tuple(a.shape) == local else ""))
        for d in range(plan.devices):
            per_device[d].append(s.shard(a, plan.partition(d)))
    return per_device


def _read_global(module: Module, path: Path) -> list[np.ndarray]:
    # headers first, as for one device: a small file inflating to gigabytes is refused before it is read;
    # a global shape is judged by split_inputs (against the sharding), so only the dtype is checked here
    def check_global(where: Any, key: str, p: Any, shape: tuple, dtype: np.dtype) -> np.dtype:
        return check_array(where, key, p, tuple(p.shape.dimensions), dtype)

    check_npz_headers(module, path, check_global)
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as e:
        raise InputError(f"{path}: cannot read inputs: {e}") from None
    out = []
    with data:
        for p in module.entry.parameters:
            n = p.parameter_number
            key = f"p{n}" if f"p{n}" in data.files else p.name
            if key not in data.files:
                raise InputError(f"{path}: no array 'p{n}' (or '{p.name}') for parameter {n} (has: "
                                 f"{', '.join(sorted(data.files)) or 'none'})")
            want = dtypes.numpy_dtype(p.shape.element_type)
            try:
                arr = from_npz_dtype(_read_npz_member(data, key), want)
            except (ValueError, OSError, EOFError) as e:
                raise InputError(f"{path}: array '{key}' cannot be read: {e}") from None
            if arr.dtype != want:
                raise InputError(f"{path}: array '{key}' for parameter {n} (%{p.name}) is {arr.dtype}, the parameter "
                                 f"{p.shape.element_type}")
            out.append(arr)
    return out


def load_spmd_inputs(module: Module, plan: SpmdPlan, path: str | Path) -> list[list[Any]]:
    """Per device, its entry arguments from ``--inputs``: a global ``.npz`` or a folder of per-partition ones.

    Raises:
        InputError: unreadable, missing or mis-shaped arrays (names the file and parameter).
    """
    path = Path(path)
    if path.is_dir():
        parts = []
        for k in range(plan.num_partitions):
            f = path / f"part{k}.inputs.npz"
            if not f.exists():
                raise InputError(f"{path}: no {f.name} for partition {k} of {plan.num_partitions}")
            parts.append(load_inputs(module, f))
        return [list(parts[plan.partition(d)]) for d in range(plan.devices)]
    return split_inputs(module, plan, _read_global(module, path), str(path))


def seeded_inputs(module: Module, plan: SpmdPlan, seed: int) -> list[list[Any]]:
    """Seeded random shards: every device its own draw (seed + partition) of sharded parameters, the same
    arrays for replicated ones (as a global array split would give)."""
    from fusegen.runtime.inputs import make_inputs

    shardings = param_shardings(module)
    draws = [make_inputs(module, seed + k) for k in range(plan.num_partitions)]
    return [[draws[plan.partition(d) if s.kind == "tiled" else 0][i] for i, s in enumerate(shardings)]
            for d in range(plan.devices)]


def load_expected_parts(module: Module, plan: SpmdPlan, path: str | Path) -> list[list[np.ndarray]]:
    """Per partition, its shard of every output leaf from ``DIR/part{K}.expected.npz``.

    Raises:
        ValueError: a missing or unreadable file or array.
    """
    n = len(module.entry.root.shape.leaves())
    out = []
    for k in range(plan.num_partitions):
        f = Path(path) / f"part{k}.expected.npz"
        if not f.exists():
            raise ValueError(f"--expected {path}: no {f.name} for partition {k} of {plan.num_partitions}")
        out.append(load_expected(f, n))
    return out


def assemble_leaves(shardings: list[Sharding], plan: SpmdPlan, per_device: list[list[np.ndarray]],
                    global_shapes: list[tuple[int, ...] | None] | None = None) -> list[np.ndarray]:
    """The global output leaves from every device's (replica 0's partitions'), cropped to ``global_shapes``
    (an uneven tiling's padding) where given."""
    out = []
    for i, s in enumerate(shardings):
        shards = [np.asarray(per_device[k][i]) for k in range(plan.num_partitions)]
        dims = global_shapes[i] if global_shapes is not None else None
        out.append(s.assemble(shards, dims if s.kind == "tiled" else None))
    return out


def split_leaves(shardings: list[Sharding], plan: SpmdPlan, arrays: list[np.ndarray]) -> list[list[np.ndarray]]:
    """Per device, its shard of every global output leaf (the expected answer per device)."""
    return [[s.shard(np.asarray(a), plan.partition(d)) for s, a in zip(shardings, arrays)]
            for d in range(plan.devices)]
