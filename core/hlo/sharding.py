"""The devices of an SPMD module: partition/replica counts, shardings, replica groups, permute pairs.

Reads the text forms XLA prints (``xla/hlo/ir/hlo_sharding.cc`` ``HloSharding::ToString``,
``xla/hlo/ir/tile_assignment.cc``, ``xla/hlo/ir/collective_device_list.cc`` and
``xla/service/collective_ops_utils.cc`` ``GetParticipatingDevices`` / ``GetCollectiveOpGroupMode``):

* module header ``num_partitions=P``, ``replica_count=R`` (both default 1); a device's global id is
  ``replica * P + partition`` (``use_global_device_ids=true`` groups count in these ids);
* shardings ``{replicated}``, ``{maximal device=D}``, ``{manual}``, ``{devices=[a,b]<=[N]}`` (iota, optionally
  ``<=[x,y]T(1,0)``), ``{devices=[a,b]0,2,1,3}`` (explicit), with ``last_tile_dim_replicate`` or
  ``last_tile_dims={replicated, manual}``, and tuple shardings ``{{...}, {...}}``;
* replica groups ``{{0,1},{2,3}}`` (explicit; ``{}`` is every device), ``[4,2]<=[2,4]T(1,0)`` (iota) and
  ``mesh['x'=2,'y'=4] {'y'}`` (mesh axes; the groups vary the listed axes, row-major in the listed order);
* ``source_target_pairs={{0,1},{1,2}}``.

Errors: :class:`ShardingError` (a ``ValueError``) with the text that does not parse.
"""

from __future__ import annotations

import math
import re
from typing import Any

import attrs
import numpy as np

__all__ = ["ShardingError", "Sharding", "parse_sharding", "parse_replica_groups", "parse_pairs", "device_counts",
           "iota_devices", "collective_groups", "group_mode"]


class ShardingError(ValueError):
    """A sharding, replica-group or pair list that does not parse (or does not fit the module's devices)."""


def device_counts(module: Any) -> tuple[int, int]:
    """``(num_partitions, replica_count)`` of a module header (``HloModuleConfig``; 1 when absent).

    Raises:
        ShardingError: a count that is not a positive integer.
    """
    out = []
    for key in ("num_partitions", "replica_count"):
        raw = str(module.attrs.get(key, "1")).strip()
        if not raw.isdigit() or int(raw) < 1:
            raise ShardingError(f"module {module.name}: {key}={raw!r} is not a positive integer")
        out.append(int(raw))
    return out[0], out[1]


def iota_devices(dims: list[int], reshape: list[int] | None = None, perm: list[int] | None = None) -> np.ndarray:
    """XLA's ``IotaTileAssignment``: ``iota(prod).reshape(reshape).transpose(perm).reshape(dims)``."""
    n = math.prod(dims)
    reshape = reshape or [n]
    if math.prod(reshape) != n:
        raise ShardingError(f"iota <={list(reshape)} has {math.prod(reshape)} devices, the tiles {list(dims)} {n}")
    a = np.arange(n, dtype=np.int64).reshape(reshape)
    if perm is not None:
        if sorted(perm) != list(range(len(reshape))):
            raise ShardingError(f"T{tuple(perm)} is not a permutation of {len(reshape)} dimensions")
        a = a.transpose(perm)
    return a.reshape(dims)


def _ints(text: str) -> list[int]:
    return [int(t) for t in re.findall(r"-?\d+", text)]


_IOTA = re.compile(r"\[([\d,\s]*)\]\s*<=\s*\[([\d,\s]*)\](?:\s*T\(([\d,\s]*)\))?")


