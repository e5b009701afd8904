"""The layering of core (issues 31 and 44; docs/layers.md).

Core's packages and top-level modules stand in the order of :data:`LAYERS`, hlo at the bottom and the CLI on
top; an import (at module level or inside a function) goes down the order or stays in its own package. The
upward imports left today are listed in :data:`KNOWN_UPWARD` with their count, a ratchet: a new one fails, and a
removed one fails until its entry goes too. Imports under ``if TYPE_CHECKING:`` are annotations, not
dependencies, and ``from fusegen import __version__`` is the package's own version string.

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
CORE = REPO / "core"
CLI = REPO / "core" / "cli"

#: core's packages and top-level modules, bottom layer first (docs/layers.md); names in one layer may import
#: each other
LAYERS: tuple[tuple[str, ...], ...] = (
    ("pow2", "kinds", "hlo"), ("device",), ("indexing",), ("evaluator",), ("config",),
    ("hookspecs", "registry", "plugin_context", "plugin_diagnostics", "plugin_manager", "codegen_backend"),
    ("analysis",), ("dispatch",), ("codegen",), ("perf",), ("runtime",), ("verify",), ("cache",), ("autotuning",),
    ("passes",), ("api",), ("jax_capture",), ("report",), ("conformance",), ("cli", "__main__"),
)
_LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}
_LEVEL["fusegen"] = len(LAYERS)  # core/__init__.py: the public face over everything

#: (importing file under core/, imported package or module) -> imports that go up the order today, each a debt
#: docs/layers.md explains; the count may only fall (then lower it here)
KNOWN_UPWARD: dict[tuple[str, str], int] = {
}
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


def _unit(path: Path) -> str:
    """The package or top-level module of core a file belongs to (``fusegen`` for core/__init__.py)."""
    rel = path.relative_to(CORE)
    return "fusegen" if rel == Path("__init__.py") else rel.parts[0].removesuffix(".py")


def _fusegen_imports(tree: ast.AST) -> list[tuple[str, int]]:
    """(imported fusegen unit, line) of every import in ``tree`` outside ``if TYPE_CHECKING:`` blocks, at module
    level or in functions; ``from fusegen import __version__`` left out."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, ast.If) and "TYPE_CHECKING" in ast.unparse(ch.test):
                for other in ch.orelse:
                    visit(other)
                continue
            mods: list[str] = []
            if isinstance(ch, ast.ImportFrom) and ch.level == 0 and ch.module:
                if ch.module == "fusegen":
                    mods = [f"fusegen.{a.name}" for a in ch.names if a.name != "__version__"]
                elif ch.module.startswith("fusegen."):
                    mods = [ch.module]
            elif isinstance(ch, ast.Import):
                mods = [a.name for a in ch.names if a.name.startswith("fusegen.")]
            elif (isinstance(ch, ast.Call) and getattr(ch.func, "attr", getattr(ch.func, "id", "")) == "import_module"
                  and ch.args and isinstance(ch.args[0], ast.Constant) and str(ch.args[0].value).startswith("fusegen.")):
                mods = [str(ch.args[0].value)]
            found.extend((m.split(".")[1], ch.lineno) for m in mods)
            visit(ch)

    visit(tree)
    return found


def upward_imports() -> dict[tuple[str, str], int]:
    """(file under core/, imported unit) -> count of imports from a lower layer to a higher one."""
    up: dict[tuple[str, str], int] = {}
    for path in sorted(CORE.rglob("*.py")):
        src = _unit(path)
        assert src in _LEVEL, f"{path.relative_to(REPO)}: {src!r} has no place in LAYERS (docs/layers.md)"
        for dst, line in _fusegen_imports(ast.parse(path.read_text(), filename=str(path))):
            assert dst in _LEVEL, f"{path.relative_to(REPO)}:{line} imports fusegen.{dst}, not in LAYERS"
            if _LEVEL[dst] > _LEVEL[src]:
                key = (str(path.relative_to(CORE)), dst)
                up[key] = up.get(key, 0) + 1
    return up


def test_core_imports_go_down_the_layers():
    up = upward_imports()
    new = {k: n for k, n in up.items() if n > KNOWN_UPWARD.get(k, 0)}
    gone = {k: n for k, n in KNOWN_UPWARD.items() if up.get(k, 0) < n}
    assert not new, f"imports up the layers of docs/layers.md (import what the layer below offers instead): {new}"
    assert not gone, f"fewer upward imports than KNOWN_UPWARD says (lower or remove these entries): {gone}"


def test_the_layer_checker_sees_every_spelling(tmp_path):
    tree = ast.parse("import fusegen.api\nfrom fusegen.cli.main import x\nfrom fusegen import runtime, __version__\n"
                     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fusegen.report import y\n"
                     "def f():\n    from fusegen.verify import z\n    importlib.import_module('fusegen.report.x')\n")
    assert _fusegen_imports(tree) == [("api", 1), ("cli", 2), ("runtime", 3), ("verify", 8), ("report", 9)]


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
