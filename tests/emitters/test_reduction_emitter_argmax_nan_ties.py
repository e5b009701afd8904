"""Issue 42 item 1: argmax / argmin with NaN ties, on every tile path of the reduction emitter.

XLA's rule for jax's argmax / argmin: NaN wins, and among equal values (two NaNs count as equal) the lower index
wins, which is what XLA's in-order fold (``acc = f(acc, x)``) gives, and float64 numpy's argmax. jax's reducer
keeps its first argument when both values are NaN, so it is only right when that argument holds the earlier
elements. A row reduction's lanes hold interleaved parts of the row (lane ``l``: elements ``l``, ``l + TR``, ...)
and ``tl.reduce`` folds them in an order of its own, so the combine orders its two sides by the reducer's index
operand (``combine_function(order_by=position_operand(...))``). Field report: ``jnp.argmax`` over the last axis
of an f32[7,33,65] gave the later NaN's index (51) where XLA gives the first (25).

The modules are XLA:GPU's own (``tests/data/argmax_nan_ties``, captured from jax). Each kernel runs in the
interpreter at XLA's block and grid (the compiled program's constexprs) and at the interpreter's wider variant,
on rows of edge values (two NaNs with the later one in a lower lane, NaN first and last, all NaN, -0/+0, inf
ties, all inf, finite ties), and is judged against float64 numpy; the reference evaluator against numpy; numpy
against XLA:CPU (jaxlib); the sweep corpus's argmax programs against XLA:CPU's stored answers.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import ml_dtypes
import numpy as np
import pytest

from conftest import CORPUS
from fusion_harness import load, operands_and_reference

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime
from fusegen.codegen import triton_source as ts
from fusegen.codegen.kernel import KernelParam, KernelSource, LaunchDimensions
from fusegen.codegen.reduction_codegen import position_operand
from fusegen.device import get_device
from fusegen.dispatch import get_emitter_fusion_kind, get_fusion_emitter
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.evaluator.reduce import SEQUENTIAL_LIMIT
from fusegen.hlo.ir import Shape
from fusegen_plugins.emitters.reduction import MultiRowReductionFusion

DATA = Path(__file__).resolve().parents[1] / "data" / "argmax_nan_ties"
_NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "s32": np.int32}

#: module -> (emitter, steps NIT, EXACT taken at XLA's block, validity-flag combine): the tile path it covers
FAST = {
    "argmax_f32_3x3x65_ax2": ("RowReductionFusion", 3, False, False),  # the field report's path: masked rows, tail
    "argmin_f32_16x100_ax1": ("RowReductionFusion", 2, True, False),  # whole tiles of rows, tail in step 2
    "argmax_f32_16x256_ax1": ("RowReductionFusion", 4, True, False),  # whole tiles, no mask at all
    "argmax_f32_16x100_ax1_x64": ("RowReductionFusion", 2, True, False),  # s64 index
    "argmax_f16_16x130_ax1": ("RowReductionFusion", 3, True, False),
    "argmin_f32_8x1100_ax1": ("RowReductionFusion", 2, True, False),  # 1024-lane steps, 2 rows a block
    "argmax_f32_16x8_ax1": ("RowReductionFusion", 1, True, True),  # one step, row shorter than its tile
    "argmin_f32_33x2_ax1": ("RowReductionFusion", 1, False, True),  # the same with a partial block of rows
    "argmin_f32_64x32_ax1": ("RowReductionFusion", 1, True, False),  # one step, row = tile
    "argmax_s32_8x65_ax1": ("RowReductionFusion", 3, True, False),  # s32 values
    "argmax_f32_40x33_ax0": ("ColumnReductionFusion", 2, False, False),
    "argmin_f32_300x37_ax0": ("ColumnReductionFusion", 3, False, False),  # 37 columns on a 32-column tile
    "argmin_bf16_128x64_ax0": ("ColumnReductionFusion", 2, False, False),  # bf16 converted in the fusion
    "argmin_s32_33x40_ax0": ("ColumnReductionFusion", 2, False, False),
    # XLA's 128 threads x 2-element vectors a row step: 16 rows of the 16 columns, 32 steps
    "argmax_f32_512x16_ax0": ("SmallColumnReductionFusion", 32, False, False),
    "argmin_f32_512x16_ax0_x64": ("SmallColumnReductionFusion", 32, False, False),  # iota a fusion of its own
}
#: the same at XLA's block for larger launches (seconds each in the interpreter)
SLOW = {
    "argmax_f32_7x33x65_ax2": ("RowReductionFusion", 3, False, False),  # the field report's module
    "argmax_f32_256x512_ax1": ("RowReductionFusion", 8, True, False),
    "argmin_f32_64x2048_ax1": ("RowReductionFusion", 8, True, False),
    "argmax_f32_1000x16_ax1": ("RowReductionFusion", 1, True, True),
    "argmin_f32_4x5000_ax1": ("RowReductionFusion", 2, True, False),  # 4096-lane steps
    "argmax_f32_2x4500_ax1": ("RowReductionFusion", 2, True, False),
    "argmax_f32_8x8192_ax1": ("RowReductionFusion", 8, True, False),
    "argmin_f32_7x33x65_ax2": ("RowReductionFusion", 3, False, False),
    "argmax_f32_7x33x65_ax1": ("ColumnReductionFusion", 2, False, False),
    "argmin_f32_2048x256_ax0": ("ColumnReductionFusion", 32, False, False),
}


def _parse_name(stem: str) -> tuple[str, str, tuple[int, ...], int]:
    op, dt, shape, axis = stem.split("_")[:4]
    return op, dt, tuple(int(s) for s in shape.split("x")), int(axis.removeprefix("ax"))


def _edge_rows(rows: int, n: int, tr: int, floating: bool, rng: np.random.Generator) -> np.ndarray:
    """``rows`` float64 rows of ``n`` values, a pattern each in turn. The first pattern puts the later of two
    NaNs in a lower lane than the earlier one (lane = position % ``tr``), where the lanes' fold meets them out of
    order."""
    x = rng.standard_normal((rows, n))
    big, small = (np.nan, np.nan) if floating else (2.0 ** 31 - 1, -2.0 ** 31)
    for r in range(rows):
        p, q = sorted(rng.choice(n, 2, replace=False)) if n > 1 else (0, 0)
        k = r % (13 if floating else 5)
        if k == 0 and n > tr:  # q in lane 0 of the last step, p in lane tr // 2 of the first
            x[r, [tr // 2, tr * ((n - 1) // tr)]] = big
        elif k == 0 or k == 1:
            x[r, [p, q]] = big
        elif k == 2:
            x[r, [0, n - 1]] = big if floating else small
        elif not floating:
            x[r, :] = {3: 7.0, 4: -2.0 ** 31}[k]
        elif k == 3:
            x[r, :] = np.nan
        elif k == 4:
            x[r, :] = np.where(rng.random(n) < 0.5, -0.0, 0.0)
        elif k == 5:
            x[r, [p, q]] = np.inf
            x[r, rng.choice(n, 2)] = -np.inf
        elif k in (6, 7):
            x[r, :] = np.inf if k == 6 else -np.inf
        elif k == 8:
            x[r, [p, q]] = 9.0
            x[r, rng.choice(n, 2)] = -9.0
        elif k == 9:
            x[r, p], x[r, q] = np.nan, np.inf
        elif k == 10:
            x[r, n - 1] = np.nan
        elif k == 11:
            x[r, :] = 1.5
            x[r, [p, q]] = np.nan
    if not floating:
        return np.clip(np.round(x * 1000), -2.0 ** 31, 2.0 ** 31 - 1)
    return x


def _edge_input(dt: str, shape: tuple[int, ...], axis: int, tr: int, seed: int = 0) -> np.ndarray:
    n = shape[axis]
    rows = int(np.prod(shape)) // n
    x = _edge_rows(rows, n, tr, dt != "s32", np.random.default_rng(seed)).astype(_NP[dt])
    x = x.reshape(tuple(s for d, s in enumerate(shape) if d != axis) + (n,))
    return np.ascontiguousarray(np.moveaxis(x, -1, axis))


def _numpy(op: str, x: np.ndarray, axis: int) -> np.ndarray:
    """np.argmax / argmin in float64: NaN first, the lower index among equals (-0 == +0)."""
    return (np.argmax if op == "argmax" else np.argmin)(x.astype(np.float64), axis=axis)


def _reduce_fusion(stem: str):
    m = load(DATA / f"{stem}.h200_opt.hlo")
    f = next(i for i in m.entry.instructions
             if i.opcode == "fusion" and any(j.opcode == "reduce" for j in i.attrs["calls"].instructions))
    return m, f


def _path(ks: KernelSource) -> tuple[int, bool, bool]:
    cx = ks.constexprs
    ta = cx["BLOCK"] // (cx["TR"] * cx["TB"])
    exact = "EXACT: tl.constexpr = NA" in ks.source and cx["NA"] % ta == 0 and cx["NB"] % cx["TB"] == 0
    return cx["NIT"], exact, "_valid" in ks.source


def _at_xla_block(emitted):
    return attrs.evolve(emitted, kernels=tuple(attrs.evolve(k, interpret_variant=None) for k in emitted.kernels))


def _check(stem: str, path: tuple, emitter=None) -> None:
    op, dt, shape, axis = _parse_name(stem)
    m, f = _reduce_fusion(stem)
    a = FusionAnalysis.create(f, get_device("h200"))
    get_emitter_fusion_kind(a)
    if emitter is None:
        emitter, factory = get_fusion_emitter(a)
        assert factory.name == "reduction"
    emitted = emitter.emit()
    (ks,) = emitted.kernels
    assert (type(emitter).__name__, *_path(ks)) == path, "the module no longer takes the tile path it is here for"
    x = _edge_input(dt, shape, axis, ks.constexprs["TR"])
    want = _numpy(op, x, axis)
    ops, ref = operands_and_reference(m, f, args=[x])
    np.testing.assert_array_equal(ref[1], want, err_msg="reference evaluator")
    picked = np.take_along_axis(x.astype(np.float64), np.expand_dims(want, axis), axis).squeeze(axis)
    for label, em, programs in (("XLA's block", _at_xla_block(emitted), None), ("interpreter variant", emitted, 16)):
        values, index = triton_runtime.run_fusion(em, ops, f, interpret_max_programs=programs)
        np.testing.assert_array_equal(index, want, err_msg=f"{stem} at {label}")
        np.testing.assert_array_equal(values.astype(np.float64), picked, err_msg=f"{stem} values at {label}")


@pytest.mark.parametrize("stem", sorted(FAST))
def test_nan_ties_on_every_tile_path(stem):
    _check(stem, FAST[stem])


@pytest.mark.slow
@pytest.mark.parametrize("stem", sorted(SLOW))
def test_nan_ties_on_larger_launches(stem):
    _check(stem, SLOW[stem])


def test_nan_ties_on_the_multi_row_emitter():
    """XLA's rule never picks MultiRowReductionFusion for a variadic reduce (its tuple root has no element width,
    so the vector size is 0); the emitter still runs when asked, several whole rows a block."""
    m, f = _reduce_fusion("argmax_f32_16x8_ax1")
    em = MultiRowReductionFusion(FusionAnalysis.create(f, get_device("h200")))
    _check("argmax_f32_16x8_ax1", ("MultiRowReductionFusion", 1, True, False), emitter=em)


def test_field_report_first_nan_of_a_65_element_row():
    """f32[7,33,65], NaN at 25 and 51 in every row (lanes 25 and 19 of XLA's 32-lane step): 25, as XLA:CPU and
    numpy, from the kernel and the reference evaluator; the value output is NaN (XLA's block: the slow test, and
    f32[3,3,65] on the same path in the fast one). The ordered combine compiles for sm_90, its swap a select."""
    m, f = _reduce_fusion("argmax_f32_7x33x65_ax2")
    x = np.random.default_rng(3).standard_normal((7, 33, 65)).astype(np.float32)
    x[..., 25] = x[..., 51] = np.nan
    a = FusionAnalysis.create(f, get_device("h200"))
    get_emitter_fusion_kind(a)
    emitted = get_fusion_emitter(a)[0].emit()
    values, index = triton_runtime.run_fusion(emitted, [x], f)
    np.testing.assert_array_equal(index, np.full((7, 33), 25))
    assert np.isnan(values).all()
    np.testing.assert_array_equal(np.asarray(evaluate_instruction(f, [x])[1]), np.full((7, 33), 25))
    ptx = triton_runtime.compile_for_target(emitted.kernels[0]).ptx
    assert ".target sm_90a" in ptx and "selp" in ptx


@pytest.mark.parametrize("stem", ["argmax_f32_7x33x65_ax2", "argmin_f32_300x37_ax0", "argmin_bf16_128x64_ax0",
                                  "argmax_s32_8x65_ax1"])
def test_numpy_is_xla_cpus_answer(stem):
    """float64 numpy's argmax / argmin is XLA:CPU's (jaxlib) on the edge rows: the answer the kernels are held to."""
    jax = pytest.importorskip("jax", reason="XLA:CPU comes through jaxlib (the test extra)")
    import jax.numpy as jnp

    op, dt, shape, axis = _parse_name(stem)
    x = _edge_input(dt, shape, axis, 32)
    with jax.default_device(jax.devices("cpu")[0]):
        got = np.asarray(jax.jit(lambda v: getattr(jnp, op)(v, axis=axis))(x))
    np.testing.assert_array_equal(got, _numpy(op, x, axis))


def _combine_kernel(source: str, rows: int, lanes: int, valid: bool) -> KernelSource:
    """A kernel folding ``rows`` x ``lanes`` (value, index[, flag]) with the emitted combine function."""
    lines = source.splitlines()
    start = next(k for k, s in enumerate(lines) if s.startswith("def fg_combine") and ("_valid" in s) == valid)
    end = next(k for k in range(start + 1, len(lines)) if not lines[k].startswith(" "))
    fn = lines[start].split("(")[0].removeprefix("def ")
    n = rows * lanes
    ins = ["v", "i", "ok"] if valid else ["v", "i"]
    body = [f"    {p} = tl.reshape(tl.load({p}_ptr + t), [R, L])" for p in ins]
    body += [f"    rv, ri{', rok' if valid else ''} = tl.reduce(({', '.join(ins)}), 1, {fn})",
             "    tl.store(ov + tl.arange(0, R), rv)", "    tl.store(oi + tl.arange(0, R), ri)"]
    src = ts.module_header() + ["@triton.jit", *lines[start:end], "", "@triton.jit",
                                f"def fold({', '.join(p + '_ptr' for p in ins)}, ov, oi, R: tl.constexpr, "
                                "L: tl.constexpr):", "    t = tl.arange(0, R * L)", *body]
    params = [KernelParam("operand", k, Shape(t, (n,))) for k, t in enumerate(["f32", "s32", "s32"][:len(ins)])]
    params += [KernelParam("output", 0, Shape("f32", (rows,))), KernelParam("output", 1, Shape("s32", (rows,)))]
    return KernelSource(name="fold", source="\n".join(src) + "\n", entry="fold", params=tuple(params),
                        constexprs={"R": rows, "L": lanes}, launch=LaunchDimensions((1,)))


@pytest.mark.parametrize("stem,valid", [("argmax_f32_7x33x65_ax2", False), ("argmin_f32_16x100_ax1", False),
                                        ("argmax_f32_16x8_ax1", True)])
def test_combine_gives_the_first_nan_whatever_order_the_lanes_meet_in(stem, valid):
    """The GPU's tl.reduce meets lanes in butterfly order, not the interpreter's neighbour pairs: here each row's
    (value, index) pairs sit in the lanes in a random order, so the neighbour fold meets them in any order, and
    the emitted combine must still give numpy's answer. With the validity flag, lanes past the row (flag 0)
    hold a NaN at index 0, which must not win."""
    op = _parse_name(stem)[0]
    m, f = _reduce_fusion(stem)
    a = FusionAnalysis.create(f, get_device("h200"))
    get_emitter_fusion_kind(a)
    source = get_fusion_emitter(a)[0].emit().kernels[0].source
    rows, lanes, used = 64, 32, 24 if valid else 32
    rng = np.random.default_rng(11)
    x = _edge_rows(rows, used, 8, True, rng).astype(np.float32)
    want = _numpy(op, x, 1)
    v = np.full((rows, lanes), np.nan, np.float32)
    i, ok = np.zeros((rows, lanes), np.int32), np.zeros((rows, lanes), np.int32)
    for r in range(rows):
        where = rng.permutation(lanes)[:used]
        v[r, where], i[r, where], ok[r, where] = x[r], np.arange(used), 1
    ks = _combine_kernel(source, rows, lanes, valid)
    ov, oi = np.zeros(rows, np.float32), np.zeros(rows, np.int32)
    bufs = [v.reshape(-1), i.reshape(-1)] + ([ok.reshape(-1)] if valid else []) + [ov, oi]
    triton_runtime.run_interpreted(ks, bufs)
    np.testing.assert_array_equal(oi, want)


def test_position_operand_is_the_index_the_reducer_breaks_ties_by():
    _, f = _reduce_fusion("argmax_f32_7x33x65_ax2")
    reduce = f.attrs["calls"].root
    assert position_operand(reduce.attrs["to_apply"], 2) == 1
    _, g = _reduce_fusion("argmin_f32_512x16_ax0_x64")  # s64 index, compared LT as well
    assert position_operand(g.attrs["calls"].root.attrs["to_apply"], 2) == 1
    sweep = CORPUS / "sweep" / "reduce_sum_f32_ax2.h200_opt.hlo"
    if sweep.exists():  # a single-operand reducer has no position operand
        m = load(sweep)
        red = next(i for c in m.computations for i in c.instructions if i.opcode == "reduce")
        assert position_operand(red.attrs["to_apply"], 1) is None


def test_reference_evaluator_on_rows_past_its_sequential_limit():
    """Above SEQUENTIAL_LIMIT reduced elements the evaluator folds an elementwise reducer as a pairwise tree of
    neighbours (earlier elements on the left): still the first NaN and the lower index among ties."""
    n = SEQUENTIAL_LIMIT + 3001
    text = (DATA / "argmax_f32_7x33x65_ax2.h200_opt.hlo").read_text()
    text = text.replace("7,33,65", f"13,1,{n}").replace("7,33", "13,1")
    m = load(text)
    f = next(i for i in m.entry.instructions if i.opcode == "fusion")
    x = _edge_rows(13, n, 4096, True, np.random.default_rng(5)).astype(np.float32).reshape(13, 1, n)
    np.testing.assert_array_equal(np.asarray(evaluate_instruction(f, [x])[1]), _numpy("argmax", x, 2))


@pytest.mark.parametrize("name", ["reduce_argmax_f32_ax0", "reduce_argmax_s32_ax1"])
def test_sweep_argmax_programs_give_xla_cpus_answers(name):
    """The sweep corpus's argmax programs (edge values: NaN, inf, -0, MAX; two NaNs in some f32 columns) at XLA's
    block against XLA:CPU's stored answers, which are numpy's too."""
    where = CORPUS / "sweep"
    if not (where / f"{name}.h200_opt.hlo").exists():
        pytest.skip(f"{where} is absent (the shared corpus is not checked out beside the project)")
    m = load(where / f"{name}.h200_opt.hlo")
    x = np.load(where / f"{name}.inputs.npz")["p0"]
    expected = np.load(where / f"{name}.expected.npz")["o0"]
    axis = int(name[-1])
    np.testing.assert_array_equal(expected, _numpy("argmax", x, axis))
    f = next(i for i in m.entry.instructions
             if i.opcode == "fusion" and any(j.opcode == "reduce" for j in i.attrs["calls"].instructions))
    a = FusionAnalysis.create(f, get_device("h200"))
    get_emitter_fusion_kind(a)
    ops, ref = operands_and_reference(m, f, args=[x])
    _, index = triton_runtime.run_fusion(_at_xla_block(get_fusion_emitter(a)[0].emit()), ops, f,
                                         interpret_max_programs=None)
    np.testing.assert_array_equal(index, expected)
    np.testing.assert_array_equal(ref[1], expected)
