"""``run --profile`` / ``--json``'s ``reference_profile`` (issue 22): seconds per instruction of the module's
reference run and f64 oracle, in the background process (``--jobs 2``) and in sequence (``--jobs 1``), and
each computation the evaluator runs per element named once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fusegen.hlo.parser import parse_module
from fusegen.runtime.instruction_profile import InstructionTimes, per_element_notes

# a sort whose comparator is |a| < |b| (keys) and a map whose body holds a while loop (per element)
MODULE = Path(__file__).parents[1] / "data" / "reference" / "per_element_map.hlo"


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_reference_profile_names_the_instructions_and_the_per_element_map(jobs):
    p = subprocess.run([sys.executable, "-m", "fusegen.cli", "run", str(MODULE), "--no-compile", "--json",
                        "--profile", "--jobs", jobs], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    prof = json.loads(p.stdout)["reference_profile"]
    rows = {r["name"]: r for r in prof["instructions"]}
    assert rows["m"]["opcode"] == "map" and rows["m"]["calls"] == 1
    assert rows["m"]["reference_s"] > 0 and rows["m"]["f64_s"] > 0
    assert prof["reference_s"] >= rows["m"]["reference_s"] and prof["f64_s"] >= rows["m"]["f64_s"]
    assert [(n["name"], n["opcode"], n["computation"]) for n in prof["per_element"]] == [("m", "map", "mapped")]
    assert "while" in prof["per_element"][0]["reason"]
    assert "slowest instructions" in p.stderr and "%m (map)" in p.stderr  # the --profile tables


def test_per_element_notes_skip_liftable_computations():
    text = MODULE.read_text().replace("to_apply=mapped", "to_apply=cmp2").replace(
        "ENTRY e", "cmp2 {\n  a = f32[] parameter(0)\n  ROOT n = f32[] negate(a)\n}\nENTRY e")
    assert per_element_notes(parse_module(text, "m")) == []


def test_instruction_times_add_up_per_name():
    times = InstructionTimes()
    m = parse_module(MODULE.read_text(), "m")
    inst = m.entry.root
    timed = times.wrap(lambda i, ops: ops[0] * 2)
    assert timed(inst, [3]) == 6 and timed(inst, [4]) == 8
    assert times.rows["m"][0] == "map" and times.rows["m"][2] == 2 and times.total == times.rows["m"][1]
