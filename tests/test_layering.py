"""The layering of core (issues 31 and 44; docs/layers.md).

Core's packages and top-level modules stand in the order of :data:`LAYERS`, hlo at the bottom and the CLI on
top; an import (at module level or inside a function) goes down the order or stays in its own package. The
upward imports left today are listed in :data:`KNOWN_UPWARD` with their count, a ratchet: a new one fails, and a
removed one fails until its entry goes too. Imports under ``if TYPE_CHECKING:`` are annotations, not
dependencies, and ``from fusegen import __version__`` is the package's own version string.

No module outside ``core/cli/`` imports ``fusegen.cli`` (checked on the source of every module of the package,
the plugins, scripts and benchmarks), and a library session (explain, run) never loads it.

No module under ``tests/`` imports a test module (a ``test_*`` basename): the helpers tests share live in the
helper modules at the root of ``tests/`` (``fusion_harness``, ``kernel_inspection``, ``sort_programs``, ...).
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
TESTS = REPO / "tests"

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


def _imported_names(node: ast.AST) -> list[str]:
    """The modules ``node`` imports, if it is an ``import``, an absolute ``from ... import`` (``from fusegen import
    x`` imports ``fusegen.x`` too) or an ``importlib.import_module("...")`` call; else none."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names = [node.module] + ([f"{node.module}.{a.name}" for a in node.names] if node.module == "fusegen" else [])
    elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module" \
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        names = [node.args[0].value]
    return names


def _cli_imports(path: Path) -> list[str]:
    """``LINE: statement`` of each import of fusegen.cli in a Python file (also ``from fusegen import cli`` and
    ``importlib.import_module("fusegen.cli...")``)."""
    text = path.read_text()
    if not _MAYBE.search(text):  # most files cannot import it: parse only those that name it
        return []
    tree = ast.parse(text, filename=str(path))
    hits = []
    for node in ast.walk(tree):
        if any(n == "fusegen.cli" or n.startswith("fusegen.cli.") for n in _imported_names(node)):
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


#: function-level imports (file under core/, line's import target) that stand where a module-level import would
#: close an import cycle (between two modules of one package, or of two), each a debt docs/layers.md would explain; may only shrink. None are
#: left: docs/layers.md ("Cycles inside a package") says how the last ones went
KNOWN_CYCLE_DODGES: dict[tuple[str, str], int] = {}


def _module_name(path: Path) -> str:
    parts = ["fusegen", *path.relative_to(CORE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def cycle_dodges() -> dict[tuple[str, str], int]:
    """(file under core/, imported module) -> count of function-level imports of a fusegen module that imports,
    at module level and through any chain of module-level imports, the importing module back: at module level
    that import would close a cycle, so it stands in the function only to dodge one. ``from package import
    submodule`` counts as an import of the submodule; imports under ``if TYPE_CHECKING:`` are annotations."""
    paths = {_module_name(p): p for p in CORE.rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    top: dict[str, set[str]] = {}
    inner: dict[str, list[str]] = {}
    for mod, path in paths.items():
        top[mod], inner[mod] = set(), []

        def visit(node: ast.AST, in_function: bool) -> None:
            for ch in ast.iter_child_nodes(node):
                if isinstance(ch, ast.If) and "TYPE_CHECKING" in ast.unparse(ch.test):
                    continue
                names: list[str] = []
                if isinstance(ch, ast.Import):
                    names = [a.name for a in ch.names]
                elif isinstance(ch, ast.ImportFrom) and ch.module and ch.level == 0:
                    names = [f"{ch.module}.{a.name}" if f"{ch.module}.{a.name}" in paths else ch.module
                             for a in ch.names]
                for n in {resolve(n) for n in names if n.split(".")[0] == "fusegen"} - {None, mod}:
                    (inner[mod].append(n) if in_function else top[mod].add(n))
                visit(ch, in_function or isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(ast.parse(path.read_text(), filename=str(path)), False)

    def reaches(src: str, dst: str) -> bool:
        seen, stack = {src}, [src]
        while stack:
            for nxt in top[stack.pop()]:
                if nxt == dst:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return False

    out: dict[tuple[str, str], int] = {}
    for mod, targets in inner.items():
        for t in targets:
            if reaches(t, mod):
                key = (str(paths[mod].relative_to(CORE)), t)
                out[key] = out.get(key, 0) + 1
    return out


def test_no_function_level_import_dodges_a_new_cycle():
    got = cycle_dodges()
    assert got == KNOWN_CYCLE_DODGES, (
        f"new: { {k: v for k, v in got.items() if KNOWN_CYCLE_DODGES.get(k, 0) < v} }; "
        f"fewer (lower KNOWN_CYCLE_DODGES): { {k: v for k, v in KNOWN_CYCLE_DODGES.items() if got.get(k, 0) < v} }")


def test_the_cycle_check_sees_a_dodge(tmp_path, monkeypatch):
    """A planted pair: a.py imports b at module level, b.py imports a inside a function."""
    pkg = tmp_path / "core"
    (pkg / "p").mkdir(parents=True)
    (pkg / "p" / "__init__.py").write_text("")
    (pkg / "p" / "a.py").write_text("from fusegen.p import b\n")
    (pkg / "p" / "b.py").write_text("def f():\n    from fusegen.p.a import x\n    return x\n")
    (pkg / "p" / "c.py").write_text("def g():\n    from fusegen.p import b\n    return b\n")
    monkeypatch.setattr(sys.modules[__name__], "CORE", pkg)
    assert cycle_dodges() == {("p/b.py", "fusegen.p.a"): 1}


def _test_module_imports(path: Path) -> list[str]:
    """``LINE: statement`` of each import of a test module (``test_*``, by its basename) in a Python file, at module
    level or in a function (also ``importlib.import_module("test_...")``)."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if any(n.split(".")[0].startswith("test_") for n in _imported_names(node)):
            hits.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return hits


def importers_of_test_modules(root: Path) -> dict[str, list[str]]:
    """(file under ``root``) -> its imports of test modules, for every Python file under ``root``."""
    return {str(p.relative_to(root)): h for p in sorted(root.rglob("*.py")) if (h := _test_module_imports(p))}


def test_no_test_module_imports_another():
    bad = importers_of_test_modules(TESTS)
    assert bad == {}, f"test modules imported by basename (move the helper to a helper module in tests/): {bad}"


def test_the_test_import_check_sees_each_spelling(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "test_a.py").write_text("from fusion_harness import load\nfrom test_b import helper\n")
    (tmp_path / "a" / "test_c.py").write_text("import importlib\ndef test_c():\n    import test_b as b\n"
                                               "    importlib.import_module('test_a')\n")
    (tmp_path / "helpers.py").write_text("from conftest import CORPUS\nimport testing_tools\n")
    assert importers_of_test_modules(tmp_path) == {"a/test_a.py": ["2: from test_b import helper"],
                                               "a/test_c.py": ["3: import test_b as b",
                                                               "4: importlib.import_module('test_a')"]}
