"""The lax op sweep (``../shared/corpus/sweep/``): every program with ``--inputs``/``--expected`` (XLA:CPU's answers).

Every program ends ``ok`` or ``drift`` against XLA:CPU's outputs, except those where the corpus README says
XLA:CPU's semantics differ from XLA:GPU's (listed in :data:`XLA_CPU_DIFFERS` with the reason): those are
checked against the f64 oracle instead (ok or drift without ``--expected``), and their ``--expected`` run
must still say mismatch (so a stale entry is noticed); where the difference is XLA:CPU's denormal
flushing, the expected answer is reproduced by the reference evaluator on flushed inputs, and every other
listed difference is found exactly where its reason says (:data:`OTHER`). Programs whose outputs are all
NaN/inf on the edge-value inputs (:data:`VACUOUS`) run with ``--allow-vacuous`` and must say so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from conftest import CORPUS

from fusegen.evaluator.evaluator import evaluate_module
from fusegen.hlo.parser import parse_module
from fusegen.runtime.inputs import leaves, load_expected, load_inputs
from fusegen.verify.expected import OutputPath, judge_expected
from fusegen.config.verify_options import VerifyOptions
from fusegen.verify.judged_run import run_module

SWEEP = CORPUS / "sweep"
PROGRAMS = sorted(p.name.removesuffix(".h200_opt.hlo") for p in SWEEP.glob("*.h200_opt.hlo")) if SWEEP.exists() else []

_FLUSH = "XLA:CPU flushes f32/f64 denormals to zero (inputs and results); XLA:GPU keeps them"
#: Programs whose XLA:CPU answer differs from XLA:GPU's semantics (corpus README), with the reason.
XLA_CPU_DIFFERS: dict[str, str] = {
    "argsort_f32_33x129_ax1": _FLUSH + ": flushed denormal keys tie with zeros, so the permutation differs",
    "sort_2keys_kv": _FLUSH + ": flushed denormal keys tie with zeros, so the permutation differs",
    "atan2_f32": "XLA:CPU's atan2 of two denormals is NaN: atan2(1e-45, -1e-45) is 3pi/4, atan2(-1e-45, 1e-45) "
                 "-pi/4",
    "compare_bf16": _FLUSH + ": a flushed bf16 denormal compares equal to zero",
    "convert_from_f64": _FLUSH + ": a flushed f64 denormal converts to pred false",
    "pow_f64": "XLA:CPU's pow of the f64 denormal base 5e-324 is off: 5.47e303 for 5e-324 ** -0.9386 = 2.85e303 "
               "(f64 oracle)",  # and a denormal result flushes, as everywhere
    "rem_f32": _FLUSH + ": rem(x, denormal) is NaN on XLA:CPU",
    "rem_f64": _FLUSH + ": rem(x, denormal) is NaN on XLA:CPU",
    "rsqrt_bf16": _FLUSH + ": rsqrt(-denormal) is NaN, XLA:CPU's rsqrt(-0) is -inf",
    "rsqrt_f32": _FLUSH + ": rsqrt(-denormal) is NaN, XLA:CPU's rsqrt(-0) is -inf",
    "sqrt_f32": _FLUSH + ": sqrt(-denormal) is NaN, XLA:CPU's sqrt(-0) is -0",
    "reduce_max_f32_ax0": "XLA:CPU's reduce max can drop a NaN; the HLO op propagates it",
    "reduce_min_f32_ax02": "XLA:CPU's reduce min can drop a NaN; the HLO op propagates it",
    "convert_from_f4e2m1fn": "f4e2m1fn ±6.0 converted to an integer gives INT_MIN/INT_MAX on XLA:CPU; the value is ±6",
}
FLUSHED = sorted(n for n, why in XLA_CPU_DIFFERS.items() if why.startswith(_FLUSH))

#: Programs whose every output element is NaN or inf in kernel and reference alike on the sweep's edge-value
#: inputs (each output element reduces over a NaN or an inf): a ``vacuous`` comparison, not a pass by default,
#: so they run with ``--allow-vacuous`` and must say "comparison vacuous" (a stale entry is noticed).
#: reduce_min_f32_ax02 is vacuous against the f64 oracle only (XLA:CPU's answer drops the NaNs).
VACUOUS: dict[str, str] = {
    "reduce_sum_f16_ax02": "every sum over axes 0 and 2 meets a NaN or opposite infinities",
    "reduce_sum_f32_4097": "the one sum meets a NaN",
    "reduce_sum_f32_ax12": "every sum over axes 1 and 2 meets a NaN or opposite infinities",
    "reduce_min_f32_ax02": "every min over axes 0 and 2 meets a NaN (without --expected)",
}

#: Fusions that still run on the host backend ("no Triton type"), per program (issue 21 item 6 shrinks it).
HOST_FUSIONS: dict[str, str] = {}

#: Programs of the quick (not ``slow``) check: one per fault issue 21 found (and the c64 scatter on a kernel).
QUICK = ["int_arith_s32", "exp_f32", "convert_from_u8", "complex_f32", "reduce_sum_c64_ax1", "reduce_prod_f32_ax2",
         "reduce_sum_f32_ax2", "reduce_argmax_f32_ax0", "abs_c64", "convert_from_bf16_to_narrow",
         "convert_from_f8e4m3b11fnuz", "scatter_add_drop_c64"]


def _paths(name: str) -> tuple[Path, Path, Path]:
    return (SWEEP / f"{name}.h200_opt.hlo", SWEEP / f"{name}.inputs.npz", SWEEP / f"{name}.expected.npz")


def _cli(name: str, with_expected: bool = True) -> tuple[int, dict | None, str]:
    hlo, inp, exp = _paths(name)
    cmd = [sys.executable, "-m", "fusegen.cli", "run", str(hlo), "--inputs", str(inp), "--no-compile", "-j", "1", "--json"]
    if with_expected:
        cmd += ["--expected", str(exp)]
    if name in VACUOUS:
        cmd += ["--allow-vacuous"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    try:
        doc = json.loads(p.stdout)
    except json.JSONDecodeError:
        doc = None
    return p.returncode, doc, p.stderr[-2000:]


def _problems(name: str, rc: int, doc: dict | None, err: str, with_expected: bool = True) -> list[str]:
    if doc is None:
        return [f"{name}: exit {rc}, no JSON: {err.strip().splitlines()[-1] if err.strip() else ''}"]
    out = []
    if name in XLA_CPU_DIFFERS and with_expected:
        if doc["status"] != "mismatch":
            out.append(f"{name}: listed as differing on XLA:CPU ({XLA_CPU_DIFFERS[name]}) but ends {doc['status']}")
        return out
    if rc != 0 or doc["status"] not in ("ok", "drift"):
        bad = [f"{o['name']} {o['status']}: {o.get('reason', '')}" for o in doc.get("outputs", []) if o["status"] != "ok"]
        out.append(f"{name}: exit {rc}, {doc['status']}: {bad[:2]}")
    if name in VACUOUS and not any("comparison vacuous" in o.get("reason", "") for o in doc.get("outputs", [])):
        out.append(f"{name}: listed as vacuous ({VACUOUS[name]}) but no output says so")
    host = [f["name"] for f in doc["fusions"] if f["backend"] != "triton"]
    if host and name not in HOST_FUSIONS:
        out.append(f"{name}: fusions on the host: {host}")
    return out


def _sweep(names: list[str], with_expected: bool = True) -> list[str]:
    with ThreadPoolExecutor(max(1, len(os.sched_getaffinity(0)))) as pool:
        results = list(pool.map(lambda n: (n, *_cli(n, with_expected)), names))
    return [p for n, rc, doc, err in results for p in _problems(n, rc, doc, err, with_expected)]


@pytest.mark.slow
def test_every_sweep_program_is_ok_or_drift_against_xla_cpu():
    if not PROGRAMS:
        pytest.skip(f"sweep corpus not found at {SWEEP}")
    assert len(PROGRAMS) >= 130
    problems = _sweep(PROGRAMS)
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_programs_where_xla_cpu_differs_are_ok_or_drift_against_f64():
    if not PROGRAMS:
        pytest.skip(f"sweep corpus not found at {SWEEP}")
    problems = _sweep(sorted(XLA_CPU_DIFFERS), with_expected=False)
    assert not problems, "\n".join(problems)


def test_quick_sweep_programs_are_ok_or_drift_against_xla_cpu():
    if not PROGRAMS:
        pytest.skip(f"sweep corpus not found at {SWEEP}")
    problems = []
    for name in QUICK:
        hlo, inp, exp = _paths(name)
        m = parse_module(hlo.read_text(), str(hlo))
        types = [s.element_type for s in m.entry.root.shape.leaves()]
        _, rep = run_module(m, load_inputs(m, inp), compile_kernels=False,
                            expected=load_expected(exp, len(types), types=types))
        if rep.status not in ("ok", "drift"):
            problems.append(f"{name}: {rep.status}: {rep.verdict.lines()}")
        host = [f.name for f in rep.fusions if f.backend != "triton"]
        if host and name not in HOST_FUSIONS:
            problems.append(f"{name}: fusions on the host: {host}")
    assert not problems, "\n".join(problems)


def _flush(a: np.ndarray) -> np.ndarray:
    """``a`` with f32/bf16/f64 denormals (and complex parts) replaced by signed zeros, as XLA:CPU does."""
    a = np.asarray(a)
    if a.dtype.kind == "c":
        out = np.empty_like(a)
        out.real, out.imag = _flush(a.real), _flush(a.imag)
        return out
    if a.dtype not in (np.float32, np.float64, np.dtype(ml_dtypes.bfloat16)):
        return a
    tiny = np.finfo(np.float64 if a.dtype == np.float64 else np.float32).smallest_normal
    w = a.astype(np.float64)
    return np.where(np.abs(w) < tiny, np.copysign(0.0, w), w).astype(a.dtype)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if "sort" in n else n for n in FLUSHED])
def test_xla_cpu_answer_is_the_flushed_input_answer(name):
    """The listed denormal programs: the reference evaluator on flushed inputs (and flushing its results)
    gives XLA:CPU's answer, so the difference is the flushing and nothing else."""
    if not PROGRAMS:
        pytest.skip(f"sweep corpus not found at {SWEEP}")
    hlo, inp, exp = _paths(name)
    m = parse_module(hlo.read_text(), str(hlo))
    args = load_inputs(m, inp)
    types = [s.element_type for s in m.entry.root.shape.leaves()]
    expected = load_expected(exp, len(types), types=types)
    plain = [np.asarray(x) for x in leaves(evaluate_module(m, args))]
    flushed = [_flush(np.asarray(x)) for x in leaves(evaluate_module(m, [_flush(a) for a in args]))]
    differs_plain = False
    for t, f, p, e in zip(types, flushed, plain, expected):
        j = judge_expected(t, f, f, None, e, OutputPath(False, False, False, 0.0), VerifyOptions())
        assert j.status == "ok", (name, t, j.reason)
        jp = judge_expected(t, p, p, None, e, OutputPath(False, False, False, 0.0), VerifyOptions())
        differs_plain |= jp.status != "ok"
    assert differs_plain, f"{name}: XLA:CPU agrees with the unflushed answer: remove it from XLA_CPU_DIFFERS"


