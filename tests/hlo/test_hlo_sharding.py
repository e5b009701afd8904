"""Shardings, replica groups and group modes (fusegen.hlo.sharding) against what jax/XLA print and place.

The tiled cases come from jax itself (a subprocess with 8 host devices): ``NamedSharding`` over 1- to 3-D meshes
prints the HLO sharding XLA puts on a parameter (iota tile assignments, transposes, ``last_tile_dim_replicate``)
and ``devices_indices_map`` says which slice each device holds; fusegen's parse of the text must cut the same
slices (padded past an uneven end) and reassemble the global array.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from xla_oracle import JAX_ERROR

from fusegen.hlo.parser import parse_module
from fusegen.hlo.sharding import (ShardingError, collective_groups, group_mode, parse_pairs, parse_replica_groups,
                                  parse_sharding)

JAX_CASES = r"""
import os, json
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
devs = np.array(jax.devices()[:8])
out = []
for mshape, spec, shape in [((2, 4), P("a", "b"), (8, 12)), ((2, 4), P("b", "a"), (8, 12)),
                            ((2, 4), P("b"), (8, 6)), ((2, 2, 2), P(("a", "c"), None), (8, 4)),
                            ((2, 2, 2), P("c", ("b", "a")), (4, 8)), ((8,), P(None, "a"), (3, 16)),
                            ((2, 4), P(), (4, 4))]:
    mesh = Mesh(devs.reshape(mshape), ("a", "b", "c")[:len(mshape)])
    s = NamedSharding(mesh, spec)
    flat = list(mesh.devices.flat)
    m = {flat.index(d): [[sl.start or 0, n if sl.stop is None else sl.stop] for sl, n in zip(idx, shape)]
         for d, idx in s.devices_indices_map(shape).items()}
    out.append({"text": str(s._to_xla_hlo_sharding(len(shape))), "shape": shape, "map": m})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def jax_shardings():
    if JAX_ERROR is not None:
        pytest.skip(JAX_ERROR)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", JAX_CASES], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_jax_shardings_cut_the_slices_jax_places(jax_shardings):
    texts = {c["text"] for c in jax_shardings}
    assert any("T(" in t for t in texts) and any("last_tile_dim_replicate" in t for t in texts)
    for case in jax_shardings:
        s = parse_sharding(case["text"])
        shape = tuple(case["shape"])
        g = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        shards = []
        for d in range(8):
            want = g[tuple(slice(a, b) for a, b in case["map"][str(d)])]
            got = s.shard(g, d)
            assert got.shape == s.local_shape(shape), case
            np.testing.assert_array_equal(got, want, err_msg=str(case))
            shards.append(got)
        np.testing.assert_array_equal(s.assemble(shards, shape), g, err_msg=str(case))


@pytest.mark.parametrize("text, kind, tiles, rank", [
    ("{replicated}", "replicated", None, 0),
    ("{maximal device=3}", "maximal", None, 0),
    ("{manual}", "manual", None, 0),
    ("{devices=[2,2]0,2,1,3}", "tiled", [[0, 2], [1, 3]], 2),
    ("{devices=[2,1,2]<=[4] last_tile_dim_replicate}", "tiled", [[[0, 1]], [[2, 3]]], 2),
    ("{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dims={manual}}", "tiled", [[[0, 2]], [[1, 3]]], 2),
    ("{devices=[2,1]<=[2] metadata={op_name=\"x\"}}", "tiled", [[0], [1]], 2),
])
def test_sharding_forms(text, kind, tiles, rank):
    s = parse_sharding(text)
    assert s.kind == kind
    if tiles is not None:
        assert s.tiles.tolist() == tiles and s.data_rank == rank


def test_uneven_tiles_are_padded_and_cropped():
    # XLA pads the last tile of a dimension that does not divide: 10 over 4 tiles is 3, 3, 3, 1 (+2 padding)
    s = parse_sharding("{devices=[1,4]<=[4]}")
    g = np.arange(20.0).reshape(2, 10)
    assert s.local_shape((2, 10)) == (2, 3)
    shards = [s.shard(g, d) for d in range(4)]
    assert shards[3].tolist() == [[9.0, 0.0, 0.0], [19.0, 0.0, 0.0]]
    np.testing.assert_array_equal(s.assemble(shards, (2, 10)), g)


def test_tuple_and_maximal_shardings_split_and_assemble():
    s = parse_sharding("{{replicated}, {devices=[1,2]<=[2]}, {maximal device=1}}")
    assert [e.kind for e in s.elements] == ["replicated", "tiled", "maximal"]
    x = np.arange(8.0).reshape(2, 4)
    assert s.leaf(1).shard(x, 1).tolist() == [[2.0, 3.0], [6.0, 7.0]]
    assert s.leaf(2).assemble([np.zeros(2), np.ones(2)]).tolist() == [1.0, 1.0]
    with pytest.raises(ShardingError, match="no element 3"):
        s.leaf(3)
    with pytest.raises(ShardingError, match="unsupported sharding"):
        parse_sharding("{shard_as 1}")


def test_replica_group_spellings():
    assert parse_replica_groups("{{0,1},{2,3}}") == [[0, 1], [2, 3]]
    assert parse_replica_groups("{}") is None
    assert parse_replica_groups("[4,2]<=[2,4]T(1,0)") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert parse_replica_groups("[2,4]<=[8]") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert parse_replica_groups("mesh['axis_0'=2,'axis_1'=1] {'axis_0'}") == [[0, 1]]
    assert parse_replica_groups("mesh['x'=2,'y'=4] {'x'}") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert parse_replica_groups("mesh['x'=2,'y'=4] {'y'}") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert parse_replica_groups("mesh['x'=2,'y'=2,'z'=2] {'z','x'}") == [[0, 4, 1, 5], [2, 6, 3, 7]]
    assert parse_pairs("{{0,1},{1,2}}") == [(0, 1), (1, 2)]
    with pytest.raises(ShardingError, match="not in the mesh"):
        parse_replica_groups("mesh['x'=2] {'q'}")


def _inst(attrs: str, opcode: str = "all-reduce"):
    text = f"""HloModule m
add {{ a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT c = f32[] add(a, b) }}
ENTRY e {{
  p = f32[4] parameter(0)
  ROOT r = f32[4] {opcode}(p), {attrs}{', to_apply=add' if opcode == 'all-reduce' else ''}
}}
"""
    return parse_module(text).entry.root


@pytest.mark.parametrize("attrs, opcode, mode, groups", [
    # replica ids, per partition (no channel): P=2, R=2 -> global ids r*2+p
    ("replica_groups={{0,1}}", "all-reduce", "cross_replica", [[0, 2], [1, 3]]),
    ("channel_id=1, replica_groups={{0,1}}", "all-reduce", "cross_replica_and_partition", [[0, 1, 2, 3]]),
    ("channel_id=1, replica_groups={{0,3},{1,2}}, use_global_device_ids=true", "all-reduce", "flattened_id",
     [[0, 3], [1, 2]]),
    ("channel_id=1, replica_groups={{0,1}}, dimensions={0}", "all-to-all", "cross_partition", [[0, 1], [2, 3]]),
    ("replica_groups={}, dimensions={0}", "all-to-all", "cross_replica", [[0, 2], [1, 3]]),
])
def test_group_modes_follow_get_participating_devices(attrs, opcode, mode, groups):
    inst = _inst(attrs, opcode)
    assert group_mode(inst) == mode
    assert collective_groups(inst, num_partitions=2, replica_count=2) == groups
