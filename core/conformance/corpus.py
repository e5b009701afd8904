"""Finding the corpus and the corpus fusions / instructions a plugin serves.

The corpus is the shared one, ``<repo>/../shared/corpus`` where ``<repo>`` is the checkout holding the
``fusegen`` package (an editable install), all of it, **plus** every directory listed in ``$FUSEGEN_CORPUS``
(``os.pathsep``-separated: a plugin author's own HLO files, searched recursively for ``*.hlo``; a plugin's
``corpus`` capability globs narrow the shared corpus only). With neither, the corpus checks skip with the
reason.
"""

from __future__ import annotations

import csv
import functools
import os
from pathlib import Path
from typing import Any, Iterator

import attrs
import numpy as np

#: Default of ``--fusegen-max-elements``: fusions / instructions whose operands and outputs together
#: exceed this many elements are not run in the interpreter (its cost is per element).
MAX_ELEMENTS = 1 << 17
#: Default of ``--fusegen-max-codegen-elements``: the same limit for codegen-backend checks (each runs
#: several configs).
MAX_CODEGEN_ELEMENTS = MAX_ELEMENTS // 4
#: What the suite searches in the shared corpus: all of it (``xla/``, ``jax/`` with ``launch/``, ``sweep/``,
#: ``spmd/``, ``bugs/``, ``hostile/``); a ``$FUSEGEN_CORPUS`` directory: all ``**/*.hlo`` too.
SHARED_PATTERNS = ("**/*.hlo",)


class CorpusError(ValueError):
    """``$FUSEGEN_CORPUS`` names something that is not a directory."""


def shared_corpus_root() -> Path | None:
    """``<repo>/../shared/corpus`` beside the checkout holding ``fusegen``, or None when absent."""
    import fusegen

    repo = Path(fusegen.__file__).resolve().parents[1]
    p = repo.parent / "shared" / "corpus"
    return p if p.is_dir() else None


def corpus_roots(env: dict | None = None) -> list[Path]:
    """The shared corpus (when present) followed by the ``$FUSEGEN_CORPUS`` directories, each once.

    Raises:
        CorpusError: a ``$FUSEGEN_CORPUS`` entry is not a directory (named in the message).
    """
    env = os.environ if env is None else env
    out: list[Path] = []
    shared = shared_corpus_root()
    if shared is not None:
        out.append(shared)
    for part in (env.get("FUSEGEN_CORPUS") or "").split(os.pathsep):
        if not part.strip():
            continue
        p = Path(part).expanduser()
        if not p.is_dir():
            raise CorpusError(f"FUSEGEN_CORPUS entry {part!r} is not a directory")
        if all(p.resolve() != q.resolve() for q in out):
            out.append(p)
    return out


def corpus_root() -> Path | None:
    """The first corpus root (see :func:`corpus_roots`), None without any; kept for older callers."""
    try:
        roots = corpus_roots()
    except CorpusError:
        return None
    return roots[0] if roots else None


def corpus_files(roots: list[Path], patterns: tuple[str, ...] = ()) -> list[Path]:
    """HLO files of every root, sorted per root, each file once: in the shared corpus those matching
    ``patterns`` (a plugin's ``corpus`` capability globs, relative to it) or, without any, all of it
    (:data:`SHARED_PATTERNS`); in every other root (``$FUSEGEN_CORPUS``: the plugin author's own files) every
    ``**/*.hlo``, whatever the globs say."""
    shared = shared_corpus_root()
    out: list[Path] = []
    for root in roots:
        is_shared = shared is not None and root.resolve() == shared.resolve()
        out.extend(hlo_files(root, (patterns or SHARED_PATTERNS) if is_shared else ("**/*.hlo",)))
    return list(dict.fromkeys(out))


def hlo_files(root: Path, patterns: tuple[str, ...] = ()) -> list[Path]:
    """HLO files under ``root`` matching ``patterns`` (default :data:`SHARED_PATTERNS`), sorted."""
    pats = patterns or SHARED_PATTERNS
    out: list[Path] = []
    for pat in pats:
        out.extend(sorted(root.glob(pat)))
    return list(dict.fromkeys(out))


@functools.lru_cache(maxsize=1024)  # the whole shared corpus (4 MB of text): parsed once per session
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


