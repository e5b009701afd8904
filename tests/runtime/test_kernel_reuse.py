"""Identical fusions run the first one's kernels (:mod:`fusegen.runtime.kernel_reuse`): the same partition as
XLA's own kernel deduplication, never across fusions that differ, and the same outputs."""

from __future__ import annotations

import collections

import numpy as np

from _backend_helpers import device, plugin_manager
from conftest import corpus_path
from fusegen.codegen import triton_runtime
from fusegen.evaluator.evaluator import evaluate_module
from fusegen.hlo.parser import parse_file, parse_module
from fusegen.passes.pipeline import optimize_if_needed
from fusegen.runtime.compile_jobs import fusion_fingerprint
from fusegen.runtime.executor import Executor
from fusegen.runtime.kernel_reuse import reuse_key
from fusegen.verify.recorder import RunRecorder

C1 = ", ".join(str(0.25 * k) for k in range(16))
C2 = ", ".join(str(0.25 * k) for k in range(15)) + ", 9.5"  # one element differs: elided the same way

def _fused(name: str, names: tuple[str, ...], literal: str) -> str:
    """``x * c + 1`` over f32[16] with the 16-element constant ``c``, every instruction named from ``names``."""
    p, c, m, one, ob, root = names
    return f"""%{name} ({p}: f32[16]) -> f32[16] {{
  %{p} = f32[16] parameter(0)
  %{c} = f32[16] constant({{{literal}}})
  %{m} = f32[16] multiply(%{p}, %{c})
  %{one} = f32[] constant(1)
  %{ob} = f32[16] broadcast(%{one}), dimensions={{}}
  ROOT %{root} = f32[16] add(%{m}, %{ob})
}}
"""


THREE = "HloModule three\n\n" + "\n".join([
    _fused("a_fused", ("p", "c", "m", "one", "ob", "s"), C1),
    _fused("b_fused", ("q", "k", "n", "uno", "ub", "t"), C1),  # a's computation under other names
    _fused("c_fused", ("r", "d", "o", "eins", "eb", "u"), C2),
]) + """
ENTRY %main (x: f32[16]) -> f32[16] {
  %x = f32[16] parameter(0)
  %f1 = f32[16] fusion(%x), kind=kLoop, calls=%a_fused
  %f2 = f32[16] fusion(%f1), kind=kLoop, calls=%b_fused
  ROOT %f3 = f32[16] fusion(%f2), kind=kLoop, calls=%c_fused
}
"""


def test_identical_fusions_share_kernels_and_an_elided_constant_keeps_them_apart(monkeypatch):
    m = parse_module(THREE, "three.hlo")
    ex = Executor(m, compile_kernels=False, observer=RunRecorder(m))
    f1, f2, f3 = (next(i for i in m.entry.instructions if i.name == n) for n in ("f1", "f2", "f3"))
    e1, e2, e3 = (ex.plan_fusion(f)[0] for f in (f1, f2, f3))
    assert e1.kernels[0].source != e2.kernels[0].source  # the names differ
    # the compile deduplication's key cannot tell f3's constant from f1's (the canonical text elides it) ...
    assert fusion_fingerprint(f1, e1.kernels) == fusion_fingerprint(f3, e3.kernels)
    # ... the reuse key can
    assert reuse_key(f1, e1) == reuse_key(f2, e2) != reuse_key(f3, e3)
    loaded: list[str] = []
    real = triton_runtime.load_kernel

    def spy(ks, interpret=False):
        loaded.append(ks.name)
        return real(ks, interpret)

    monkeypatch.setattr(triton_runtime, "load_kernel", spy)
    x = np.linspace(-3, 3, 16, dtype=np.float32)
    out = ex.run([x])
    assert ex.kernel_reuse.distinct == 2
    assert loaded == [e1.kernels[0].name, e1.kernels[0].name, e3.kernels[0].name]  # f2 ran f1's kernel
    np.testing.assert_array_equal(np.asarray(out), evaluate_module(m, [x]))
    assert [r.status for r in ex.reports.values()] == ["ok"] * 3
    assert ex.reports["f2"].kernels[0].name == e2.kernels[0].name  # the report keeps each fusion's own kernel


def test_gpt12_reuse_groups_are_xlas_deduplicated_names():
    # XLA names the fusion whose kernel another reuses in its metadata (deduplicated_name); fusegen's groups
    # must be exactly those: 183 fusions, 21 kernels
    m = parse_file(corpus_path("jax", "gpt12.h200_opt.hlo"))
    optimize_if_needed(m, pm=plugin_manager(), device=device())
    ex = Executor(m, device(), compile_kernels=False)
    ours, xla = collections.defaultdict(set), collections.defaultdict(set)
    fusions = [i for i in m.entry.instructions if i.opcode == "fusion"]
    for f in fusions:
        emitted, _ = ex.plan_fusion(f)
        ours[reuse_key(f, emitted)].add(f.name)
        xla[(f.attrs.get("metadata") or {}).get("deduplicated_name", f.name)].add(f.name)
    assert len(fusions) == 183 and len(ours) == 21
    assert sorted(map(sorted, ours.values())) == sorted(map(sorted, xla.values()))
