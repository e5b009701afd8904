"""Mutation fuzzing (tests/hlo_mutator.py): the parser raises nothing but HloParseError, and modules that parse
never make ``explain`` or ``run --no-compile`` end in an internal error (exit 3) or a traceback.

A bounded, seeded sample runs by default; FUSEGEN_SLOW=1 runs a larger one (new seeds, so it also finds new
failures over time). A failure prints the mutant's label (seed module and index) to reproduce it.
"""

from __future__ import annotations

import os
import warnings

import pytest
from click.testing import CliRunner

from hlo_mutator import mutants
from fusegen.cli.main import cli
from fusegen.hlo.errors import HloParseError
from fusegen.hlo.parser import parse_modules

SLOW = os.environ.get("FUSEGEN_SLOW", "") not in ("", "0")
PARSER_MUTANTS = 20_000 if SLOW else 2_000
CLI_MUTANTS = 100 if SLOW else 20


def test_parser_mutants_raise_only_hlo_parse_error():
    parsed = failed = 0
    for label, text in mutants(PARSER_MUTANTS, seed=13, semantic_share=0.5):
        try:
            parse_modules(text, label)
            parsed += 1
        except HloParseError as e:
            failed += 1
            msg = str(e)
            assert "internal parser error" not in msg, f"{label}: {msg}"
            assert "\n" not in msg and msg.startswith(f"{label}:"), f"{label}: {msg!r}"
        except Exception as e:  # noqa: BLE001 - the point of the test
            pytest.fail(f"{label}: {type(e).__name__} escaped the parser: {e}")
    assert parsed > PARSER_MUTANTS // 10 and failed > PARSER_MUTANTS // 10  # both paths exercised


def _cli(args: list[str]):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CliRunner().invoke(cli, args, catch_exceptions=True)


@pytest.mark.parametrize("chunk", range(4))
def test_parsable_mutants_through_explain_and_run_no_internal_error(tmp_path, chunk):
    env_debug = os.environ.pop("FUSEGEN_DEBUG", None)
    try:
        checked = 0
        for label, text in mutants(CLI_MUTANTS, seed=1000 + chunk, semantic_share=0.9):
            try:
                parse_modules(text, label)
            except HloParseError:
                continue
            f = tmp_path / "m.hlo"
            f.write_text(text)
            for args in (["explain", str(f)],
                         ["run", "--no-compile", "--max-memory", "256M", "--timeout", "30", str(f)]):
                r = _cli(args)
                checked += 1
                escaped = r.exception is not None and not isinstance(r.exception, SystemExit)
                assert not escaped, f"{label} {args[0]}: {type(r.exception).__name__}: {r.exception}"
                assert r.exit_code != 3, f"{label} {args[0]}: {r.output.strip().splitlines()[-1]}"
                assert "Traceback" not in r.output, f"{label} {args[0]}"
                if r.exit_code == 2:
                    assert len(r.output.strip().splitlines()) >= 1
        assert checked >= CLI_MUTANTS // 4
    finally:
        if env_debug is not None:
            os.environ["FUSEGEN_DEBUG"] = env_debug
