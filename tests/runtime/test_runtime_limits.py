"""Resource limits (fusegen.runtime.limits), the non-recursive executor, inputs at the element type and .npz
header checks."""

from __future__ import annotations

import sys
import tracemalloc
import zipfile

import numpy as np
import pytest

from fusegen.hlo.ir import Shape
from fusegen.hlo.parser import parse_module
from fusegen.runtime.inputs import InputError, check_npz_headers, load_inputs, make_inputs, random_array
from fusegen.runtime.limits import (ResourceLimitError, RunLimits, check_module, estimate_peak_bytes, parse_size,
                                    static_trip_count)
from fusegen.verify.judged_run import run_module

WHILE = """HloModule w
%body (s: (s32[], f32[4])) -> (s32[], f32[4]) {
  %s = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[4]{0} get-tuple-element(%s), index=1
  %c = s32[] constant(STEP)
  %i2 = s32[] OP(%i, %c)
  %x2 = f32[4]{0} negate(%x)
  ROOT %t = (s32[], f32[4]{0}) tuple(%i2, %x2)
}
%cond (s: (s32[], f32[4])) -> pred[] {
  %s = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(BOUND)
  ROOT %lt = pred[] compare(%i, %n), direction=DIR
}
ENTRY %main (a: f32[4]) -> (s32[], f32[4]) {
  %a = f32[4]{0} parameter(0)
  %z = s32[] constant(START)
  %init = (s32[], f32[4]{0}) tuple(%z, %a)
  ROOT %w = (s32[], f32[4]{0}) while(%init), condition=%cond, body=%body
}
"""


def _while(start=0, bound=10, step=1, op="add", direction="LT"):
    text = (WHILE.replace("START", str(start)).replace("BOUND", str(bound)).replace("STEP", str(step))
            .replace("OP", op).replace("DIR", direction))
    return parse_module(text)


def _count(m) -> int:
    """The loop's real trip count, by running its state the way the evaluator does."""
    out, _ = run_module(m, [np.ones(4, np.float32)], compile_kernels=False)
    return out


@pytest.mark.parametrize("start,bound,step,op,direction,want", [
    (0, 10, 1, "add", "LT", 10), (0, 10, 3, "add", "LT", 4), (0, 10, 1, "add", "LE", 11),
    (10, 0, 1, "subtract", "GT", 10), (10, 0, 2, "subtract", "GE", 6), (0, 10, 2, "add", "NE", 5),
    (5, 3, 1, "add", "LT", 0)])
def test_static_trip_count_matches_the_executed_loop(start, bound, step, op, direction, want):
    m = _while(start, bound, step, op, direction)
    w = m.entry.root
    assert static_trip_count(w) == want
    out, rep = run_module(m, [np.ones(4, np.float32)], compile_kernels=False)
    # the induction variable ends at start +- step * trips, the payload is negated once per trip
    assert int(out[0]) == start + (step if op == "add" else -step) * want
    assert np.all(out[1] == (-1.0) ** want) and rep.outputs_ok


def test_static_trip_count_unknown_and_known_trip_count_config():
    m = _while(0, 10, 1, "multiply", "LT")
    assert static_trip_count(m.entry.root) is None
    m.entry.root.attrs["backend_config"] = {"known_trip_count": {"n": "7"}}
    assert static_trip_count(m.entry.root) == 7


def test_while_budget_stops_a_loop_without_a_static_trip_count():
    m = _while(1, 10**9, 2, "multiply", "NE")  # 1, 2, 4, ... never equals 10**9 within s32 in few steps
    assert static_trip_count(m.entry.root) is None
    with pytest.raises(ResourceLimitError, match="passed the budget of 50 loop iterations"):
        run_module(m, [np.ones(4, np.float32)], compile_kernels=False,
                   limits=RunLimits(max_memory=1 << 40, max_while_iterations=50))


def test_check_module_refuses_static_loops_over_budget():
    check_module(_while(0, 100), RunLimits(max_memory=1 << 40, max_while_iterations=100))
    with pytest.raises(ResourceLimitError, match="runs 101 iterations"):
        check_module(_while(0, 100, direction="LE"), RunLimits(max_memory=1 << 40, max_while_iterations=100))


def test_deadline():
    m = _while(0, 10**6)
    with pytest.raises(ResourceLimitError, match="took longer than --timeout 0.2 s"):
        run_module(m, [np.ones(4, np.float32)], compile_kernels=False,
                   limits=RunLimits(max_memory=1 << 40, timeout=0.2, max_while_iterations=10**7))


