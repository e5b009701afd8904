"""The corpus modules a pass rewrites, for the pass checks of the conformance suite.

Every module of the corpus (:func:`fusegen.conformance.corpus.corpus_files`) is parsed afresh and the pass run
on it, as the pipeline runs it (its declared options at their defaults, its plugin's context); a module whose
printed text the pass leaves unchanged is not one it applies to. Modules with more entry parameter + output
elements than ``--fusegen-max-elements`` are left out and counted (the suite evaluates each one twice).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs


@attrs.frozen
class CorpusModule:
    """A corpus module a pass changes.

    Attributes:
        path: the HLO file.
        module_index: which module of the file.
        size: entry parameter + output elements.
        raised: what the pass raised on it while searching (``""`` when it ran): the test reports it.
    """

    path: Path
    module_index: int
    size: int
    raised: str = ""

    @property
    def test_id(self) -> str:
        return self.path.stem if self.module_index == 0 else f"{self.path.stem}#{self.module_index}"


def module_size(module: Any) -> int:
    """Elements of the entry computation's parameters and result (0 without an entry)."""
    e = module.entry
    if e is None or e.root is None:
        return 0
    n = sum(leaf.numel for p in e.parameters for leaf in p.shape.leaves() if leaf.is_array)
    return n + sum(leaf.numel for leaf in e.root.shape.leaves() if leaf.is_array)


def load_module(path: Path, module_index: int) -> Any:
    """A fresh parse of one corpus module (a pass edits it in place)."""
    from fusegen.hlo.parser import parse_modules

    return parse_modules(path.read_text(), str(path))[module_index]


def run_pass(target: Any, hlo_pass: Any, module: Any, device: Any) -> bool:
    """Run ``hlo_pass`` on ``module`` as :func:`fusegen.passes.pipeline.run_pipeline` does (declared option
    defaults, the plugin's context); returns what it said (changed). Exceptions propagate."""
    from fusegen.passes.pipeline import PassOptions

    opts = PassOptions(device=device, options={o.name: o.default for o in hlo_pass.options})
    opts.context = target.pm.context_for(hlo_pass.plugin, device=device)
    changed = hlo_pass.run(module, opts)
    for c in module.computations:
        c.invalidate()
    return bool(changed)


def modules_changed_by(target: Any, hlo_pass: Any, roots: list[Path], limit: int, max_elements: int,
                       dropped: Any = None, device: Any = None) -> tuple[list[CorpusModule], int]:
    """``(modules, searched)``: the ``limit`` smallest shared-corpus modules ``hlo_pass`` changes, then every one
    of the other roots (``$FUSEGEN_CORPUS``: never sampled); ``searched`` counts the modules tried. A module over
    ``max_elements`` entry parameter + output elements is counted in ``dropped`` and left out."""
    from fusegen.conformance.corpus import corpus_files, parse_file, shared_corpus_root
    from fusegen.device import get_device
    from fusegen.hlo.printer import print_module

    device = device or get_device("h200")
    shared = shared_corpus_root()
    found: list[tuple[bool, int, int, CorpusModule]] = []
    searched = 0
    for path in corpus_files(roots):
        for mi, parsed in enumerate(parse_file(path)):
            if parsed.entry is None:
                continue
            searched += 1
            mine = shared is None or not path.resolve().is_relative_to(shared.resolve())
            try:
                module = load_module(path, mi)
                before = print_module(module)
            except Exception:
                continue  # what fusegen cannot parse or print is the parser's tests' business
            raised = ""
            try:
                run_pass(target, hlo_pass, module, device)
                try:
                    same = print_module(module) == before
                except Exception:
                    same = False  # a module that no longer prints is a change (and a failure, reported)
            except Exception as e:
                raised, same = f"{type(e).__name__}: {e}", False
            if same:
                continue
            size = module_size(parsed)
            if size > max_elements:
                if dropped is not None:
                    dropped.add(size)
                continue
            found.append((not mine, size, len(found), CorpusModule(path, mi, size, raised)))
    shared_part = sorted(f for f in found if f[0])[:limit]
    return [f[3] for f in shared_part] + [f[3] for f in found if not f[0]], searched
