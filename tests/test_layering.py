"""The layering of issue 31: the library owns every loop and result type, and the CLI is a thin layer over it.

No module outside ``core/cli/`` imports ``fusegen.cli`` (checked on the source of every module of the package,
the plugins, scripts and benchmarks), and a library session (explain, run) never loads it.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / "core" / "cli"
_MAYBE = re.compile(r"fusegen\.cli|from\s+fusegen\s+import[\s\S]{0,300}?\bcli\b|import_module")


def _cli_imports(path: Path) -> list[str]:
    """``LINE: statement`` of each import of fusegen.cli in a Python file (also ``from fusegen import cli`` and
    ``importlib.import_module("fusegen.cli...")``)."""
    text = path.read_text()
    if not _MAYBE.search(text):  # most files cannot import it: parse only those that name it
        return []
    tree = ast.parse(text, filename=str(path))
    hits = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + ([f"{node.module}.{a.name}" for a in node.names] if node.module == "fusegen" else [])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            names = [node.args[0].value]
        if any(n == "fusegen.cli" or n.startswith("fusegen.cli.") for n in names):
            hits.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return hits


def test_the_checker_finds_each_spelling(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import fusegen.cli.main\nfrom fusegen.cli.run import x\nfrom fusegen import cli\n"
                 "import importlib\nimportlib.import_module('fusegen.cli.tune')\nfrom fusegen.api import run\n")
    assert [h.split(":")[0] for h in _cli_imports(f)] == ["1", "2", "3", "5"]


def test_no_module_outside_core_cli_imports_the_cli():
    # core/__main__.py is ``python -m fusegen``: the command's entry, the one module above the CLI
    files = [p for d in ("core", "plugins", "scripts", "benchmarks", "examples") for p in (REPO / d).rglob("*.py")
             if CLI not in p.parents and p != REPO / "core" / "__main__.py"]
    assert len(files) > 100
    bad = {str(p.relative_to(REPO)): h for p in files if (h := _cli_imports(p))}
    assert bad == {}, f"modules outside core/cli import fusegen.cli (move the logic into the library): {bad}"


def test_a_library_session_never_loads_the_cli():
    code = ("import sys, fusegen\n"
            "m = 'examples/gpu_multi_output.h100_opt.hlo'\n"
            "fusegen.explain(m)\n"
            "r = fusegen.run(m, compile=False)\n"
            "assert r.status == 'ok', r.status\n"
            "print(sorted(k for k in sys.modules if k.startswith('fusegen.cli')))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["[]"]