def _reduced_has_nan(axes: tuple[int, ...]):
    return lambda args, idx: bool(np.isnan(np.asarray(args[0], np.float64)).any(axis=axes)[idx])


def _both_denormal(args, idx) -> bool:
    tiny = np.finfo(args[0].dtype).smallest_normal
    return all(0 < abs(float(a[idx])) < tiny for a in args)


def _denormal_base(args, idx) -> bool:
    return 0 < abs(float(args[0][idx])) < np.finfo(np.float64).smallest_normal


def _saturated_six(args, idx, e) -> bool:
    v = float(np.asarray(args[0])[idx].astype(np.float32))
    info = ml_dtypes.iinfo(e.dtype)  # int4 / uint4 too
    return abs(v) == 6.0 and int(e[idx]) == (info.max if v > 0 else info.min)


#: The listed differences that are not the flush: where XLA:CPU and the reference evaluator differ (beyond
#: XLA:CPU flushing a denormal result to zero, and 1e-6 relative), what must hold of each such element.
OTHER: dict[str, tuple[str, Any]] = {
    "reduce_max_f32_ax0": ("the reduced column holds a NaN, kept by the reference, dropped by XLA:CPU",
                           _reduced_has_nan((0,))),
    "reduce_min_f32_ax02": ("the reduced slice holds a NaN, kept by the reference, dropped by XLA:CPU",
                            _reduced_has_nan((0, 2))),
    "atan2_f32": ("both arguments are denormal and XLA:CPU says NaN", _both_denormal),
    "pow_f64": ("the base is a denormal", _denormal_base),
    "convert_from_f4e2m1fn": ("the input is ±6 and XLA:CPU gives the integer type's max / min", _saturated_six),
}


