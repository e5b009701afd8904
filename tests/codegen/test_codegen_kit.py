"""The emitter author's kit (``fusegen.codegen.kit``, issue 19 point 5): affine expressions and indexing maps as
Triton index arithmetic (values checked against ``AffineExpr.evaluate`` and, through a kernel in Triton's
interpreter, against numpy), delinearize/linearize over physical layouts, and the thread-id protocol of
``LinearKernelIndexing`` checked element by element against the lanes of the kernel it describes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import kit, triton_runtime
from fusegen.codegen.elemental import ElementalGenerator, KernelContext
from fusegen.hlo.parser import parse_module
from fusegen.indexing import Interval, IndexingMap, const, dim, sym

GATHER_ROWS = """HloModule m
fused {
  p = f32[6,4]{0,1} parameter(0)
  ROOT r = f32[24]{0} reshape(p)
}
ENTRY e {
  p = f32[6,4]{0,1} parameter(0)
  ROOT f = f32[24]{0} fusion(p), kind=kLoop, calls=fused
}
"""


def _fusion(text: str = GATHER_ROWS):
    return parse_module(text, "kit.hlo").entry.root


def _gen(fusion):
    ctx = KernelContext("tl.int32", [o.shape for o in fusion.operands])
    return ElementalGenerator(ctx, fusion.fused_computation)


@pytest.mark.parametrize("e", [dim(0) * 7 + dim(1).floordiv(3), (dim(0) + sym(0) * 5).mod(4),
                               dim(1).mod(5).floordiv(2) * 3 + 11, const(6) - dim(0)])
def test_index_expr_of_known_values_is_the_expressions_value(e):
    g = _gen(_fusion())
    for d0, d1, s0 in itertools.product(range(4), range(9), range(3)):
        assert kit.index_expr(g, e, (d0, d1), (s0,)) == e.evaluate((d0, d1), (s0,)), (e, d0, d1, s0)


def test_index_expr_of_tensors_is_shared_index_arithmetic():
    g = _gen(_fusion())
    a = kit.index_expr(g, dim(0) * 4 + dim(1), ("x", "y"))
    b = kit.index_expr(g, dim(0) * 4 + dim(1), ("x", "y"))
    assert isinstance(a, str) and a == b  # computed once per kernel
    assert any("x * 4" in line for line in g.ctx.body.lines)


def test_apply_indexing_map_refuses_a_division_of_a_possibly_negative_value():
    g = _gen(_fusion())
    m = IndexingMap([(dim(0) - 3).floordiv(2)], [Interval(0, 9)])
    with pytest.raises(kit.EmitterUnsupported, match="may be negative"):
        kit.apply_indexing_map(g, m, ("x",))
    with pytest.raises(kit.EmitterUnsupported, match="cannot be applied to 2 dims"):
        kit.apply_indexing_map(g, m, ("x", "y"))
    ok = IndexingMap([(dim(0) + 3).floordiv(2)], [Interval(0, 9)])
    assert kit.apply_indexing_map(g, ok, (5,)) == (4,)


def test_logical_index_and_physical_offset_follow_the_layout():
    shape = _fusion().operands[0].shape  # f32[6,4]{0,1}: dimension 0 is minor
    g = _gen(_fusion())
    assert kit.logical_index(g, 9, shape) == (3, 1)  # 9 = 3 + 1 * 6
    assert kit.physical_offset(g, (3, 1), shape) == 9
    idx = kit.logical_index(g, "lin_c", shape)
    assert kit.physical_offset(g, idx, shape) == "lin_c"  # the round trip costs nothing


class _RowMajorRead(kit.LinearKernelIndexing, kit.FusionEmitter):
    """out[i] = p[m(i)] with m written by hand over the operand's logical index (a row-major reshape read
    through a column-major buffer), symbols included: s0 is an offset the kernel binds to 0."""

    name = "RowMajorRead"
    MAP = IndexingMap([(dim(0) + sym(0)).floordiv(4), (dim(0) + sym(0)).mod(4)], [Interval(0, 23)], [Interval(0, 0)])

    def emit(self):
        out = self.fusion.shape
        param = kit.fused_parameter(self, 0)

        def body(gen, lin_c):
            (i,) = kit.logical_index(gen, lin_c, out)
            src = kit.apply_indexing_map(gen, self.MAP, (i,), (0,))
            ptr = gen.ctx.param("output", 0, out, "out")
            kit.store_line(gen, ptr, kit.physical_offset(gen, (i,), out), gen.value(param, src), out.element_type,
                           gen.ctx.mask)

        return kit.EmittedFusion(emitter=self.name, kernels=(kit.build_linear_kernel(self, "rm", out.numel, body),))


def test_a_kernel_built_on_a_map_computes_the_reshape():
    fusion = _fusion()
    em = _RowMajorRead(FusionAnalysis.create(fusion))
    x = np.arange(24, dtype=np.float32).reshape(6, 4) * 1.5
    (out,) = triton_runtime.run_fusion(em.emit(), [x], fusion)
    np.testing.assert_array_equal(out, x.reshape(24))
    # the kit never mentions the operand's layout: gen.value loaded p at its {0,1} physical offset
    with pytest.raises(kit.EmitterUnsupported, match=r"parameter\(3\)"):
        kit.fused_parameter(em, 3)


@pytest.mark.parametrize("dims, m2m", [((10, 30), (0, 1)), ((7,), (0,)), ((3, 5, 40), (2, 1, 0))])
def test_linear_kernel_indexing_names_the_element_each_lane_writes(dims, m2m):
    layout = "{" + ",".join(map(str, m2m)) + "}"
    shape = f"f32[{','.join(map(str, dims))}]{layout}"
    text = (f"HloModule m\nfused {{\n  p = {shape} parameter(0)\n  ROOT n = {shape} negate(p)\n}}\n"
            f"ENTRY e {{\n  p = {shape} parameter(0)\n  ROOT f = {shape} fusion(p), kind=kLoop, calls=fused\n}}\n")
    fusion = _fusion(text)
    em = _RowMajorRead(FusionAnalysis.create(fusion))
    launch = em.launch_dimensions()
    block, warps = kit.choose_block(fusion.shape.numel)
    assert (launch.grid, launch.num_warps) == ((-(-fusion.shape.numel // block),), warps)
    m = em.thread_id_to_output_indexing(0)
    threads, unroll = launch.threads3[0], m.syms[1].upper + 1
    assert threads * unroll == block
    seen = []
    g = _gen(fusion)
    for bl, th, u in itertools.product(range(launch.grid[0]), range(threads), range(unroll)):
        point = (th, 0, 0, bl, 0, 0)
        if not m.constraints_satisfied(point, (0, u)):
            continue
        lane = bl * block + th * unroll + u  # the physical linear index the kernel's lane stores at
        assert m.evaluate(point, (0, u)) == kit.logical_index(g, lane, fusion.shape), (point, u)
        seen.append(lane)
    assert sorted(seen) == list(range(fusion.shape.numel))  # every element, once
    to_in = em.thread_id_to_input_indexing(0, 0)
    assert str(to_in).startswith("(th_x, th_y, th_z, bl_x, bl_y, bl_z)[chunk_id, unroll_id] -> (")
