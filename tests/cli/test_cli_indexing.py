"""The module modes of ``fusegen indexing`` (``fusegen.cli.indexing_modes.run_module_mode``): JSON shapes,
text output and one-line errors with exit code 2."""

from __future__ import annotations

import json

import pytest

from fusegen.cli.indexing_modes import run_module_mode

HLO = """
HloModule m
fused {
  p0 = f32[100, 200]{1, 0} parameter(0)
  p1 = f32[100, 200]{0, 1} parameter(1)
  t = f32[200, 100] transpose(p0), dimensions={1, 0}
  b = f32[100, 200] bitcast(p1)
  ROOT add = f32[100, 200]{1, 0} add(p0, b)
}
ENTRY e {
  p0 = f32[100, 200]{1, 0} parameter(0)
  p1 = f32[100, 200]{0, 1} parameter(1)
  ROOT fusion = f32[100, 200]{1, 0} fusion(p0, p1), kind=kLoop, calls=fused
}
"""

DS = """
HloModule m
ENTRY e {
  src = s32[2,2,258] parameter(0)
  of1 = s32[] parameter(1)
  of2 = s32[] parameter(2)
  of3 = s32[] parameter(3)
  ROOT ds = s32[1,2,32] dynamic-slice(src, of1, of2, of3), dynamic_slice_sizes={1, 2, 32}
}
"""


@pytest.fixture
def module(tmp_path):
    p = tmp_path / "m.hlo"
    p.write_text(HLO)
    return str(p)


def _run(capsys, *args, **kw):
    rc = run_module_mode(*args, **kw)
    out = capsys.readouterr().out
    return rc, out


def test_output_to_input_json(module, capsys):
    rc, out = _run(capsys, module, fusion="fusion", output_to_input=True, as_json=True)
    assert rc == 0
    data = json.loads(out)
    # p1 is read through a layout-changing bitcast: the row-major offset d0 * 200 + d1 in its {0,1} layout
    assert data["operands"] == [["(d0, d1) -> (d0, d1), domain: d0 in [0, 99], d1 in [0, 199]"],
                                ["(d0, d1) -> (d1 mod 100, d0 * 2 + d1 / 100), domain: d0 in [0, 99], d1 in [0, 199]"]]


def test_physical_layout_json(module, capsys):
    rc, out = _run(capsys, module, instruction="fusion", output_to_input=True, physical_layout=True, as_json=True)
    ops = json.loads(out)["operands"]
    # physically the bitcast is a plain row-major reshape of the same offset
    assert ops[1] == ["(d0, d1) -> (d0 * 2 + d1 / 100, d1 mod 100), domain: d0 in [0, 99], d1 in [0, 199]"]


def test_input_to_output_text(module, capsys):
    rc, out = _run(capsys, module, instruction="t", input_to_output=True, input_id=0)
    assert out == "operand id = 0 (d0, d1) -> (d1, d0), domain: d0 in [0, 99], d1 in [0, 199]\n"


def test_grouped_json(module, capsys):
    rc, out = _run(capsys, module, instruction="fusion", output_to_input=True, grouped=True, as_json=True)
    grouped = json.loads(out)["grouped"]
    assert set(grouped) == {"add", "b", "p0", "p1"}
    assert grouped["p1"] == ["(d0, d1) -> (d1 mod 100, d0 * 2 + d1 / 100), domain: d0 in [0, 99], d1 in [0, 199]"]


def test_runtime_variables_in_details(tmp_path, capsys):
    p = tmp_path / "ds.hlo"
    p.write_text(DS)
    rc, out = _run(capsys, str(p), instruction="ds", output_to_input=True, as_json=True)
    details = json.loads(out)["details"][0][0]
    assert [r["instruction"] for r in details["runtime_variables"]] == ["parameter(1)", "parameter(2)", "parameter(3)"]


def test_coalescing_json(module, tmp_path, capsys):
    # the bitcast keeps p1's physical order: read in order, coalesced
    rc, out = _run(capsys, module, fusion="fusion", coalescing=True, as_json=True, device_name="rtxa6000")
    assert json.loads(out) == {"coalesced": [True, True]}
    # read logically (no bitcast), the column-major p1 is strided across a warp
    p = tmp_path / "direct.hlo"
    p.write_text(HLO.replace("add(p0, b)", "add(p0, p1)"))
    rc, out = _run(capsys, str(p), fusion="fusion", coalescing=True, as_json=True, device_name="rtxa6000")
    assert json.loads(out) == {"coalesced": [True, False]}


@pytest.mark.parametrize("kwargs,message", [
    (dict(instruction="nope", output_to_input=True), "no instruction %nope"),
    (dict(instruction="fusion"), "exactly one of --output-to-input and --input-to-output"),
    (dict(instruction="fusion", input_to_output=True), "needs --input-id"),
    (dict(instruction="fusion", input_to_output=True, input_id=5), "out of range"),
    (dict(instruction="fusion", output_to_input=True, output_id=3), "out of range"),
    (dict(instruction="add", coalescing=True), "not a fusion"),
])
def test_bad_input_is_one_line_exit_2(module, capsys, kwargs, message):
    with pytest.raises(SystemExit) as e:
        run_module_mode(module, **kwargs)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_malformed_hlo_exit_2(tmp_path, capsys):
    p = tmp_path / "bad.hlo"
    p.write_text("HloModule m\nENTRY e {\n  ROOT x = f32[2] frobnicate(\n}\n")
    with pytest.raises(SystemExit) as e:
        run_module_mode(str(p), instruction="x", output_to_input=True)
    assert e.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_fusegen_indexing_command_module_mode(module):
    """The same modes through ``fusegen indexing MODULE.hlo ...`` (click), errors exit 2."""
    from click.testing import CliRunner

    from fusegen.cli.main import cli

    runner = CliRunner()
    r = runner.invoke(cli, ["indexing", module, "--instruction", "t", "--input-to-output", "--input-id", "0", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["operands"] == [["(d0, d1) -> (d1, d0), domain: d0 in [0, 99], d1 in [0, 199]"]]
    r = runner.invoke(cli, ["indexing", module, "--fusion", "fusion", "--coalescing", "--json", "--device", "rtxa6000"])
    assert r.exit_code == 0 and json.loads(r.output) == {"coalesced": [True, True]}
    r = runner.invoke(cli, ["indexing", module, "--instruction", "t", "--input-to-output"])
    assert r.exit_code == 2