@pytest.mark.parametrize("name", sorted(OTHER))
def test_the_other_differences_are_what_the_list_says(name):
    """Each listed difference that is not the flush differs exactly where its reason says (and somewhere)."""
    if not PROGRAMS:
        pytest.skip(f"sweep corpus not found at {SWEEP}")
    assert name in XLA_CPU_DIFFERS and not XLA_CPU_DIFFERS[name].startswith(_FLUSH)
    why, holds = OTHER[name]
    hlo, inp, exp = _paths(name)
    m = parse_module(hlo.read_text(), str(hlo))
    args = load_inputs(m, inp)
    types = [s.element_type for s in m.entry.root.shape.leaves()]
    found = 0
    for e, r in zip(load_expected(exp, len(types), types=types), leaves(evaluate_module(m, args))):
        e, r = np.asarray(e), np.asarray(r)
        if e.dtype.kind in "fc" or e.dtype == np.dtype(ml_dtypes.bfloat16):
            ew, rw = e.astype(np.complex128 if e.dtype.kind == "c" else np.float64), \
                r.astype(np.complex128 if r.dtype.kind == "c" else np.float64)
            tiny = np.finfo(np.float64 if e.dtype == np.float64 else np.float32).smallest_normal
            with np.errstate(invalid="ignore"):
                same = (np.abs(ew - rw) <= 1e-6 * np.maximum(1.0, np.abs(rw))) | (np.isnan(ew) & np.isnan(rw)) | \
                    (ew == rw) | ((ew == 0) & (np.abs(rw) < tiny))
        else:
            same = e == r
        for idx in map(tuple, np.argwhere(~same)):
            found += 1
            ok = holds(args, idx, e) if name == "convert_from_f4e2m1fn" else holds(args, idx)
            if name.startswith("reduce"):
                ok = ok and np.isnan(r[idx]) and not np.isnan(e[idx])
            if name == "atan2_f32":
                ok = ok and np.isnan(e[idx])
            assert ok, f"{name}: XLA:CPU {e[idx]} vs {r[idx]} at {list(idx)}, where not: {why}"
    assert found, f"{name}: XLA:CPU agrees with the reference now: remove it from XLA_CPU_DIFFERS"
