"""Finding the shared corpus and the corpus fusions / instructions a plugin serves.

The corpus root is ``$FUSEGEN_CORPUS`` when set, else ``<repo>/../shared/corpus`` where ``<repo>`` is
the checkout holding the ``fusegen`` package (an editable install); ``None`` when neither exists (the
corpus checks then skip with the reason).
"""

from __future__ import annotations

import csv
import functools
import os
from pathlib import Path
from typing import Any, Iterator

import attrs
import numpy as np

#: Fusions whose operands and outputs together exceed this many elements are not run in the
#: interpreter (its cost is per element).
MAX_ELEMENTS = 1 << 17


def corpus_root() -> Path | None:
    env = os.environ.get("FUSEGEN_CORPUS")
    if env:
        p = Path(env)
        return p if p.is_dir() else None
    import fusegen

    repo = Path(fusegen.__file__).resolve().parents[1]
    p = repo.parent / "shared" / "corpus"
    return p if p.is_dir() else None


def hlo_files(root: Path, patterns: tuple[str, ...] = ()) -> list[Path]:
    """HLO files under ``root`` matching ``patterns`` (default: xla/cases, jax, xla/modules), sorted."""
    pats = patterns or ("xla/cases/*.hlo", "jax/*.hlo", "xla/modules/*.hlo", "bugs/*.hlo")
    out: list[Path] = []
    for pat in pats:
        out.extend(sorted(root.glob(pat)))
    return list(dict.fromkeys(out))


@functools.lru_cache(maxsize=64)
def parse_file(path: Path) -> tuple:
    """Every module of ``path`` (``()`` when it does not parse: the parser's own tests cover that)."""
    from fusegen.hlo.parser import parse_modules

    try:
        return tuple(parse_modules(path.read_text(), str(path)))
    except Exception:
        return ()


def device_for(path: Path) -> Any:
    """The device XLA's tests analyse a case with: RTXA6000 for ``xla/cases``, H200 otherwise."""
    from fusegen.device import RTXA6000, get_device

    return RTXA6000 if "cases" in path.parts else get_device("h200")


@attrs.frozen
class CorpusFusion:
    """One corpus fusion and where it lives.

    Attributes:
        path: the HLO file.
        module_index: which module of the file.
        fusion_name: the fusion instruction's name.
        kind: the kind dispatch decided (with every installed plugin).
        emitter_factory: the factory that served it.
        size: operand + output elements.
    """

    path: Path
    module_index: int
    fusion_name: str
    kind: str
    emitter_factory: str
    size: int

    @property
    def test_id(self) -> str:
        return f"{self.path.stem}:{self.fusion_name}"


def _fusions(module: Any) -> Iterator[Any]:
    from fusegen.analysis.fusion_analysis import entry_fusion

    found = False
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode == "fusion":
                found = True
                yield inst
    if not found and module.entry is not None and module.entry.root is not None:
        yield entry_fusion(module)  # a lit case without ENTRY: LoadTestModule wraps it in a kLoop fusion


def _elements(inst: Any) -> int:
    n = sum(leaf.numel for leaf in inst.shape.leaves() if leaf.is_array)
    for o in inst.operands:
        n += sum(leaf.numel for leaf in o.shape.leaves() if leaf.is_array)
    return n


def fusions_served_by(target: Any, root: Path, limit: int) -> list[CorpusFusion]:
    """Up to ``limit`` corpus fusions whose emitter comes from ``target``'s factories, spread over the corpus
    (small ones only, see :data:`MAX_ELEMENTS`), in a stable order."""
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.codegen.emitter import EmitterUnsupported
    from fusegen.dispatch import get_emitter_fusion_kind, get_fusion_emitter

    names = {f.name for f in target.factories}
    found: list[CorpusFusion] = []
    for path in hlo_files(root):
        for mi, module in enumerate(parse_file(path)):
            for inst in _fusions(module):
                try:
                    size = _elements(inst)
                    if size > MAX_ELEMENTS:
                        continue
                    a = FusionAnalysis.create(inst, device_for(path))
                    kind = get_emitter_fusion_kind(a, target.pm).kind
                    if kind not in target.capabilities.kinds and not any(f.kind == kind for f in target.factories):
                        continue
                    em, fac = get_fusion_emitter(a, kind, target.pm)
                except Exception:
                    continue  # fusions fusegen cannot analyse are the analysis tests' business
                if fac is None or fac.plugin != target.name or fac.name not in names:
                    continue
                try:
                    em.emit()
                except EmitterUnsupported:
                    continue  # a documented decline: the fusion runs on an execution backend
                except Exception:
                    pass  # anything else is the plugin's failure, reported by the tests
                found.append(CorpusFusion(path, mi, inst.name, kind, fac.name, size))
    if len(found) <= limit:
        return found
    step = len(found) / limit
    return [found[int(i * step)] for i in range(limit)]


