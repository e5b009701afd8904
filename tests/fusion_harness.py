"""Helpers for emitter tests: find fusions in HLO, compute their operands and reference values, pick the
emitter the loop arm would pick, run it in the Triton interpreter and compare with the reference evaluator.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime
from fusegen.device import RTXA6000
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo.ir import Instruction, Module
from fusegen.hlo.parser import parse_module
from fusegen.plugin_manager import default_plugin_manager
from fusegen.runtime.compare import compare
from fusegen.runtime.inputs import leaves, make_inputs

if TYPE_CHECKING:
    from fusegen_plugins.emitters.reduction import ReductionFusion


def load(path_or_text: str | Path, name: str = "<test>") -> Module:
    if isinstance(path_or_text, Path):
        return parse_module(path_or_text.read_text(), str(path_or_text))
    return parse_module(path_or_text, name)


def loop_fusions(module: Module) -> list[Instruction]:
    """kLoop fusions of the entry computation, or the entry root when there is none."""
    fs = [i for i in module.entry.post_order() if i.opcode == "fusion" and i.attrs.get("kind") == "kLoop"]
    return fs or [module.entry.root]


def operands_and_reference(module: Module, fusion: Instruction, seed: int = 0,
                           args: list[Any] | None = None) -> tuple[list[Any], Any]:
    """Evaluate the entry computation up to ``fusion``; returns its operand values and its reference value."""
    args = make_inputs(module, seed=seed) if args is None else args
    vals: dict[int, Any] = {}
    for inst in module.entry.post_order():
        if inst.opcode == "parameter":
            vals[id(inst)] = args[inst.parameter_number]
            continue
        ops = [vals[id(o)] for o in inst.operands]
        vals[id(inst)] = evaluate_instruction(inst, ops)
        if inst is fusion:
            return ops, vals[id(inst)]
    raise AssertionError(f"{fusion.name} not in the entry computation")


def pick_emitter(analysis: FusionAnalysis, kind: str = "kLoop") -> Any:
    """The first non-None emitter of the loop arm's factories (memcpy, in-place DUS, loop)."""
    for f in default_plugin_manager().emitter_factories(kind):
        em = f.create(analysis, None)
        if em is not None:
            return em
    raise AssertionError("no emitter accepted the fusion")


def run_and_compare(fusion: Instruction, ops: list[Any], ref: Any, emitted: Any = None) -> tuple[Any, list]:
    """Run the fusion's emitted kernels in the interpreter and assert every leaf matches the reference."""
    if emitted is None:
        emitted = pick_emitter(FusionAnalysis.create(fusion)).emit()
    outs = triton_runtime.run_fusion(emitted, ops, fusion)
    shapes = fusion.shape.leaves()
    refs = leaves(ref)
    assert len(outs) == len(refs) == len(shapes)
    for k, (s, o, r) in enumerate(zip(shapes, outs, refs)):
        assert o.shape == tuple(s.dimensions), (k, o.shape, s.dimensions)
        c = compare(o, r, s.element_type)
        assert c.ok, f"{fusion.name} leaf {k} ({s.element_type}): max abs {c.max_abs_error}, rel {c.max_rel_error}"
    return emitted, outs


def evaluate_fusion(fusion: Instruction, ops: list[Any]) -> Any:
    return evaluate_instruction(fusion, ops)


def as_np(x: Any) -> np.ndarray:
    return np.asarray(x)


def run_loop_text(text: str, args: list) -> list:
    """Run the one kLoop fusion of module ``text`` on ``args`` (entry parameters) with the loop emitter in
    the interpreter; assert it matches the reference evaluator; return the kernel's outputs."""
    m = load(text)
    (f,) = loop_fusions(m)
    ops, ref = operands_and_reference(m, f, args=args)
    emitted, outs = run_and_compare(f, ops, ref)
    assert emitted.emitter == "LoopFusion"
    return outs


def launch_set_fusions(where: Path) -> Iterator[tuple[str, Module, Instruction, Any, Any]]:
    """``(module file, module, fusion, emitter or None, factory or None)`` for every fusion of the entry
    computation of each module a launch set's ``LAUNCH.tsv`` names (sorted by file), its kind decided and its
    emitter built as dispatch does for an H200. Skips the calling test when the set is absent."""
    import pytest

    from fusegen.device import get_device
    from fusegen.dispatch import get_emitter_fusion_kind, get_fusion_emitter

    if not (where / "LAUNCH.tsv").exists():
        pytest.skip(f"{where} is absent (the shared corpus is not checked out beside the project)")
    with open(where / "LAUNCH.tsv", newline="") as fh:
        modules = sorted({r["module_file"] for r in csv.DictReader(fh, delimiter="\t")})
    device = get_device("h200")
    for mf in modules:
        m = load((where / mf).read_text(), mf)
        for f in (i for i in m.entry.instructions if i.opcode == "fusion"):
            a = FusionAnalysis.create(f, device)
            get_emitter_fusion_kind(a)
            em, factory = get_fusion_emitter(a)
            yield mf, m, f, em, factory


def grid_programs(kernels: Any) -> int:
    """Programs of every kernel's launch together (grid x times grid y)."""
    return sum(k.launch.grid[0] * (k.launch.grid[1] if len(k.launch.grid) > 1 else 1) for k in kernels)


def _only_fusion(module):
    (f,) = [i for i in module.entry.post_order() if i.opcode == "fusion"]
    return f


def _run_loop(text: str, args=None):
    """Emit the module's single fusion with the loop arm, run it; returns (kernel outputs, reference, args)."""
    m = load(text)
    f = _only_fusion(m)
    args = make_inputs(m, seed=0) if args is None else args
    ops, ref = operands_and_reference(m, f, args=args)
    emitted = pick_emitter(FusionAnalysis.create(f)).emit()
    assert emitted.emitter == "LoopFusion" and emitted.kernels
    _, outs = run_and_compare(f, ops, ref, emitted)
    return outs, ref, ops, emitted


def run_emitter(emitter: ReductionFusion, fusion: Instruction, ops: list[Any]) -> tuple[Any, list[np.ndarray]]:
    emitted = emitter.emit()
    outs = triton_runtime.run_fusion(emitted, ops, fusion)
    return emitted, outs


def _module(text: str) -> tuple[FusionAnalysis, Instruction]:
    m = parse_module(text, "<test>")
    f = m.entry.root
    return FusionAnalysis.create(f, RTXA6000), f
