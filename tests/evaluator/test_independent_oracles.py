"""Independent oracles (issue 44 item 4): the reference evaluator a kernel is judged against shares no algorithm
with the code that generates the kernel, so that a misreading of the HLO on one side shows as a mismatch
instead of being made by both.

* No module of the kernel generators (``plugins/emitters/``, ``core/codegen/``) imports ``fusegen.evaluator``
  (checked on their source). ``plugins/backends/`` is left out on purpose: the host backend, the custom-fusion
  backend and the cuBLASLt backend's CPU path *execute* instructions through the evaluator on a CPU by design
  (they are the reference's own arithmetic, run where no kernel is generated), and are judged as such.
* The sort emitter reads a comparator as a key order itself (:mod:`fusegen_plugins.emitters.sort_comparator`),
  with the same keys as the evaluator's :func:`~fusegen.evaluator.vectorized_sort.lexicographic_plan` on every
  comparator of ``test_vectorized_sort``'s generator (JAX's spellings, bit tricks, descending, several keys,
  random boolean expressions), and a fault planted in the evaluator's reading (a descending comparator read
  as ascending) makes a descending sort fusion run through ``run_module`` a mismatch; without it the run is
  ok and matches numpy's stable sort in float64.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings

from fusegen.evaluator import vectorized_sort
from fusegen.evaluator.evaluator import CALLS
from fusegen.hlo.parser import parse_module
from fusegen.verify.judged_run import run_module
from fusegen_plugins.emitters.sort_comparator import read_key_order
from fusegen_plugins.emitters.sort_keys import key_packing
from sort_programs import _argsort_module, _keys, comparators

REPO = Path(__file__).resolve().parents[2]
#: The kernel generators: source folders and the package each is installed as.
GENERATORS = {REPO / "plugins" / "emitters": "fusegen_plugins.emitters", REPO / "core" / "codegen": "fusegen.codegen"}
EVALUATOR = "fusegen.evaluator"


def _module_name(path: Path, root: Path, package: str) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def evaluator_imports(path: Path, root: Path, package: str) -> list[str]:
    """``LINE: statement`` of each import of ``fusegen.evaluator`` in the module at ``path`` (package
    ``package`` at folder ``root``): ``import``, ``from ... import`` (relative ones resolved), ``from fusegen
    import evaluator`` and ``importlib.import_module("fusegen.evaluator...")``."""
    name = _module_name(path, root, package)
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    hits = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else (node.module or "")
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            targets = [node.args[0].value]
        if any(t == EVALUATOR or t.startswith(EVALUATOR + ".") for t in targets):
            hits.append(f"{node.lineno}: {ast.unparse(node)[:100]}")
    return hits


def test_the_import_check_finds_each_spelling(tmp_path):
    pkg = tmp_path / "codegen"
    pkg.mkdir()
    f = pkg / "m.py"
    f.write_text("import fusegen.evaluator.reduce\nfrom fusegen.evaluator.reduce import parse_window\n"
                 "from fusegen import evaluator\nfrom .. import evaluator\nfrom ..evaluator import common\n"
                 "import importlib\nimportlib.import_module('fusegen.evaluator.common')\n"
                 "from fusegen.hlo.window import parse_window\nfrom . import evaluator\nfrom fusegen import hlo\n")
    assert [h.split(":")[0] for h in evaluator_imports(f, pkg, "fusegen.codegen")] == ["1", "2", "3", "4", "5", "7"]


def test_no_kernel_generator_imports_the_evaluator():
    files = {p: (root, package) for root, package in GENERATORS.items() for p in root.rglob("*.py")}
    assert len(files) > 40
    bad = {str(p.relative_to(REPO)): h for p, (root, package) in files.items()
           if (h := evaluator_imports(p, root, package))}
    assert bad == {}, f"kernel generators import the reference evaluator they are judged against: {bad}"


def _same_keys(ours, theirs) -> bool:
    if ours is None or theirs is None:
        return ours is None and theirs is None
    return [(k.operand, k.param, k.expr, k.mode, k.descending) for k in ours] == \
        [(lv.operand, lv.param, lv.expr, lv.mode, lv.descending) for lv in theirs]


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(comparators())
def test_the_emitters_reading_of_a_comparator_equals_the_evaluators(case):
    """The same keys (operand, the instruction computing each, total or IEEE compare, direction) and the same
    comparators declined, on key orders in every spelling and on random boolean expressions."""
    text, types, _ = case
    comp = next(c for c in parse_module(text, "cmp").computations if c.name == "cmp")
    assert _same_keys(read_key_order(comp, len(types)), vectorized_sort.lexicographic_plan(comp, len(types), CALLS))


def test_every_sort_in_the_bundled_modules_reads_the_same():
    """The comparators of the sorts XLA:GPU emitted for the bundled modules (top-k, argsort, random programs)."""
    texts = [t for d in ("tests/data", "benchmarks/data", "examples") for p in sorted((REPO / d).rglob("*.hlo"))
             if " sort(" in (t := p.read_text())]
    sorts = [i for t in texts for c in parse_module(t, "m").computations for i in c.instructions if i.opcode == "sort"]
    assert len(sorts) >= 10
    for s in sorts:
        comp, n = s.attrs["to_apply"], len(s.operands)
        assert _same_keys(read_key_order(comp, n), vectorized_sort.lexicographic_plan(comp, n, CALLS)), s.name


#: A descending sort of f32 keys with an iota payload as XLA:GPU hands it over: JAX's canonicalisation (one NaN,
#: -0 is +0), ``ComparisonExpander``'s total order on the bits (``select(b < 0, b ^ MAX, b)``, compared ``GT``)
#: and ``StableSortExpander``'s iota tie-break (``lax.top_k``'s comparator, canonicalised). Rows of 64 are
#: longer than one program: the multi-launch sort over packed keys (``sort_keys``) runs. The evaluator reads
#: this comparator with ``lexicographic_plan`` (a bare ``compare(canon(a), canon(b))`` takes a shortcut).
DESCENDING = _argsort_module([2, 64], 1).replace("  ROOT lt = pred[] compare(cl, cr), direction=LT, type=TOTALORDER", """\
  max = s32[] constant(2147483647)
  zi = s32[] constant(0)
  bl = s32[] bitcast(cl)
  nl2 = pred[] compare(bl, zi), direction=LT
  xl = s32[] xor(max, bl)
  kl = s32[] select(nl2, xl, bl)
  br = s32[] bitcast(cr)
  nr2 = pred[] compare(br, zi), direction=LT
  xr = s32[] xor(max, br)
  kr = s32[] select(nr2, xr, br)
  gt = pred[] compare(kl, kr), direction=GT
  back = pred[] compare(kr, kl), direction=GT
  tie = pred[] compare(gt, back), direction=EQ
  first = pred[] compare(l1, r1), direction=LT
  ROOT less = pred[] select(tie, first, gt)""")


def _numpy_descending(x: np.ndarray) -> np.ndarray:
    """JAX's descending total order in float64 by numpy's stable argsort: NaN (any sign) first, ``-0 == +0``,
    ties by position."""
    y = -x.astype(np.float64)
    return np.argsort(np.where(np.isnan(y), -np.inf, y), axis=-1, kind="stable")


def _run(x: np.ndarray):
    return run_module(parse_module(DESCENDING, "descending"), [x], compile_kernels=False)


def _misread_descending_as_ascending(monkeypatch) -> None:
    real = vectorized_sort.lexicographic_plan

    def misread(comp, n_operands, calls):
        plan = real(comp, n_operands, calls)
        return None if plan is None else [vectorized_sort.KeyLevel(lv.operand, lv.param, lv.expr, lv.mode, False)
                                          for lv in plan]

    monkeypatch.setattr(vectorized_sort, "lexicographic_plan", misread)


def test_descending_sort_is_ok_and_matches_numpy():
    x = _keys((2, 64))
    assert np.isnan(x).any() and (np.signbit(x) & (x == 0)).any()
    outs, rep = _run(x)
    assert rep.status == "ok" and [f.status for f in rep.fusions] == ["ok"], "\n".join(rep.verdict.lines())
    values, idx = (np.asarray(o) for o in outs)
    order = _numpy_descending(x)
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(values.view(np.int32), np.take_along_axis(x, order, axis=-1).view(np.int32))


def test_a_fault_planted_in_the_evaluators_comparator_reading_is_a_mismatch(monkeypatch):
    sort = parse_module(DESCENDING, "descending").entry.root.attrs["calls"].root
    packing = key_packing(sort.attrs["to_apply"], sort.operands, 64, 1)
    assert [(lv.operand, lv.descending) for lv, _, _ in packing.levels] == [(0, True)]  # the packed-key sort
    _misread_descending_as_ascending(monkeypatch)
    # the kernel's reading is its own: still descending where the evaluator's is now ascending
    assert key_packing(sort.attrs["to_apply"], sort.operands, 64, 1).levels[0][0].descending
    assert not vectorized_sort.lexicographic_plan(sort.attrs["to_apply"], 2, CALLS)[0].descending
    x = _keys((2, 64))
    _, rep = _run(x)
    assert rep.status == "mismatch" and [f.status for f in rep.fusions] == ["mismatch"], \
        "\n".join(rep.verdict.lines())