@attrs.define
class Dropped:
    """What a corpus search left out, for the skip reasons and the report.

    Attributes:
        over_limit: items the plugin serves / accepts that are larger than the element limit.
        smallest_over: element count of the smallest of them (0 when none).
        limit: the element limit applied.
        option: the suite option setting it.
    """

    limit: int
    option: str
    over_limit: int = 0
    smallest_over: int = 0

    def add(self, size: int) -> None:
        self.over_limit += 1
        self.smallest_over = size if not self.smallest_over else min(self.smallest_over, size)

    def reason(self) -> str:
        """``""`` when nothing was dropped, else a clause naming the count, the limit and its option."""
        if not self.over_limit:
            return ""
        return (f"{self.over_limit} more above {self.option} {self.limit} elements (smallest {self.smallest_over}; "
                f"raise {self.option} to check them)")

    def to_json(self) -> dict:
        return {"limit": self.limit, "option": self.option, "over_limit": self.over_limit,
                "smallest_over": self.smallest_over}


def all_fusions(roots: list[Path]) -> Iterator[tuple[Path, int, Any]]:
    """``(file, module index, fusion instruction)`` of every fusion of the corpus (:func:`corpus_files`)."""
    for path in corpus_files(roots):
        for mi, module in enumerate(parse_file(path)):
            for inst in _fusions(module):
                yield path, mi, inst


def fusions_served_by(target: Any, roots: "list[Path] | Path", limit: int, max_elements: int = MAX_ELEMENTS,
                      dropped: Dropped | None = None, stats: dict | None = None) -> list[CorpusFusion]:
    """Up to ``limit`` shared-corpus fusions whose emitter comes from ``target``'s factories, spread over the
    corpus, then every such fusion of the other roots (``$FUSEGEN_CORPUS``: a user's corpus is never
    sampled); at most ``max_elements`` operand + output elements (larger ones are counted in ``dropped``), in
    a stable order. A fusion the emitter declines (``EmitterUnsupported``) is not one it serves: the next
    one in the corpus takes its place in the sample. ``stats`` (when given) gets the counts a skip reason
    states: ``searched`` fusions, ``of_kind`` (dispatched to one of the plugin's kinds), ``served`` (by its
    factories, within the limit), ``declined``."""
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.dispatch import get_emitter_fusion_kind, get_fusion_emitter

    roots = [roots] if isinstance(roots, Path) else roots
    names = {f.name for f in target.factories}
    found: list[tuple[CorpusFusion, Any]] = []
    n = stats if stats is not None else {}
    n.update(searched=0, of_kind=0, served=0, declined=0)
    for path, mi, inst in all_fusions(roots):
        n["searched"] += 1
        try:
            size = _elements(inst)
            a = FusionAnalysis.create(inst, device_for(path))
            kind = get_emitter_fusion_kind(a, target.pm).kind
            if kind not in target.capabilities.kinds and not any(f.kind == kind for f in target.factories):
                continue
            n["of_kind"] += 1
            em, fac = get_fusion_emitter(a, kind, target.pm)
        except Exception:
            continue  # fusions fusegen cannot analyse are the analysis tests' business
        if fac is None or fac.plugin != target.name or fac.name not in names:
            continue
        if size > max_elements:
            if dropped is not None:
                dropped.add(size)
            continue
        found.append((CorpusFusion(path, mi, inst.name, kind, fac.name, size), em))
    # the limit samples the shared corpus; a user's own ($FUSEGEN_CORPUS) fusions are always all taken
    shared = shared_corpus_root()
    mine = [f for f in found if shared is None or not f[0].path.resolve().is_relative_to(shared.resolve())]
    ids = {id(f) for f in mine}
    rest = [f for f in found if id(f) not in ids]
    out: list[CorpusFusion] = [f for f, em in mine if _emits(em)]
    picked: list[CorpusFusion] = []
    step = max(len(rest) / limit, 1.0) if limit else 1.0
    k = 0
    for i in range(limit):  # evenly spread; a declined fusion gives its place to the next one
        k = max(k, int(i * step))
        while k < len(rest) and not _emits(rest[k][1]):
            k += 1
            n["declined"] += 1
        if k >= len(rest):
            break
        picked.append(rest[k][0])
        k += 1
    n["declined"] += len(mine) - len(out)
    n["served"] = len(picked) + len(out)
    return picked + out


def _emits(emitter: Any) -> bool:
    """False when ``emitter`` declines (``EmitterUnsupported``: the fusion runs on an execution backend); any
    other failure is the plugin's, reported by the tests."""
    from fusegen.codegen.emitter import EmitterUnsupported

    try:
        emitter.emit()
    except EmitterUnsupported:
        return False
    except Exception:
        pass
    return True