def load_fusion(cf: CorpusFusion) -> tuple[Any, Any]:
    """``(module, fusion instruction)`` of a :class:`CorpusFusion` (freshly parsed: emitters may annotate)."""
    from fusegen.hlo.parser import parse_modules

    module = parse_modules(cf.path.read_text(), str(cf.path))[cf.module_index]
    for inst in _fusions(module):
        if inst.name == cf.fusion_name:
            return module, inst
    raise LookupError(f"{cf.path}: fusion {cf.fusion_name!r} not found")


def operands_and_reference(module: Any, fusion: Any, seed: int = 0) -> tuple[list[Any], Any]:
    """Operand values and reference value of ``fusion``.

    An entry-computation fusion gets the values the entry computes from seeded inputs (index operands in
    range); a fusion elsewhere gets seeded random operands. The reference is the evaluator's.
    """
    from fusegen.evaluator.evaluator import evaluate_instruction
    from fusegen.runtime.inputs import make_inputs, random_value

    entry = module.entry
    if entry is not None and any(i is fusion for i in entry.instructions):
        try:
            args = make_inputs(module, seed=seed)
            vals: dict[int, Any] = {}
            for inst in entry.post_order():
                if inst.opcode == "parameter":
                    vals[id(inst)] = args[inst.parameter_number]
                    continue
                ops = [vals[id(o)] for o in inst.operands]
                if inst is fusion:
                    return ops, evaluate_instruction(inst, ops)
                vals[id(inst)] = evaluate_instruction(inst, ops)
        except Exception:
            pass  # fall back to random operands
    rng = np.random.default_rng(seed)
    ops = [random_value(o.shape, rng) for o in fusion.operands]
    return ops, evaluate_instruction(fusion, ops)


def index_rows(root: Path) -> list[tuple[str, str, str]]:
    """``(file, expected, note)`` of ``xla/cases/INDEX.tsv``; ``[]`` when absent."""
    index = root / "xla" / "cases" / "INDEX.tsv"
    if not index.exists():
        return []
    with open(index, newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))
    return [(r[0], r[2], r[3]) for r in rows[1:] if len(r) >= 4 and r[0].endswith(".hlo")]


def expected_kind(expected: str) -> str:
    """The first word of an INDEX expectation (``"kInputSlices @271f80b; kLoop @183fa00"`` -> ``kInputSlices``)."""
    return expected.split()[0].rstrip(";") if expected.strip() else ""


def instructions_for_backend(root: Path, patterns: tuple[str, ...], accept, limit: int) -> list[tuple[Path, int, str]]:
    """The ``limit`` smallest ``(file, module index, instruction name)`` in files matching ``patterns`` for which
    ``accept(instruction)`` is true (ties in file order)."""
    found: list[tuple[int, int, tuple[Path, int, str]]] = []
    for path in hlo_files(root, patterns):
        for mi, module in enumerate(parse_file(path)):
            for comp in module.computations:
                for inst in comp.instructions:
                    try:
                        ok = accept(inst)
                    except Exception:
                        ok = False
                    if ok:
                        found.append((_elements(inst), len(found), (path, mi, inst.name)))
    return [loc for _n, _k, loc in sorted(found)[:limit]]


def load_instruction(path: Path, module_index: int, name: str) -> tuple[Any, Any]:
    from fusegen.hlo.parser import parse_modules

    module = parse_modules(path.read_text(), str(path))[module_index]
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.name == name:
                return module, inst
    raise LookupError(f"{path}: instruction {name!r} not found")
