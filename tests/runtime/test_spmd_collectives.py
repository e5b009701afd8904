"""Every collective and replica-group spelling run as N partitions, against XLA:CPU on N host devices.

Each case is a hand-written per-partition module; XLA:CPU runs it on 4 or 8 host devices
(:mod:`xla_spmd_oracle`, one subprocess for all cases) and fusegen runs it with
:func:`fusegen.verify.judged_run.run_spmd_module` (the kernel path's collectives) and
:func:`~fusegen.runtime.spmd.run_spmd_reference` (the reference's, written apart). Both must give XLA's
answer on every device. Then: a planted wrong collective is a mismatch, and what fusegen cannot run as N
copies is refused with exit 4.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from xla_oracle import JAX_ERROR
from xla_spmd_oracle import run_xla_spmd

from fusegen.cli.main import cli
from fusegen.evaluator.collectives import MultiDeviceUnsupported
from fusegen.hlo.parser import parse_module
from fusegen.runtime.inputs import leaves
from fusegen.runtime.limits import Budget
from fusegen.runtime.spmd import run_spmd_reference
from fusegen.evaluator.spmd_plan import plan_spmd
from fusegen.verify.judged_run import run_spmd_module

pytestmark = pytest.mark.skipif(JAX_ERROR is not None, reason=JAX_ERROR or "")

ADD = "add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT c = f32[] add(a, b) }\n"
MAX = "mx { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT c = f32[] maximum(a, b) }\n"


def _module(body: str, params: str, root_shape: str, p: int, r: int = 1, extra: str = "") -> str:
    header = f"HloModule m, num_partitions={p}" + (f", replica_count={r}" if r > 1 else "")
    return f"{header}\n{ADD}{MAX}{extra}ENTRY e {{\n{params}\n{body}\n}}\n".replace("ROOT_SHAPE", root_shape)


def _p(shape: str, k: int = 0) -> str:
    return f"  p{k} = {shape} parameter({k}), sharding={{manual}}"


WHILE_BODY = """cond {
  s = (s32[], f32[4,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[4,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4,8] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  r = f32[4,8] all-reduce(x), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=add
  h = f32[] constant(0.25)
  hb = f32[4,8] broadcast(h), dimensions={}
  y = f32[4,8] multiply(r, hb)
  c = f32[4,8] collective-permute(y), channel_id=2, source_target_pairs={{0,1},{1,0},{2,3},{3,2}}
  q = f32[4,8] add(c, x)
  ROOT out = (s32[], f32[4,8]) tuple(j, q)
}
"""

# name -> (text, num_partitions, replica_count, per-parameter shape)
CASES = {
    "all_reduce_explicit_groups": (_module(
        "  ROOT r = f32[4,8] all-reduce(p0), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, "
        "to_apply=add, sharding={manual}", _p("f32[4,8]"), "", 4), [(4, 8)]),
    "all_reduce_iota_groups_transposed": (_module(
        "  ROOT r = f32[4,8] all-reduce(p0), channel_id=1, replica_groups=[2,2]<=[2,2]T(1,0), "
        "use_global_device_ids=true, to_apply=mx, sharding={manual}", _p("f32[4,8]"), "", 4), [(4, 8)]),
    "all_reduce_mesh_groups": (_module(
        "  ROOT r = f32[4,8] all-reduce(p0), channel_id=1, replica_groups=mesh['x'=2,'y'=4] {'x'}, "
        "use_global_device_ids=true, to_apply=add, sharding={manual}", _p("f32[4,8]"), "", 8), [(4, 8)]),
    "one_shot_all_reduce_kernel": (_module(
        "  ROOT r = f32[4,8] all-reduce(p0), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, "
        "to_apply=mx, sharding={manual}, backend_config={\"collective_backend_config\":{\"kernel_strategy\":"
        "\"KERNEL_STRATEGY_TRITON_ONE_SHOT\"}}", _p("f32[4,8]"), "", 4), [(4, 8)]),
    "all_gather_rows_of_2d_mesh": (_module(
        "  ROOT g = f32[4,32] all-gather(p0), channel_id=1, replica_groups=[2,4]<=[8], dimensions={1}, "
        "use_global_device_ids=true, sharding={manual}", _p("f32[4,8]"), "", 8), [(4, 8)]),
    "all_gather_columns_of_2d_mesh": (_module(
        "  ROOT g = f32[8,8] all-gather(p0), channel_id=1, replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}, "
        "use_global_device_ids=true, sharding={manual}", _p("f32[4,8]"), "", 8), [(4, 8)]),
    "reduce_scatter": (_module(
        "  ROOT s = f32[2,8] reduce-scatter(p0), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, "
        "use_global_device_ids=true, to_apply=add, sharding={manual}", _p("f32[8,8]"), "", 4), [(8, 8)]),
    "all_to_all_array": (_module(
        "  ROOT a = f32[4,6] all-to-all(p0), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}, "
        "sharding={manual}", _p("f32[4,6]"), "", 4), [(4, 6)]),
    "all_to_all_tuple": (_module(
        "  ROOT a = (f32[3,5], f32[3,5]) all-to-all(p0, p1), channel_id=1, replica_groups={{0,1},{2,3}}, "
        "sharding={{manual},{manual}}", _p("f32[3,5]") + "\n" + _p("f32[3,5]", 1), "", 4), [(3, 5), (3, 5)]),
    "collective_permute_non_cyclic": (_module(
        "  ROOT c = f32[4,8] collective-permute(p0), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3}}, "
        "sharding={manual}", _p("f32[4,8]"), "", 4), [(4, 8)]),
    "async_start_done_pairs": (_module(
        "  ars = f32[4,8] all-reduce-start(p0), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true,"
        " to_apply=add\n  ard = f32[4,8] all-reduce-done(ars)\n"
        "  ags = (f32[4,8], f32[16,8]) all-gather-start(ard), channel_id=2, replica_groups={{0,1,2,3}}, "
        "dimensions={0}, use_global_device_ids=true\n  agd = f32[16,8] all-gather-done(ags)\n"
        "  cps = (f32[16,8], f32[16,8]) collective-permute-start(agd), channel_id=3, source_target_pairs={{0,3},{3,0}}"
        "\n  cpd = f32[16,8] collective-permute-done(cps)\n  ROOT o = f32[16,8] add(cpd, agd), sharding={manual}",
        _p("f32[4,8]"), "", 4), [(4, 8)]),
    "tuple_all_gather_start": (_module(
        "  ags = ((f32[4,8], f32[2,8]), (f32[16,8], f32[8,8])) all-gather-start(p0, p1), channel_id=1, "
        "replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true\n"
        "  ROOT agd = (f32[16,8], f32[8,8]) all-gather-done(ags), sharding={{manual},{manual}}",
        _p("f32[4,8]") + "\n" + _p("f32[2,8]", 1), "", 4), [(4, 8), (2, 8)]),
    "async_start_wrapping_reduce_scatter": (_module(
        "  s = ((f32[8,8]), f32[4,8]) async-start(p0), calls=wrapped_rs\n"
        "  ROOT d = f32[4,8] async-done(s), sharding={manual}", _p("f32[8,8]"), "", 4,
        extra="wrapped_rs {\n  x = f32[8,8] parameter(0)\n  ROOT rs = f32[4,8] reduce-scatter(x), channel_id=1, "
              "replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=add\n}\n"),
     [(8, 8)]),
    "collective_in_while": (_module(
        "  z = s32[] constant(0)\n  t = (s32[], f32[4,8]) tuple(z, p0)\n"
        "  w = (s32[], f32[4,8]) while(t), condition=cond, body=body\n"
        "  ROOT o = f32[4,8] get-tuple-element(w), index=1, sharding={manual}", _p("f32[4,8]"), "", 4,
        extra=WHILE_BODY), [(4, 8)]),
    "partition_id_arithmetic": (_module(
        "  pid = u32[] partition-id()\n  f = f32[] convert(pid)\n  b = f32[4,8] broadcast(f), dimensions={}\n"
        "  ROOT o = f32[4,8] multiply(p0, b), sharding={manual}", _p("f32[4,8]"), "", 4), [(4, 8)]),
    "cross_replica_and_partition_modes": (_module(
        "  a = f32[4,8] all-reduce(p0), replica_groups={}, to_apply=add\n"
        "  b = f32[4,8] all-reduce(p0), channel_id=1, replica_groups={{0,1}}, to_apply=mx\n"
        "  rid = u32[] replica-id()\n  f = f32[] convert(rid)\n  fb = f32[4,8] broadcast(f), dimensions={}\n"
        "  c = f32[4,8] add(a, fb)\n  ROOT o = (f32[4,8], f32[4,8]) tuple(c, b), sharding={{manual},{manual}}",
        _p("f32[4,8]"), "", 2, r=2), [(4, 8)]),
}


TRITON_COLLECTIVE = _module(
    "  ROOT f = f32[4,8] fusion(p0), kind=kCustom, calls=fused_ar, sharding={manual}, "
    "backend_config={\"fusion_backend_config\":{\"kind\":\"__triton_collective\"}}", _p("f32[4,8]"), "", 4,
    extra="fused_ar {\n  x = f32[4,8] parameter(0)\n  r = f32[4,8] all-reduce(x), channel_id=1, "
          "replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=add\n  ROOT m = f32[4,8] multiply(r, x)\n}\n")
CASES["triton_collective_fusion"] = (TRITON_COLLECTIVE, [(4, 8)])

# StableHLO has no async tuple all-gather: XLA:CPU runs the synchronous form of the same exchange
XLA_EQUIVALENT = {"triton_collective_fusion": _module(  # XLA:CPU has no GPU fusion kinds: the same ops unfused
    "  r = f32[4,8] all-reduce(p0), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, "
    "to_apply=add\n  ROOT m = f32[4,8] multiply(r, p0), sharding={manual}", _p("f32[4,8]"), "", 4),
    "tuple_all_gather_start": _module(
    "  ag = (f32[16,8], f32[8,8]) all-gather(p0, p1), channel_id=1, replica_groups={{0,1,2,3}}, "
    "dimensions={0}, use_global_device_ids=true\n  a = f32[16,8] get-tuple-element(ag), index=0\n"
    "  b = f32[8,8] get-tuple-element(ag), index=1\n"
    "  ROOT o = (f32[16,8], f32[8,8]) tuple(a, b), sharding={{manual},{manual}}",
    _p("f32[4,8]") + "\n" + _p("f32[2,8]", 1), "", 4)}


def _inputs(name: str) -> list[list[np.ndarray]]:
    text, shapes = CASES[name]
    m = parse_module(text)
    n = plan_spmd(m).devices
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    return [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(n)]


@pytest.fixture(scope="module")
def xla_answers():
    names = list(CASES)
    cases = []
    for name in names:
        m = parse_module(CASES[name][0])
        plan = plan_spmd(m)
        cases.append((XLA_EQUIVALENT.get(name, CASES[name][0]), plan.num_partitions, plan.replica_count,
                      _inputs(name)))
    return dict(zip(names, run_xla_spmd(cases)))


@pytest.mark.parametrize("name", list(CASES))
def test_collective_matches_xla_cpu(name, xla_answers):
    want = xla_answers[name]
    assert not isinstance(want, str), f"XLA:CPU refused the case: {want}"
    m = parse_module(CASES[name][0])
    args = _inputs(name)
    outs, _, report = run_spmd_module(m, args, compile_kernels=False)
    refs = run_spmd_reference(m, plan_spmd(m), args, Budget(None))
    assert report.status == "ok"
    if name == "one_shot_all_reduce_kernel":
        assert report.collective_backends["r"]["backend"] == "triton"
    for d, (o, r, w) in enumerate(zip(outs, refs, want)):
        for k, (ko, ro, wo) in enumerate(zip(leaves(o), leaves(r), w)):
            np.testing.assert_allclose(ko, wo, rtol=1e-6, atol=1e-6, err_msg=f"kernel path, device {d}, leaf {k}")
            np.testing.assert_allclose(ro, wo, rtol=1e-6, atol=1e-6, err_msg=f"reference, device {d}, leaf {k}")


def test_non_cyclic_permute_gives_zeros_to_the_device_nobody_sends_to(xla_answers):
    want = xla_answers["collective_permute_non_cyclic"]
    assert not np.any(want[0][0]) and np.any(want[1][0])  # XLA: device 0 receives nothing
    outs, _, _ = run_spmd_module(parse_module(CASES["collective_permute_non_cyclic"][0]),
                                 _inputs("collective_permute_non_cyclic"), compile_kernels=False)
    assert not np.any(outs[0])


def test_planted_identity_all_reduce_is_a_mismatch(monkeypatch):
    from fusegen.runtime import spmd

    real = spmd.exchange

    def identity_all_reduce(inst, contributions, pairs=None):
        if inst.opcode.startswith("all-reduce"):  # the old single-device shortcut
            return [c[0] for c in contributions]
        return real(inst, contributions, pairs=pairs)

    monkeypatch.setattr(spmd, "exchange", identity_all_reduce)
    m = parse_module(CASES["all_reduce_explicit_groups"][0])
    _, _, report = run_spmd_module(m, _inputs("all_reduce_explicit_groups"), compile_kernels=False)
    assert report.status == "mismatch"
    assert report.verdict.outputs[0].status == "mismatch"


FUSED_COLLECTIVE = """HloModule m, num_partitions=2
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT c = f32[] add(a, b) }
fused { x = f32[8] parameter(0)  ROOT r = f32[8] all-reduce(x), channel_id=1, replica_groups={{0,1}}, to_apply=add }
ENTRY e {
  p = f32[8] parameter(0)
  ROOT f = f32[8] fusion(p), kind=kLoop, calls=fused
}
"""

DIVERGENT = """HloModule m, num_partitions=2
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT c = f32[] add(a, b) }
reduce_it { x = f32[8] parameter(0)  ROOT r = f32[8] all-reduce(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add }
keep_it { ROOT x = f32[8] parameter(0) }
ENTRY e {
  p = f32[8] parameter(0)
  pid = u32[] partition-id()
  i = s32[] convert(pid)
  ROOT c = f32[8] conditional(i, p, p), branch_computations={reduce_it, keep_it}
}
"""

SEND = """HloModule m, num_partitions=2
ENTRY e {
  p = f32[8] parameter(0)
  t = token[] after-all()
  s = (f32[8], u32[], token[]) send(p, t), channel_id=2
  ROOT g = f32[8] get-tuple-element(s), index=0
}
"""


@pytest.mark.parametrize("text, words", [
    (FUSED_COLLECTIVE, ["%r (all-reduce)", "inside fusion %f"]),
    (DIVERGENT, ["diverged", "%r"]),
    (SEND, ["%s (send)"]),
])
def test_what_cannot_run_as_n_copies_is_refused_with_exit_4(tmp_path, text, words):
    f = tmp_path / "m.hlo"
    f.write_text(text)
    res = CliRunner().invoke(cli, ["run", str(f), "--no-compile", "--json"])
    assert res.exit_code == 4, res.output
    for w in words:
        assert w in res.output, res.output


def test_one_device_entry_points_refuse_a_multi_device_module():
    from fusegen.evaluator.evaluator import evaluate_module
    from fusegen.verify.judged_run import run_module

    m = parse_module(CASES["all_reduce_explicit_groups"][0])
    x = np.zeros((4, 8), np.float32)
    for fn in (evaluate_module, run_module):
        with pytest.raises(MultiDeviceUnsupported, match="num_partitions=4"):
            fn(m, [x])
