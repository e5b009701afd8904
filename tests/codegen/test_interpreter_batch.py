"""Batched program ids (fusegen.codegen.interpreter_batch): a launch's programs run several at a time give, bit for
bit, what Triton's one-by-one run gives (``batching(False)``), and an independent answer where there is one.

Hand-written kernels cover each way a batch must be undone (a branch that differs between programs, a program
reading or writing what another writes, atomics, a loop bound that differs) and each builder method whose batched
form differs from Triton's (program ids, splats of a program's scalar, reshapes, transposes, joins, gathers,
expand/broadcast, reductions and scans with and without an axis, masked loads and stores); the block-level fusion
of issue 42 (``f32[16,4,144,17]``, XLA's tiles ``[1,4,16,2]``: 1296 programs) runs at XLA's own launch against the
reference evaluator. The slow sweep runs every kernel of the six launch sets at XLA's launch both ways.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import pytest

from conftest import CORPUS
from fusion_harness import grid_programs, launch_set_fusions, load, operands_and_reference
from interpreter_runs import _bits, _both, _counting

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime
from fusegen.codegen.interpreter_batch import batching
from fusegen.device import get_device
from fusegen.dispatch import get_emitter_fusion_kind, get_fusion_emitter
from fusegen.runtime.compare import compare
from fusegen.runtime.inputs import leaves

HERE = Path(__file__).resolve().parents[1]  # tests/


def _all_batched(grid: int) -> int:
    """Programs a grid runs in batches when none is undone: all but the first (it runs alone and measures) and,
    batches being powers of two, a last one left alone when the rest is odd."""
    return (grid - 1) & ~1


_SHAPES = '''def fg_combine_max(a, b):
    return tl.maximum(a, b)


@triton.jit
def plain_min(a, b):
    return tl.minimum(a, b)


@triton.jit
def k(x, o, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    lane = tl.arange(0, BLOCK)
    v = tl.load(x + pid * BLOCK + lane)
    s = pid.to(tl.float32) + tl.full([BLOCK], 0.5, tl.float32)          # splat of a program's scalar
    m = tl.reshape(v, [4, BLOCK // 4])
    r0 = tl.reduce(m, 0, tl.standard._sum_combine)                        # over an axis (numpy's sum)
    r1 = tl.reduce(m, 1, fg_combine_max, keep_dims=True)                  # fusegen's vectorised fold, kept dim
    r2 = tl.reduce(m, 1, plain_min)                                       # Triton's element-by-element fold
    tot = tl.reduce(v, None, tl.standard._sum_combine)                    # every axis: one scalar a program
    c = tl.associative_scan(m, 1, tl.standard._sum_combine)               # scan
    t = tl.trans(m)
    g = tl.gather(v, (lane * 3 + pid) % BLOCK, 0)
    j = tl.reshape(tl.join(v, s), [2 * BLOCK])
    e = tl.broadcast_to(r0[None, :], [4, BLOCK // 4])
    base = o + pid * (6 * BLOCK + 5)
    tl.store(base + lane, s + tot)
    tl.store(base + BLOCK + lane, tl.reshape(c + e - r1, [BLOCK]))
    tl.store(base + 2 * BLOCK + lane, tl.reshape(t, [BLOCK]))
    tl.store(base + 3 * BLOCK + lane, g, mask=lane % 3 != pid % 3)
    tl.store(base + 4 * BLOCK + tl.arange(0, 2 * BLOCK), j)
    tl.store(base + 6 * BLOCK, tot)
    tl.store(base + 6 * BLOCK + 1 + tl.arange(0, 4), r2)
'''


def test_shape_ops_reductions_and_scans_batched_match_one_by_one_and_numpy():
    block, grid = 16, 40
    x = np.random.default_rng(3).standard_normal(grid * block).astype(np.float32)
    (out,), batched = _both(_SHAPES, grid, [x], [("f32", grid * (6 * block + 5))], constexprs={"BLOCK": block})
    assert batched == _all_batched(grid)
    out = out.reshape(grid, 6 * block + 5)
    for pid in range(grid):
        v = x[pid * block:(pid + 1) * block]
        m = v.reshape(4, block // 4)
        lane = np.arange(block)
        np.testing.assert_allclose(out[pid, 6 * block], v.sum(), rtol=1e-6)
        np.testing.assert_allclose(out[pid, block:2 * block].reshape(4, -1),
                                   np.cumsum(m, axis=1) + m.sum(axis=0)[None, :] - m.max(axis=1, keepdims=True),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(out[pid, 2 * block:3 * block], m.T.reshape(-1))
        keep = lane % 3 != pid % 3
        np.testing.assert_array_equal(out[pid, 3 * block:4 * block][keep], v[(lane * 3 + pid) % block][keep])
        np.testing.assert_array_equal(out[pid, 3 * block:4 * block][~keep], 0)
        np.testing.assert_array_equal(out[pid, 4 * block:6 * block].reshape(block, 2)[:, 0], v)
        np.testing.assert_array_equal(out[pid, 4 * block:6 * block].reshape(block, 2)[:, 1], pid + 0.5)
        np.testing.assert_array_equal(out[pid, 6 * block + 1:], m.min(axis=1))


_CHAIN = '''def k(x, o):
    pid = tl.program_id(0)
    v = tl.load(o + pid)              # what the previous program stored
    tl.store(o + pid + 1, v + tl.load(x + pid))
'''


def test_a_program_reading_what_another_stores_is_undone_and_runs_in_order():
    grid = 64
    x = np.arange(1, grid + 1, dtype=np.int32)
    (out,), batched = _both(_CHAIN, grid, [x], [("s32", grid + 1)])
    np.testing.assert_array_equal(out, np.concatenate([[0], np.cumsum(x)]))  # a chain only order gives
    assert batched == 0


_LAST_WINS = '''def k(o):
    pid = tl.program_id(0)
    tl.store(o + (pid % 3), pid)
'''


def test_programs_storing_to_the_same_element_keep_the_last_programs_value():
    grid = 50
    (out,), _ = _both(_LAST_WINS, grid, [], [("s32", 3)])
    np.testing.assert_array_equal(out, [48, 49, 47])


_BRANCH = '''def k(x, o, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    lane = tl.arange(0, BLOCK)
    v = tl.load(x + pid * BLOCK + lane)
    if pid % 5 == 0:
        v = v * 2.0
    acc = tl.full([BLOCK], 0.0, tl.float32)
    for i in range(0, pid % 4):       # a loop bound that differs between programs
        acc += v
    tl.store(o + pid * BLOCK + lane, acc + v)
'''


def test_branches_and_loop_bounds_that_differ_between_programs_run_as_one_by_one():
    block, grid = 8, 33
    x = np.random.default_rng(5).standard_normal(grid * block).astype(np.float32)
    (out,), _ = _both(_BRANCH, grid, [x], [("f32", grid * block)], constexprs={"BLOCK": block})
    p = np.arange(grid)[:, None]
    v = np.where(p % 5 == 0, x.reshape(grid, block) * 2, x.reshape(grid, block))
    want = np.stack([sum([v[i]] * (i % 4), np.zeros(block, np.float32)) + v[i] for i in range(grid)])
    np.testing.assert_array_equal(out.reshape(grid, block), want)  # the same sums in the same order


_UNIFORM_BRANCH = '''def k(x, o, N: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if pid < N:                        # true for every program: batches stay batched
        lane = tl.arange(0, BLOCK)
        tl.store(o + pid * BLOCK + lane, tl.load(x + pid * BLOCK + lane) + 1.0)
'''


def test_a_branch_every_program_takes_keeps_the_batches():
    block, grid = 8, 40
    x = np.arange(grid * block, dtype=np.float32)
    (out,), batched = _both(_UNIFORM_BRANCH, grid, [x], [("f32", grid * block)],
                            constexprs={"N": grid, "BLOCK": block})
    np.testing.assert_array_equal(out, x + 1)
    assert batched == _all_batched(grid)


_ATOMIC = '''def k(o, c):
    pid = tl.program_id(0)
    old = tl.atomic_add(c, 1)
    tl.store(o + pid, old)
'''


def test_atomics_run_in_program_order():
    grid = 20
    (out, count), batched = _both(_ATOMIC, grid, [], [("s32", grid), ("s32", 1)])
    np.testing.assert_array_equal(out, np.arange(grid))
    assert count[0] == grid and batched == 0


def _block_level_1296():
    m = load(HERE / "data" / "block_level_1296" / "softmax_dim1_tiles_1x4x16x2.hlo")
    f = next(i for i in m.entry.instructions if i.opcode == "fusion")
    a = FusionAnalysis.create(f, get_device("h200"))
    get_emitter_fusion_kind(a)
    em, _ = get_fusion_emitter(a)
    emitted = em.emit()
    at_xla = attrs.evolve(emitted, kernels=tuple(attrs.evolve(k, interpret_variant=None) for k in emitted.kernels))
    return m, f, at_xla


def test_block_level_fusion_of_1296_programs_at_xlas_launch_runs_batched():
    m, f, at_xla = _block_level_1296()
    assert at_xla.kernels[0].launch.grid == (1296,)
    ops, ref = operands_and_reference(m, f, seed=0)
    with _counting() as seen:
        got = triton_runtime.run_fusion(at_xla, ops, f, interpret_max_programs=None)
    assert seen == [_all_batched(1296)]
    c = compare(got[0], leaves(ref)[0], "f32")
    assert c.ok, c


@pytest.mark.slow
def test_block_level_fusion_of_1296_programs_batched_equals_one_by_one():
    m, f, at_xla = _block_level_1296()
    ops, _ = operands_and_reference(m, f, seed=0)
    with batching(False):
        one = triton_runtime.run_fusion(at_xla, ops, f, interpret_max_programs=None)
    got = triton_runtime.run_fusion(at_xla, ops, f, interpret_max_programs=None)
    np.testing.assert_array_equal(one[0].view(np.uint32), got[0].view(np.uint32))


SETS = {"shared": CORPUS / "jax" / "launch", "x": HERE / "data" / "xla_kernels", "z": HERE / "data" / "xla_kernels_z",
        "w": HERE / "data" / "xla_kernels_w", "v": HERE / "data" / "xla_kernels_v",
        "u": HERE / "data" / "xla_kernels_u"}
MAX_PROGRAMS, MAX_ELEMENTS = 2048, 1 << 18


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SETS))
def test_every_small_kernel_at_xlas_launch_batched_equals_one_by_one(name):
    ran, differ = 0, []
    for mf, m, f, em, _ in launch_set_fusions(SETS[name]):
        emitted = em.emit() if em is not None else None
        if emitted is None or not emitted.kernels:
            continue
        ks = emitted.kernels
        programs = grid_programs(ks)
        if programs > MAX_PROGRAMS or f.shape.leaves()[0].numel > MAX_ELEMENTS:
            continue
        ops, _ = operands_and_reference(m, f, seed=0)
        at_xla = attrs.evolve(emitted, kernels=tuple(attrs.evolve(k, interpret_variant=None) for k in ks))
        with batching(False):
            one = triton_runtime.run_fusion(at_xla, ops, f, interpret_max_programs=None)
        got = triton_runtime.run_fusion(at_xla, ops, f, interpret_max_programs=None)
        ran += 1
        for k, (x, y) in enumerate(zip(one, got)):
            if not np.array_equal(_bits(x), _bits(y)):
                differ.append(f"{mf} {f.name} leaf {k}")
    assert ran > 0
    assert differ == []
