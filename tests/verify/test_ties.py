"""Issue 21, point 5: discrete choices in real models (:mod:`fusegen.verify.ties`).

A top-k router whose keys are within their budget of each other may pick either expert: the verdict finds
the near-tie, re-runs the reference with the other choice, and calls what that explains ``drift`` with the
tie named; keys far apart, a kernel that sorts its own operands wrongly, or a comparator the wrong way
round stay a mismatch.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fusegen.cli.main import cli
from fusegen.codegen import triton_runtime
from fusegen.hlo.parser import parse_module
from fusegen.runtime.inputs import load_expected, load_inputs
from fusegen.config.verify_options import VerifyOptions
from fusegen.verify.judged_run import run_module
from fusegen.verify.ties import find_ties

REAL = Path(__file__).parents[1] / "data" / "real_models"

#: Two experts, each token routed to its top-1 by a sort of its router logits (with the expert ids): the
#: chosen id and the chosen expert's output vector (a one-hot dot). ``%scaled`` is a kernel fusion upstream
#: of the sort (the keys on the kernel path).
ROUTER = """HloModule router
%cmp (a: f32[], b: f32[], i: s32[], j: s32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %i = s32[] parameter(2)
  %j = s32[] parameter(3)
  ROOT %gt = pred[] compare(%a, %b), direction=GT
}
%scaled (p: f32[4,2]) -> f32[4,2] {
  %p = f32[4,2]{1,0} parameter(0)
  %one = f32[] constant(1)
  %b1 = f32[4,2]{1,0} broadcast(%one), dimensions={}
  ROOT %m = f32[4,2]{1,0} multiply(%p, %b1)
}
%sorted (p0: f32[4,2]) -> (f32[4,2], s32[4,2]) {
  %p0 = f32[4,2]{1,0} parameter(0)
  %io = s32[4,2]{1,0} iota(), iota_dimension=1
  ROOT %s = (f32[4,2]{1,0}, s32[4,2]{1,0}) sort(%p0, %io), dimensions={1}, is_stable=true, to_apply=%cmp
}
ENTRY %e (x: f32[4,2], w: f32[2,3]) -> (s32[4,1], f32[4,3]) {
  %x = f32[4,2]{1,0} parameter(0)
  %w = f32[2,3]{1,0} parameter(1)
  %k = f32[4,2]{1,0} fusion(%x), kind=kLoop, calls=%scaled
  %f = (f32[4,2]{1,0}, s32[4,2]{1,0}) fusion(%k), kind=kInput, calls=%sorted
  %idx = s32[4,2]{1,0} get-tuple-element(%f), index=1
  %top = s32[4,1]{1,0} slice(%idx), slice={[0:4], [0:1]}
  %top1 = s32[4]{0} reshape(%top)
  %tb = s32[4,2]{1,0} broadcast(%top1), dimensions={0}
  %io2 = s32[4,2]{1,0} iota(), iota_dimension=1
  %eq = pred[4,2]{1,0} compare(%tb, %io2), direction=EQ
  %oh = f32[4,2]{1,0} convert(%eq)
  %y = f32[4,3]{1,0} dot(%oh, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (s32[4,1]{1,0}, f32[4,3]{1,0}) tuple(%top, %y)
}
"""

W = np.array([[1.0, 2.0, 3.0], [-4.0, 5.0, -6.0]], np.float32)


def _router_inputs(second: float) -> np.ndarray:
    """Logits whose row 0 is ``[1, second]``; the other rows are far from any tie."""
    return np.array([[1.0, second], [3.0, -1.0], [-2.0, 2.0], [0.5, 4.0]], np.float32)


def _answer(x: np.ndarray) -> list[np.ndarray]:
    """The router's outputs with each row's top-1 as given by ``x`` (ties to the lower id)."""
    top = np.argmax(x, axis=1).astype(np.int32)
    return [top[:, None], W[top]]


def test_find_ties_takes_keys_within_their_budget_and_never_keys_far_apart():
    m = parse_module(ROUTER)
    f = next(i for i in m.entry.instructions if i.name == "f")
    one_ulp = np.nextafter(np.float32(1.0), np.float32(2.0))
    keys = np.array([[one_ulp, 1.0], [3.0, -1.0], [2.0, -2.0], [4.0, 0.5]], np.float32)
    ids = np.array([[1, 0], [0, 1], [1, 0], [1, 0]], np.int32)
    (t,) = find_ties(f, (keys, ids), VerifyOptions(), 0)
    assert (t.instruction, t.row, t.position, t.first, t.second) == ("f", (0,), 0, 1, 0)
    assert t.first_key - t.second_key == pytest.approx(2.0 ** -23)
    assert t.budget == pytest.approx((1e-4 + 1e-5) * one_ulp)  # f32's rtol and floor, times the pair's own size
    far = keys.copy()
    far[0] = [2.0, 1.0]
    assert find_ties(f, (far, ids), VerifyOptions(), 0) == []


def test_expected_that_took_the_other_side_of_a_one_ulp_tie_is_drift_naming_it():
    """XLA:CPU rounding a router logit the other way picks the other expert: a flip at one ulp is drift, for
    the chosen ids (an integer output, else exact) and the expert's output downstream."""
    m = parse_module(ROUTER)
    x = _router_inputs(float(np.nextafter(np.float32(1.0), np.float32(2.0))))  # expert 1 by one ulp
    other = x.copy()
    other[0, 1] = 1.0  # the tie broken the other way: expert 0
    out, rep = run_module(m, [x, W], compile_kernels=False, expected=_answer(other))
    assert rep.status == "drift", "\n".join(rep.verdict.lines())
    assert all(f.status == "ok" for f in rep.fusions)
    for o in rep.verdict.outputs:
        assert o.status == "drift" and "near-tie" in o.reason and "%f row [0]: ids 1 and 0" in o.reason
        (t,) = o.ties
        assert (t.instruction, t.row, t.first, t.second) == ("f", (0,), 1, 0)
        assert o.to_json()["ties"][0]["ids"] == [1, 0]
    # the kernels' own answer is still the reference's: ok against it
    _, rep = run_module(m, [x, W], compile_kernels=False, expected=[np.asarray(v) for v in out])
    assert rep.status == "ok"


def test_expected_that_took_the_other_expert_far_from_a_tie_is_a_mismatch():
    m = parse_module(ROUTER)
    x = _router_inputs(1.5)  # expert 1 by 0.5: no tie
    other = x.copy()
    other[0, 1] = 0.5
    _, rep = run_module(m, [x, W], compile_kernels=False, expected=_answer(other))
    assert rep.status == "mismatch"
    assert {o.name: o.status for o in rep.verdict.outputs} == {"o0": "mismatch", "o1": "mismatch"}
    assert all(not o.ties and "near-tie" not in o.reason for o in rep.verdict.outputs)


def test_a_large_key_elsewhere_makes_no_pair_a_near_tie():
    """The budget is each pair's own: a 1e30 logit in another row must not absorb a flip 4 apart."""
    m = parse_module(ROUTER)
    x = _router_inputs(1.5)
    x[2] = [1e30, 2.0]
    other = x.copy()
    other[1] = [-1.0, 3.0]  # row 1's expert the other way round: a real difference
    _, rep = run_module(m, [x, W], compile_kernels=False, expected=_answer(other))
    assert rep.status == "mismatch"
    assert all(not o.ties and "near-tie" not in o.reason for o in rep.verdict.outputs)


def test_keys_that_are_entry_parameters_have_no_near_tie():
    """Keys straight from the program's inputs are the same for every oracle: a stable sort of them cannot
    flip, so an expected file that swapped two equal keys is a mismatch."""
    m = parse_module(ROUTER.replace(
        "%f = (f32[4,2]{1,0}, s32[4,2]{1,0}) fusion(%k)", "%f = (f32[4,2]{1,0}, s32[4,2]{1,0}) fusion(%x)"))
    x = _router_inputs(float(np.nextafter(np.float32(1.0), np.float32(2.0))))
    other = x.copy()
    other[0, 1] = 1.0
    _, rep = run_module(m, [x, W], compile_kernels=False, expected=_answer(other))
    assert rep.status == "mismatch"
    assert all(not o.ties for o in rep.verdict.outputs)


def _nudged(monkeypatch, fusion: str, by: float) -> None:
    """Make the kernel of ``fusion`` return row 0 column 0 of its output ``by`` ulps up."""
    real = triton_runtime.run_fusion

    def run(runner, ops, inst, **kw):
        flat = real(runner, ops, inst, **kw)
        if inst.name == fusion:
            a = np.array(flat[0], np.float32).reshape(-1)
            a[0] = a[0] + by * float(np.spacing(a[0]))
            flat = [a] + list(flat[1:])
        return flat

    monkeypatch.setattr(triton_runtime, "run_fusion", run)


def test_kernel_chain_that_took_the_other_side_of_a_tie_is_judged_against_the_reference_with_its_choice(monkeypatch):
    """The keys' kernel rounds one ulp up (within its budget) and the kernel path picks the other expert than
    the reference: judged against the reference re-run with the kernels' choice, drift naming the tie."""
    m = parse_module(ROUTER)
    x = _router_inputs(float(np.nextafter(np.float32(1.0), np.float32(2.0))))
    _nudged(monkeypatch, "k", 2.0)  # 1.0 + 2 ulp beats 1.0 + 1 ulp: expert 0 on the kernel path
    _, rep = run_module(m, [x, W], compile_kernels=False)
    assert all(f.status == "ok" for f in rep.fusions), [(f.name, f.error_budget_ratio) for f in rep.fusions]
    assert rep.status == "drift", "\n".join(rep.verdict.lines())
    for o in rep.verdict.outputs:
        assert o.status == "drift" and "the reference took the other side of 1 near-tie(s)" in o.reason
        assert [(t.instruction, t.row, t.first, t.second) for t in o.ties] == [("f", (0,), 0, 1)]
        assert o.max_abs_error == 0  # against the re-run with the kernels' choice


def test_keys_kernel_out_of_budget_is_a_mismatch_whatever_it_flips(monkeypatch):
    m = parse_module(ROUTER)
    x = _router_inputs(float(np.nextafter(np.float32(1.0), np.float32(2.0))))
    _nudged(monkeypatch, "k", 4000.0)  # 4.8e-4: past f32's budget (1e-4 * 1 + 1e-5 * 4)
    _, rep = run_module(m, [x, W], compile_kernels=False)
    assert rep.status == "mismatch"
    assert rep.verdict.first_out_of_budget is not None and rep.verdict.first_out_of_budget.fusion == "k"
    assert all(not o.ties for o in rep.verdict.outputs)


def _mixtral():
    path = REAL / "mixtral.h200_opt.hlo"
    m = parse_module(path.read_text(), str(path))
    return m, load_inputs(m, str(REAL / "mixtral.inputs.npz")), load_expected(REAL / "mixtral.expected.npz", 1, types=["bf16"])


#: The near-tie of ``mixtral`` (tests/data/real_models, seed 10 of scripts/gen_real_models.py): layer 0's
#: top-2 router (``%fusion.42``), token 12 (batch 1, position 4), experts 1 and 0 at bf16 probabilities
#: 0.267578 and 0.265625 (one bf16 ulp apart, budget 0.00803). fusegen's kernels, its reference and the f64
#: oracle route that token to experts 3 and 1; JAX on XLA:CPU to 3 and 0, and positions 4, 6 and 7 of
#: batch 1 differ from its answer by up to 1.67 (attention carries the flip to the later tokens).
MIXTRAL_TIE = "%fusion.42 row [12]: ids 1 and 0 (keys 0.267578 and 0.265625"


def test_mixtral_router_flip_is_drift_naming_the_tie():
    res = CliRunner().invoke(cli, ["run", str(REAL / "mixtral.h200_opt.hlo"), "--no-compile", "--json",
                                   "--inputs", str(REAL / "mixtral.inputs.npz"),
                                   "--expected", str(REAL / "mixtral.expected.npz")])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["status"] == "drift" and doc["oracle"] == "f64"
    (o0,) = doc["outputs"]
    assert o0["status"] == "drift" and MIXTRAL_TIE in o0["reason"]
    assert [(t["instruction"], t["row"], t["ids"]) for t in o0["ties"]] == [("fusion.42", [12], [1, 0])]
    assert o0["expected_value"] == pytest.approx(1.5234375) and o0["kernel_value"] == pytest.approx(-0.142578125)
    assert o0["kernel_vs_f64"] <= o0["allowed_vs_f64"]
    assert all(f["status"] == "ok" for f in doc["fusions"])


def test_mixtral_with_a_planted_comparator_bug_is_a_mismatch():
    """Layer 0's top-k comparator planted the wrong way round (the two lowest experts): kernels, reference and
    f64 oracle all follow the program, and JAX's answer (the right program) is a mismatch the near-ties of
    the wrong order do not explain."""
    m, args, expected = _mixtral()
    text = (REAL / "mixtral.h200_opt.hlo").read_text()
    start = text.index("%compare-greater-than.1 (")
    end = text.index("\n}", start)
    wrong = parse_module(text[:start] + text[start:end].replace("direction=GT", "direction=LT") + text[end:])
    _, rep = run_module(wrong, args, compile_kernels=False, expected=expected)
    assert rep.status == "mismatch"
    (o0,) = rep.verdict.outputs
    assert o0.status == "mismatch" and "kernel vs expected" in o0.reason and not o0.ties


def test_mixtral_sort_kernel_that_flips_the_tie_on_its_own_operands_is_a_mismatch(monkeypatch):
    """A sort kernel that puts the tied experts the other way round on the same operands as the reference is a
    kernel bug (out of budget at the fusion), never a tie, even though that flip is what JAX did."""
    m, args, expected = _mixtral()
    real = triton_runtime.run_fusion

    def run(runner, ops, inst, **kw):
        flat = real(runner, ops, inst, **kw)
        if inst.name == "fusion.42":
            keys, ids = (np.array(b).reshape(16, 4) for b in flat[:2])
            keys[12, [1, 2]], ids[12, [1, 2]] = keys[12, [2, 1]], ids[12, [2, 1]]
            flat = [keys.reshape(-1), ids.reshape(-1)] + list(flat[2:])
        return flat

    monkeypatch.setattr(triton_runtime, "run_fusion", run)
    _, rep = run_module(m, args, compile_kernels=False, expected=expected)
    assert rep.status == "mismatch"
    bad = {f.name: f.status for f in rep.fusions if f.status != "ok"}
    assert bad == {"fusion.42": "mismatch"}
    assert rep.verdict.first_out_of_budget.fusion == "fusion.42"


#: The router with an argmax (a variadic reduce of keys and ids, as XLA writes ``jnp.argmax``) in place of
#: the sort: the chosen expert's output vector.
ARGMAX_ROUTER = """HloModule argmax_router
%argmax (a: f32[], i: s32[], b: f32[], j: s32[]) -> (f32[], s32[]) {
  %a = f32[] parameter(0)
  %i = s32[] parameter(1)
  %b = f32[] parameter(2)
  %j = s32[] parameter(3)
  %gt = pred[] compare(%a, %b), direction=GT
  %eq = pred[] compare(%a, %b), direction=EQ
  %lt = pred[] compare(%i, %j), direction=LT
  %tie = pred[] and(%eq, %lt)
  %take = pred[] or(%gt, %tie)
  %k = f32[] select(%take, %a, %b)
  %n = s32[] select(%take, %i, %j)
  ROOT %r = (f32[], s32[]) tuple(%k, %n)
}
%scaled (p: f32[4,2]) -> f32[4,2] {
  %p = f32[4,2]{1,0} parameter(0)
  %one = f32[] constant(1)
  %b1 = f32[4,2]{1,0} broadcast(%one), dimensions={}
  ROOT %m = f32[4,2]{1,0} multiply(%p, %b1)
}
%fused_argmax (p0: f32[4,2]) -> (f32[4], s32[4]) {
  %p0 = f32[4,2]{1,0} parameter(0)
  %io = s32[4,2]{1,0} iota(), iota_dimension=1
  %ninf = f32[] constant(-inf)
  %zero = s32[] constant(0)
  ROOT %r = (f32[4]{0}, s32[4]{0}) reduce(%p0, %io, %ninf, %zero), dimensions={1}, to_apply=%argmax
}
ENTRY %e (x: f32[4,2], w: f32[2,3]) -> f32[4,3] {
  %x = f32[4,2]{1,0} parameter(0)
  %w = f32[2,3]{1,0} parameter(1)
  %k = f32[4,2]{1,0} fusion(%x), kind=kLoop, calls=%scaled
  %f = (f32[4]{0}, s32[4]{0}) fusion(%k), kind=kInput, calls=%fused_argmax
  %top1 = s32[4]{0} get-tuple-element(%f), index=1
  %tb = s32[4,2]{1,0} broadcast(%top1), dimensions={0}
  %io2 = s32[4,2]{1,0} iota(), iota_dimension=1
  %eq = pred[4,2]{1,0} compare(%tb, %io2), direction=EQ
  %oh = f32[4,2]{1,0} convert(%eq)
  ROOT %y = f32[4,3]{1,0} dot(%oh, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


ONE_ULP_UP = float(np.nextafter(np.float32(1.0), np.float32(2.0)))


@pytest.mark.parametrize("second, drift", [(ONE_ULP_UP, True), (1.5, False)])
def test_argmax_router_flip_is_drift_at_one_ulp_and_a_mismatch_far_apart(second, drift):
    m = parse_module(ARGMAX_ROUTER)
    x = _router_inputs(second)
    other = x.copy()
    other[0, 1] = 1.0 if drift else 0.5
    _, rep = run_module(m, [x, W], compile_kernels=False, expected=_answer(other)[1:])
    assert all(f.status == "ok" for f in rep.fusions)
    (o,) = rep.verdict.outputs
    if drift:
        assert o.status == "drift" and "%f row [0]: ids 1 and 0" in o.reason, o.reason
        assert [(t.row, t.position, t.first, t.second) for t in o.ties] == [((0,), 1, 1, 0)]
    else:
        assert o.status == "mismatch" and not o.ties


def test_argmax_kernel_chain_that_took_the_other_side_of_a_tie_is_drift(monkeypatch):
    m = parse_module(ARGMAX_ROUTER)
    x = _router_inputs(float(np.nextafter(np.float32(1.0), np.float32(2.0))))
    _nudged(monkeypatch, "k", 2.0)
    _, rep = run_module(m, [x, W], compile_kernels=False)
    (o,) = rep.verdict.outputs
    assert rep.status == "drift" and "the reference took the other side of 1 near-tie(s)" in o.reason, o.reason
    assert [(t.row, t.first, t.second) for t in o.ties] == [((0,), 0, 1)] and o.max_abs_error == 0
