"""A ``bitcast`` inside a fusion that changes element type and count (issue 29 item 4): the loop emitter
reinterprets the buffer lane by lane (``f32[1000] -> u8[1000,4]`` and back) instead of declining to the host.

The programs are ``lax.bitcast_convert_type`` compiled by XLA for an H200 (``tests/data/library_calls``,
``scripts/gen_library_calls.py``), checked against XLA:CPU's outputs. XLA:GPU leaves that bitcast between two
fusions; the test also fuses it into its consumer (as a fusion pass may: a bitcast is free to fuse), which
must change neither the answer nor where the fusion runs.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import REPO

from fusegen.hlo.parser import parse_module
from fusegen.runtime.inputs import load_expected, load_inputs
from fusegen.verify.judged_run import run_module

DATA = REPO / "tests" / "data" / "library_calls"


def _fuse_bitcast_into_consumer(text: str) -> str:
    """Move the entry's ``%b = T bitcast(%p)`` into the fusion that consumes it: that fusion's parameter 0
    becomes ``p``'s type, followed by the bitcast."""
    m = re.search(r"\n  (%bitcast[\w.]*) = (\S+) bitcast\((%[\w.]+)\)\n", text)
    assert m, "no top-level bitcast"
    name, to_type, src = m.groups()
    src_type = re.search(rf"\n  (?:ROOT )?{re.escape(src)} = (\S+) ", text).group(1)
    text = text.replace(m.group(0), "\n")
    consumer = re.search(rf"fusion\({re.escape(name)}\), kind=\w+, calls=(%[\w.]+)", text)
    comp = consumer.group(1)
    text = text.replace(f"fusion({name})", f"fusion({src})")
    head = re.search(rf"\n{re.escape(comp)} \(([\w.]+): [^)]*\) -> ", text)
    param = head.group(1)
    text = text.replace(head.group(0), head.group(0).replace(f"{param}: {to_type.split('{')[0]}",
                                                              f"{param}: {src_type.split('{')[0]}"))
    line = re.search(rf"\n  %{re.escape(param)} = \S+ parameter\(0\)\n", text).group(0)
    return text.replace(line, f"\n  %{param}.src = {src_type} parameter(0)\n  %{param} = {to_type} "
                              f"bitcast(%{param}.src)\n", 1)


@pytest.mark.parametrize("name", ["bitcast_f32_to_u8", "bitcast_u8_to_f32"])
@pytest.mark.parametrize("fused", [False, True], ids=["as_xla", "fused"])
def test_width_changing_bitcast_runs_on_the_loop_emitter_and_matches_xla_cpu(name, fused):
    text = (DATA / f"{name}.h200_opt.hlo").read_text()
    if fused:
        text = _fuse_bitcast_into_consumer(text)
    m = parse_module(text, f"{name}.hlo")
    inner = [i for i in m.all_instructions() if i.opcode == "bitcast" and i.parent is not m.entry]
    assert bool(inner) == fused
    if fused:
        (bc,) = inner
        assert bc.shape.numel != bc.operands[0].shape.numel and bc.shape.element_type != \
            bc.operands[0].shape.element_type
    types = [s.element_type for s in m.entry.root.shape.leaves()]
    expected = load_expected(str(DATA / f"{name}.expected.npz"), len(types), types=types)
    out, rep = run_module(m, load_inputs(m, str(DATA / f"{name}.inputs.npz")), compile_kernels=False,
                          expected=expected)
    assert [(f.name, f.emitter, f.backend, f.status) for f in rep.fusions if f.backend != "triton"] == []
    assert all(f.emitter == "LoopFusion" and f.status == "ok" for f in rep.fusions)
    assert rep.status == "ok", rep.verdict.lines()
    got, want = np.asarray(out), np.asarray(expected[0])
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))  # bit-exact