def load_fusion(cf: CorpusFusion) -> tuple[Any, Any]:
    """``(module, fusion instruction)`` of a :class:`CorpusFusion` (freshly parsed: emitters may annotate)."""
    from fusegen.hlo.parser import parse_modules

    module = parse_modules(cf.path.read_text(), str(cf.path))[cf.module_index]
    for inst in _fusions(module):
        if inst.name == cf.fusion_name:
            return module, inst
    raise LookupError(f"{cf.path}: fusion {cf.fusion_name!r} not found")


def vacuous_outputs(ref: Any) -> list[int]:
    """Leaf indices of a reference value whose every element is NaN or inf (a kernel matching them there
    proves nothing: :func:`fusegen.runtime.compare.all_nonfinite`)."""
    from fusegen.runtime.compare import all_nonfinite
    from fusegen.runtime.inputs import leaves

    return [k for k, a in enumerate(leaves(ref)) if all_nonfinite(a)]


def operands_and_reference(module: Any, fusion: Any, seed: int = 0) -> tuple[list[Any], Any]:
    """Operand values and reference value of ``fusion``.

    An entry-computation fusion gets the values the entry computes from seeded inputs (index operands in
    range); a fusion elsewhere gets seeded random operands. The reference is the evaluator's. When an output
    is all NaN/inf (e.g. ``log`` of the negative half of the inputs) the inputs are drawn again: their
    absolute values, then ``1 + |x|`` (``log`` of those is positive too), then the same with the next seed;
    the last draw is returned if every one is vacuous (:func:`vacuous_outputs` says so).
    """
    tries = [(seed + d, positive) for d in range(2) for positive in (0, 1, 2)]
    for s, positive in tries:
        ops, ref = _operands_and_reference(module, fusion, s, positive)
        if not vacuous_outputs(ref):
            break
    return ops, ref


def _positive(v: Any, how: int) -> Any:
    """Float arrays of ``v`` made ``|x|`` (``how`` 1) or ``1 + |x|`` (2), in their own type."""
    if isinstance(v, tuple):
        return tuple(_positive(x, how) for x in v)
    a = np.asarray(v)
    if a.dtype.kind not in "fcV" or a.dtype == np.bool_ or not how:
        return a
    return (np.abs(a) + (how - 1)).astype(a.dtype)


def _operands_and_reference(module: Any, fusion: Any, seed: int, positive: int) -> tuple[list[Any], Any]:
    from fusegen.evaluator.evaluator import evaluate_instruction
    from fusegen.runtime.inputs import make_inputs, random_value

    entry = module.entry
    if entry is not None and any(i is fusion for i in entry.instructions):
        try:
            args = make_inputs(module, seed=seed)
            args = [_positive(a, positive) for a in args]
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
    ops = [_positive(a, positive) for a in ops]
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


def instructions_for_backend(roots: "list[Path] | Path", patterns: tuple[str, ...], accept, limit: int,
                             max_elements: int | None = None, dropped: Dropped | None = None
                             ) -> list[tuple[Path, int, str]]:
    """The ``limit`` smallest ``(file, module index, instruction name)`` in files matching ``patterns`` for which
    ``accept(instruction)`` is true (ties in file order). Accepted instructions above ``max_elements``
    operand + output elements are left out and counted in ``dropped``."""
    roots = [roots] if isinstance(roots, Path) else roots
    found: list[tuple[int, int, tuple[Path, int, str]]] = []
    for path in corpus_files(roots, patterns):
        for mi, module in enumerate(parse_file(path)):
            for comp in module.computations:
                for inst in comp.instructions:
                    try:
                        ok = accept(inst)
                    except Exception:
                        ok = False
                    if not ok:
                        continue
                    n = _elements(inst)
                    if max_elements is not None and n > max_elements:
                        if dropped is not None:
                            dropped.add(n)
                        continue
                    found.append((n, len(found), (path, mi, inst.name)))
    return [loc for _n, _k, loc in sorted(found)[:limit]]


def load_instruction(path: Path, module_index: int, name: str) -> tuple[Any, Any]:
    from fusegen.hlo.parser import parse_modules

    module = parse_modules(path.read_text(), str(path))[module_index]
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.name == name:
                return module, inst
    raise LookupError(f"{path}: instruction {name!r} not found")
