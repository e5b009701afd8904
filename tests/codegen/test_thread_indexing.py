"""Thread-id indexing maps of the native emitters (XLA's ``ComputeThreadIdTo{Output,Input}Indexing``).

Checked three ways: the seed document's GELU loop map (text and semantics), exhaustive enumeration on small
fusions (every output / input element is reached by exactly one thread and loop iteration, and only
in-range elements), and ``fusegen explain --fusion NAME --indexing``.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter

import pytest
from click.testing import CliRunner

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.cli.main import cli
from fusegen.codegen.thread_indexing import emitter_thread_indexing
from fusegen.device import get_device
from fusegen.hlo.parser import parse_module
from fusegen.indexing import IndexingMap, parse_indexing_map, remove_unused_vars, semantically_equal

from hlo_modules import GELU

H200 = get_device("h200")
SEED_MAP = ("(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096, (bl_x floordiv 8) mod 512, "
            "(bl_x mod 8) * 512 + th_x * 4 + vector_index), "
            "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]")


def _fusion(text: str, name: str | None = None):
    m = parse_module(text, "t.hlo")
    return next(i for c in m.computations for i in c.instructions
                if i.opcode == "fusion" and (name is None or i.name == name))


def test_seed_gelu_thread_to_output_map():
    f = _fusion(GELU)
    m = emitter_thread_indexing(f, 0, None, H200)
    assert str(m).startswith("(th_x, th_y, th_z, bl_x, bl_y, bl_z)[chunk_id, unroll_id] -> "
                             "(bl_x / 4096, (bl_x / 8) mod 512, (bl_x mod 8) * 512 + th_x * 4 + unroll_id), "
                             "domain: th_x in [0, 127], th_y in [0, 0], th_z in [0, 0], bl_x in [0, 24575]")
    seed = parse_indexing_map(SEED_MAP)
    short = remove_unused_vars(m)[0]
    assert semantically_equal(short, seed)
    assert str(short.replace(names={"d": ("th_x", "bl_x"), "s": ("vector_index",)})) == str(seed)
    # the parameter is read where the output is written
    assert semantically_equal(emitter_thread_indexing(f, 0, 0, H200), m)


def test_seed_transpose_20x40_output_to_input_map():
    from fusegen.indexing.analysis import compute_output_to_input_indexing

    t = parse_module("HloModule t\nENTRY e {\n  p = f32[20,40] parameter(0)\n"
                     "  ROOT t = f32[40,20] transpose(p), dimensions={1,0}\n}\n", "t").entry.root
    (m,) = [oi.map for oi in compute_output_to_input_indexing(t).indexing_maps[0]]
    assert semantically_equal(m, parse_indexing_map("(d0, d1) -> (d1, d0), domain: d0 in [0, 39], d1 in [0, 19]"))


def _points(m: IndexingMap):
    """Every result of ``m`` over its domain (constraints applied)."""
    ranges = [range(iv.lower, iv.upper + 1) for iv in list(m.dims) + list(m.syms)]
    nd = m.num_dims
    for p in itertools.product(*ranges):
        if m.constraints_satisfied(p[:nd], p[nd:]):
            yield m.evaluate(p[:nd], p[nd:])


def _assert_covers_once(m: IndexingMap, dims: tuple[int, ...]):
    seen = Counter(_points(m))
    want = set(itertools.product(*[range(n) for n in dims]))
    assert set(seen) == want, (m, sorted(set(seen) ^ want)[:5])
    assert max(seen.values()) == 1, m


CASES = {
    "row": ("f32[8,300]", "f32[8]", "{1}"),
    "multi_row": ("f32[512,16]", "f32[512]", "{1}"),
    "column": ("f32[70,40]", "f32[40]", "{0}"),
    "small_column": ("f32[3,200,8]", "f32[3,8]", "{1}"),
}


def _reduce_module(in_shape: str, out_shape: str, dims: str) -> str:
    return f"""HloModule r
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
fused {{
  p = {in_shape} parameter(0)
  z = f32[] constant(0)
  ROOT r = {out_shape} reduce(p, z), dimensions={dims}, to_apply=add
}}
ENTRY e {{
  x = {in_shape} parameter(0)
  ROOT f = {out_shape} fusion(x), kind=kInput, calls=fused
}}
"""


@pytest.mark.parametrize("case", sorted(CASES))
def test_reduction_maps_read_every_input_once_and_write_every_output_once(case):
    in_shape, out_shape, dims = CASES[case]
    f = _fusion(_reduce_module(in_shape, out_shape, dims))
    want = {"row": "RowReductionFusion", "multi_row": "MultiRowReductionFusion", "column": "ColumnReductionFusion",
            "small_column": "SmallColumnReductionFusion"}[case]
    from fusegen_plugins.emitters.reduction import create_reduction_emitter

    em = create_reduction_emitter(FusionAnalysis.create(f, H200))
    assert type(em).__name__ == want
    _assert_covers_once(em.thread_id_to_input_indexing(0, 0), f.operands[0].shape.dimensions)
    _assert_covers_once(em.thread_id_to_output_indexing(0), f.shape.dimensions)
    assert em.thread_id_to_input_indexing(0, 1).is_undefined  # the init value


TRANSPOSE = """HloModule t
fused {
  p = f32[70,45] parameter(0)
  ROOT t = f32[45,70] transpose(p), dimensions={1,0}
}
ENTRY e {
  x = f32[70,45] parameter(0)
  ROOT f = f32[45,70] fusion(x), kind=kInput, calls=fused
}
"""

LOOP = """HloModule l
fused {
  p = f32[3,50] parameter(0)
  b = f32[3,50,7] broadcast(p), dimensions={0,1}
  ROOT e = f32[3,50,7] exponential(b)
}
ENTRY e {
  x = f32[3,50] parameter(0)
  ROOT f = f32[3,50,7] fusion(x), kind=kLoop, calls=fused
}
"""


def test_transpose_maps_cover_input_and_output_once():
    f = _fusion(TRANSPOSE)
    _assert_covers_once(emitter_thread_indexing(f, 0, None, H200), (45, 70))
    _assert_covers_once(emitter_thread_indexing(f, 0, 0, H200), (70, 45))


def test_loop_maps_cover_output_once_and_compose_with_the_broadcast():
    f = _fusion(LOOP)
    out = emitter_thread_indexing(f, 0, None, H200)
    _assert_covers_once(out, (3, 50, 7))
    inp = emitter_thread_indexing(f, 0, 0, H200)  # exponential's operand: the broadcast
    assert semantically_equal(inp, out)


def test_explain_indexing_json_and_text(tmp_path):
    p = tmp_path / "t.hlo"
    p.write_text(TRANSPOSE)
    res = CliRunner().invoke(cli, ["explain", str(p), "--fusion", "f", "--indexing", "--json"])
    assert res.exit_code == 0, res.output
    (f,) = json.loads(res.output)["fusions"]
    idx = f["indexing"]
    assert idx["emitter"] == "TransposeFusion"
    (root,) = idx["roots"]
    out = parse_indexing_map(root["thread_to_output"])
    assert semantically_equal(out, emitter_thread_indexing(_fusion(TRANSPOSE), 0, None, H200))
    assert root["operands"][0]["thread_to_input"].startswith("(th_x, th_y, th_z, bl_x, bl_y, bl_z)[s0, s1] -> (")
    text = CliRunner().invoke(cli, ["explain", str(p), "--fusion", "f", "--indexing"])
    assert text.exit_code == 0 and "thread -> output: (th_x" in text.output
    bad = CliRunner().invoke(cli, ["explain", str(p), "--indexing"])
    assert bad.exit_code == 2 and "--indexing needs --fusion" in bad.output
