"""A valid module with an op fusegen does not run (issue 29): exit 4 with "fusegen has no implementation of ...",
before anything runs, never a plugin failure (exit 2); ``explain`` warns first; the library raises
:class:`fusegen.UnsupportedInstructionError`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import fusegen
from fusegen.cli.main import cli
from fusegen.hlo.parser import parse_module
from fusegen.runtime.support import unsupported_instructions

#: A vendor kernel (top level) and an op the evaluator lacks inside a while body; the negate fusion is fine.
MODULE = """HloModule unsupported

body {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[8] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[8] custom-call(x), custom_call_target="acme$kernel", api_version=API_VERSION_TYPED_FFI
  ROOT t = (s32[], f32[8]) tuple(j, y)
}

cond {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  two = s32[] constant(2)
  ROOT lt = pred[] compare(i, two), direction=LT
}

fused_neg {
  a = f32[8] parameter(0)
  ROOT n = f32[8] negate(a)
}

ENTRY e {
  a = f32[8] parameter(0)
  n = f32[8] fusion(a), kind=kLoop, calls=fused_neg
  tok = token[] after-all()
  inf = ((f32[8]), token[]) infeed(tok)
  zero = s32[] constant(0)
  init = (s32[], f32[8]) tuple(zero, n)
  w = (s32[], f32[8]) while(init), condition=cond, body=body
  ROOT r = f32[8] get-tuple-element(w), index=1
}
"""


def _write(tmp_path):
    f = tmp_path / "m.hlo"
    f.write_text(MODULE)
    return f


def test_run_exits_4_naming_the_first_op_and_counting_the_rest(tmp_path):
    res = CliRunner().invoke(cli, ["run", str(_write(tmp_path)), "--no-compile"])
    assert res.exit_code == 4, res.output
    assert "fusegen has no implementation of custom-call target 'acme$kernel' (instruction %y, computation " \
           "%body, line 9) (and 1 more: %inf)" in res.output
    assert "plugin" not in res.output and "raised" not in res.output


def test_run_help_names_exit_4():
    res = CliRunner().invoke(cli, ["run", "--help"])
    assert "4 on a valid module fusegen cannot run" in " ".join(res.output.split())


def test_explain_warns_before_any_run_and_lists_them_in_json(tmp_path):
    f = _write(tmp_path)
    res = CliRunner().invoke(cli, ["explain", str(f)])
    assert res.exit_code == 0, res.output
    assert ("fusegen: warning: " + str(f) + ": fusegen has no implementation of HLO op 'infeed' (instruction %inf, "
            "computation %e, line 29); `fusegen run` will exit 4") in res.output
    res = CliRunner().invoke(cli, ["explain", str(f), "--json"])
    doc = json.loads(res.stdout)
    assert [(u["instruction"], u["opcode"], u["target"]) for u in doc["unsupported"]] == [
        ("y", "custom-call", "acme$kernel"), ("inf", "infeed", None)]


def test_the_library_raises_a_typed_error_before_running():
    m = parse_module(MODULE, "m.hlo")
    with pytest.raises(fusegen.UnsupportedInstructionError) as e:
        fusegen.run(m, inputs=[np.ones(8, np.float32)], compile=False)
    assert [u.instruction for u in e.value.unsupported] == ["y", "inf"]
    assert e.value.what == "custom-call target 'acme$kernel'"
    assert fusegen.explain(m).unsupported == [str(u) for u in e.value.unsupported]


def test_every_library_call_jax_emits_is_supported():
    """The complement: none of tests/data/library_calls' programs has anything unsupported."""
    from conftest import REPO

    paths = sorted((REPO / "tests" / "data" / "library_calls").glob("*.hlo"))
    assert paths
    left = [str(u) for p in paths for u in unsupported_instructions(parse_module(p.read_text(), p.name))]
    assert left == []