def _iota_or_list(body: str) -> tuple[np.ndarray, str]:
    """``[a,b]<=[N]T(..)`` or ``[a,b]0,1,2,3`` at the start of ``body``; returns (array, rest of the text)."""
    m = _IOTA.match(body)
    if m:
        dims = _ints(m.group(1))
        return iota_devices(dims, _ints(m.group(2)), _ints(m.group(3)) if m.group(3) else None), body[m.end():]
    m = re.match(r"\[([\d,\s]*)\]\s*([\d,\s]*\d)", body)
    if not m:
        raise ShardingError(f"cannot read the tile assignment in {body!r}")
    dims, ids = _ints(m.group(1)), _ints(m.group(2))
    if math.prod(dims) != len(ids):
        raise ShardingError(f"tile assignment [{','.join(map(str, dims))}] needs {math.prod(dims)} devices, "
                            f"lists {len(ids)}")
    return np.asarray(ids, dtype=np.int64).reshape(dims), body[m.end():]


@attrs.frozen
class Sharding:
    """One ``sharding={...}``.

    Attributes:
        kind: ``replicated``, ``maximal``, ``manual``, ``tiled``, ``tuple`` or ``unknown``.
        tiles: ``tiled``: the tile assignment (device ids) including trailing replicated/manual dims.
        data_rank: how many leading dims of ``tiles`` tile the array (the rest replicate).
        device: ``maximal``: the device holding the array.
        elements: ``tuple``: one :class:`Sharding` per leaf.
        text: as printed.
    """

    kind: str
    text: str = ""
    tiles: Any = None
    data_rank: int = 0
    device: int = 0
    elements: tuple = ()

    def leaf(self, i: int) -> "Sharding":
        """The sharding of tuple leaf ``i`` (an array sharding applies to every leaf)."""
        if self.kind != "tuple":
            return self
        if i >= len(self.elements):
            raise ShardingError(f"tuple sharding {self.text} has {len(self.elements)} elements, no element {i}")
        return self.elements[i]

    def _position(self, device: int) -> tuple[int, ...] | None:
        hit = np.argwhere(self.tiles == device)
        return tuple(int(x) for x in hit[0][: self.data_rank]) if len(hit) else None

    def local_shape(self, global_dims: tuple[int, ...]) -> tuple[int, ...]:
        """A shard's dims for an array of ``global_dims`` (XLA pads uneven tiles up to ``ceil``)."""
        if self.kind != "tiled":
            return tuple(global_dims)
        self._check_rank(global_dims)
        return tuple(-(-g // t) for g, t in zip(global_dims, self.tiles.shape[: self.data_rank]))

    def _check_rank(self, dims: tuple[int, ...]) -> None:
        if len(dims) != self.data_rank:
            raise ShardingError(f"sharding {self.text} tiles {self.data_rank} dimensions, the array has {len(dims)}")

    def shard(self, value: np.ndarray, device: int) -> np.ndarray:
        """``device``'s shard of the global array ``value`` (a padded tile is zero-filled past the array)."""
        value = np.asarray(value)
        if self.kind != "tiled":
            return value
        pos = self._position(device)
        if pos is None:
            raise ShardingError(f"device {device} holds no tile of sharding {self.text}")
        local = self.local_shape(value.shape)
        idx = tuple(slice(p * n, (p + 1) * n) for p, n in zip(pos, local))
        part = value[idx]
        if part.shape != local:
            part = np.pad(part, [(0, n - s) for n, s in zip(local, part.shape)])
        return np.ascontiguousarray(part)

    def assemble(self, shards: list[np.ndarray], global_dims: tuple[int, ...] | None = None) -> np.ndarray:
        """The global array from every device's shard (``shards[d]`` for device ``d``); ``global_dims`` crops
        padding (default: tiles x shard dims)."""
        if self.kind == "maximal":
            return np.asarray(shards[self.device])
        if self.kind != "tiled":
            return np.asarray(shards[0])
        t = self.tiles.shape[: self.data_rank]
        local = np.asarray(shards[0]).shape
        self._check_rank(local)
        full = tuple(a * b for a, b in zip(t, local))
        out = np.zeros(full, dtype=np.asarray(shards[0]).dtype)
        for pos in np.ndindex(*t):
            d = int(self.tiles[pos + (0,) * (self.tiles.ndim - self.data_rank)])
            out[tuple(slice(p * n, (p + 1) * n) for p, n in zip(pos, local))] = shards[d]
        if global_dims is not None:
            out = out[tuple(slice(0, g) for g in global_dims)]
        return out


def _split_top(body: str) -> list[str]:
    """Split ``a, {b, c}, d`` at depth-0 commas."""
    parts, depth, cur = [], 0, []
    for ch in body:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def parse_sharding(text: str) -> Sharding:
    """A :class:`Sharding` from its printed form (with or without the outer braces).

    Raises:
        ShardingError: a form this parser does not know (the text is quoted).
    """
    t = text.strip()
    if t.startswith("{") and t.endswith("}"):
        t = t[1:-1].strip()
    t = re.sub(r"\s*metadata=\{[^{}]*\}", "", t).strip()
    if t.startswith("{"):  # tuple sharding: {{a}, {b}}
        return Sharding("tuple", text, elements=tuple(parse_sharding(p) for p in _split_top(t)))
    if t in ("replicated", ""):
        return Sharding("replicated", text)
    if t == "manual":
        return Sharding("manual", text)
    if t == "unknown" or t.startswith("unknown"):
        return Sharding("unknown", text)
    m = re.match(r"maximal\s+device=(\d+)", t)
    if m:
        return Sharding("maximal", text, device=int(m.group(1)))
    if t.startswith("devices="):
        tiles, rest = _iota_or_list(t[len("devices="):])
        rank = tiles.ndim
        if "last_tile_dim_replicate" in rest:
            rank -= 1
        m = re.search(r"last_tile_dims=\{([^}]*)\}", rest)
        if m:
            rank -= len([x for x in m.group(1).split(",") if x.strip()])
        if rank < 0:
            raise ShardingError(f"sharding {text}: more subgroup dims than tile dims")
        return Sharding("tiled", text, tiles=tiles, data_rank=rank)
    raise ShardingError(f"unsupported sharding {text!r}")


def parse_replica_groups(text: str | None) -> list[list[int]] | None:
    """Replica groups as lists of ids; ``None`` for ``{}`` / absent (every device in one group).

    Raises:
        ShardingError: text in none of the three forms.
    """
    if text is None:
        return None
    t = str(text).strip()
    if t.startswith("mesh"):
        return _mesh_groups(t)
    if t.startswith("["):
        m = _IOTA.match(t)
        if not m or len(_ints(m.group(1))) != 2:
            raise ShardingError(f"cannot read iota replica groups {t!r}")
        a = iota_devices(_ints(m.group(1)), _ints(m.group(2)), _ints(m.group(3)) if m.group(3) else None)
        return [list(map(int, row)) for row in a]
    if not (t.startswith("{") and t.endswith("}")):
        raise ShardingError(f"cannot read replica groups {t!r}")
    inner = t[1:-1].strip()
    if not inner:
        return None
    groups = [_ints(g) for g in re.findall(r"\{([^{}]*)\}", inner)]
    if not groups:
        raise ShardingError(f"cannot read replica groups {t!r}")
    return groups


def _mesh_groups(t: str) -> list[list[int]]:
    """``mesh['a'=2,'b'=4] {'b'}`` (optionally ``mesh[...]<=[...]T(..)`` device order): one group per value of
    the axes not listed, members row-major over the listed axes in the listed order."""
    m = re.match(r"mesh\s*\[([^\]]*)\]\s*((?:<=\s*\[[\d,\s]*\](?:\s*T\([\d,\s]*\))?)?)\s*\{([^}]*)\}\s*$", t)
    if not m:
        raise ShardingError(f"cannot read mesh replica groups {t!r}")
    axes = re.findall(r"'([^']+)'\s*=\s*(\d+)", m.group(1))
    if not axes:
        raise ShardingError(f"mesh replica groups {t!r} name no axes")
    names, sizes = [a for a, _ in axes], [int(s) for _, s in axes]
    order = m.group(2)
    if order:
        o = re.match(r"<=\s*\[([\d,\s]*)\](?:\s*T\(([\d,\s]*)\))?", order)
        devices = iota_devices(sizes, _ints(o.group(1)), _ints(o.group(2)) if o.group(2) else None)
    else:
        devices = iota_devices(sizes)
    listed = re.findall(r"'([^']+)'", m.group(3))
    unknown = [a for a in listed if a not in names]
    if unknown or not listed:
        raise ShardingError(f"mesh replica groups {t!r}: axes {unknown or 'none'} not in the mesh")
    keep = [names.index(a) for a in listed]
    rest = [i for i in range(len(names)) if i not in keep]
    a = devices.transpose(rest + keep).reshape(-1, math.prod(sizes[i] for i in keep))
    return [list(map(int, row)) for row in a]


def parse_pairs(text: str | None) -> list[tuple[int, int]]:
    """``source_target_pairs={{0,1},{1,0}}`` as ``[(source, target), ...]``.

    Raises:
        ShardingError: a pair that is not two ids.
    """
    if text is None:
        return []
    pairs = []
    for g in re.findall(r"\{([^{}]*)\}", str(text)):
        ids = _ints(g)
        if len(ids) != 2:
            raise ShardingError(f"source_target_pairs entry {{{g}}} is not a (source, target) pair")
        pairs.append((ids[0], ids[1]))
    return pairs


_HAS_GLOBAL_FLAG = ("all-reduce", "all-gather", "reduce-scatter", "all-reduce-start", "all-gather-start",
                    "reduce-scatter-start")


def group_mode(inst: Any) -> str:
    """XLA's ``CollectiveOpGroupMode`` of a collective: ``cross_replica``, ``cross_partition``,
    ``cross_replica_and_partition`` or ``flattened_id`` (``GetCollectiveOpGroupMode``: the ops with a
    ``use_global_device_ids`` field read it; all-to-all, collective-broadcast/-permute have none)."""
    channel = inst.attrs.get("channel_id") is not None
    if inst.opcode in _HAS_GLOBAL_FLAG:
        if str(inst.attrs.get("use_global_device_ids", "false")).strip() == "true":
            return "flattened_id"
        return "cross_replica_and_partition" if channel else "cross_replica"
    return "cross_partition" if channel else "cross_replica"


def collective_groups(inst: Any, num_partitions: int, replica_count: int) -> list[list[int]]:
    """The participant groups of a collective in global device ids (``replica * P + partition``), each in
    group order (the order results are combined and positions counted), as ``GetParticipatingDevices``.

    Raises:
        ShardingError: unreadable groups, or an id outside the module's devices.
    """
    P, R = num_partitions, replica_count
    mode = group_mode(inst)
    groups = parse_replica_groups(inst.attrs.get("replica_groups"))
    limit = {"cross_replica": R, "cross_partition": P, "cross_replica_and_partition": R, "flattened_id": P * R}[mode]
    if groups is None:
        groups = [list(range(limit))]
    for g in groups:
        bad = [i for i in g if not 0 <= i < limit]
        if bad:
            raise ShardingError(f"%{inst.name}: replica group {g} names ids {bad} outside 0..{limit - 1} "
                                f"({mode.replace('_', ' ')}, num_partitions={P}, replica_count={R})")
    if mode == "flattened_id":
        return [list(g) for g in groups]
    if mode == "cross_replica":
        return [[r * P + p for r in g] for p in range(P) for g in groups]
    if mode == "cross_partition":
        return [[r * P + p for p in g] for r in range(R) for g in groups]
    return [[r * P + p for r in g for p in range(P)] for g in groups]