def test_memory_estimate_counts_inputs_and_values():
    m = parse_module("""HloModule g
%f (p: f32[1000,1000]) -> f32[1000,1000] {
  %p = f32[1000,1000]{1,0} parameter(0)
  ROOT %n = f32[1000,1000]{1,0} negate(%p)
}
ENTRY %e (a: f32[1000,1000]) -> f32[1000,1000] {
  %a = f32[1000,1000]{1,0} parameter(0)
  ROOT %r = f32[1000,1000]{1,0} fusion(%a), kind=kLoop, calls=%f
}""")
    mb4 = 4 * 10**6
    # input + (a, r) twice (kernels and reference) + the fusion's two values
    assert estimate_peak_bytes(m) == mb4 + 2 * 2 * mb4 + 2 * mb4
    check_module(m, RunLimits(max_memory=7 * mb4))
    with pytest.raises(ResourceLimitError, match=r"needs an estimated 26.7 MiB .* limit of 22.9 MiB"):
        check_module(m, RunLimits(max_memory=6 * mb4))


@pytest.mark.parametrize("text,want", [("8G", 8 << 30), ("512MiB", 512 << 20), ("1e9", 10**9), ("100", 100)])
def test_parse_size(text, want):
    assert parse_size(text) == want


@pytest.mark.parametrize("text", ["", "-1G", "nan", "lots", "0"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_deep_call_chain_runs_without_recursion():
    levels = 3000
    comps = [f"%c{levels} (p: f32[4]) -> f32[4] {{\n  %p = f32[4]{{0}} parameter(0)\n"
             f"  ROOT %n = f32[4]{{0}} negate(%p)\n}}\n"]
    for k in range(levels - 1, 0, -1):
        comps.append(f"%c{k} (p: f32[4]) -> f32[4] {{\n  %p = f32[4]{{0}} parameter(0)\n"
                     f"  ROOT %r = f32[4]{{0}} call(%p), to_apply=%c{k + 1}\n}}\n")
    comps.append("ENTRY %main (a: f32[4]) -> f32[4] {\n  %a = f32[4]{0} parameter(0)\n"
                 "  ROOT %r = f32[4]{0} call(%a), to_apply=%c1\n}\n")
    m = parse_module("HloModule deep\n" + "".join(comps))
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(400)  # far below the chain's depth: any per-level recursion fails
    try:
        x = np.arange(4, dtype=np.float32)
        out, rep = run_module(m, [x], compile_kernels=False)
    finally:
        sys.setrecursionlimit(old)
    assert np.array_equal(out, -x) and rep.outputs_ok


def test_random_inputs_are_drawn_at_the_element_type():
    shape = Shape("f32", (2000, 1000))
    tracemalloc.start()
    try:
        a = random_array(shape, np.random.default_rng(0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert a.dtype == np.float32 and a.nbytes == 8_000_000
    assert peak < 1.25 * a.nbytes  # no float64 staging array (that alone would be 16 MB)
    assert 0.9 < a.std() < 1.1
    b = random_array(Shape("bf16", (1000,)), np.random.default_rng(0))
    assert str(b.dtype) == "bfloat16"
    p = random_array(Shape("pred", (1000,)), np.random.default_rng(0))
    assert p.dtype == np.bool_ and 400 < p.sum() < 600


SMALL = """HloModule small
ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%a)
}"""


def test_npz_member_larger_than_its_header_says_is_refused(tmp_path):
    m = parse_module(SMALL)
    path = tmp_path / "lying.npz"
    header = tmp_path / "h.npy"
    np.save(header, np.zeros(4, np.float32))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("p0.npy", header.read_bytes() + bytes(10 << 20))  # 10 MB of trailing zeros
    with pytest.raises(InputError, match="inflates to 10,485,"):
        check_npz_headers(m, path)
    good = tmp_path / "good.npz"
    np.savez_compressed(good, p0=np.arange(4, dtype=np.float32))
    assert np.array_equal(load_inputs(m, good)[0], np.arange(4, dtype=np.float32))
    notzip = tmp_path / "x.npz"
    notzip.write_bytes(b"\x93NUMPY nonsense")
    with pytest.raises(InputError, match="not an .npz archive"):
        load_inputs(m, notzip)
    assert make_inputs(m, 0)[0].dtype == np.float32
