"""Which instructions the autotuner assigns a config to, and the per-instruction report of a tuning.

Mirrors ``ConfigAssignerPass`` (``xla/backends/autotuner/config_assigner_pass.cc``): the instructions that
need a config, in a deterministic order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import attrs

from fusegen.autotuning.selection import ProfileResult
from fusegen.codegen.tuned_backend import LIBRARY_CALL_FIELD as _LIBRARY_CALL_FIELD

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.hlo.ir import Instruction, Module


# --------------------------------------------------------------------------------------------
# Which instructions
# --------------------------------------------------------------------------------------------

def needs_config(instr: "Instruction", tune_emitter_fusions: bool = False, retune: bool = False) -> bool:
    """Whether ``instr`` gets a config (``config_assigner_pass.cc:115-230``).

    cuBLASLt custom calls without ``selected_algorithm``, cuDNN convolutions without an algorithm,
    ``__triton_gemm`` fusions without ``triton_gemm_config``, ``__triton_nested_gemm_fusion`` without
    ``block_level_fusion_config`` (either with a library-call winner, XLA's cuBLAS fallback, is configured),
    ``__cudnn$fusion`` without ``plan_id``, ``__custom_fusion`` without ``custom_fusion_config``; with
    ``tune_emitter_fusions`` also other non-custom fusions without scatter. ``retune`` (beyond XLA) also takes
    those kinds when they already carry a config, e.g. an optimized module from XLA tuned on another machine.
    """
    bc = instr.backend_config
    if instr.opcode == "custom-call":
        target = str(instr.attrs.get("custom_call_target", "")).strip('"')
        if target.startswith("__cublas$lt$matmul"):
            gbc = bc.get("gemm_backend_config", {}) if isinstance(bc, dict) else {}
            return retune or not (isinstance(gbc, dict) and "selected_algorithm" in gbc)
        if target.startswith("__cudnn$conv"):
            cbc = bc.get("cudnn_conv_backend_config", {}) if isinstance(bc, dict) else {}
            return retune or not (isinstance(cbc, dict) and cbc.get("algorithm"))
        return False
    if instr.opcode != "fusion":
        return False
    kind = instr.fusion_backend_kind
    fbc = bc.get("fusion_backend_config", {}) if isinstance(bc, dict) else {}
    fbc = fbc if isinstance(fbc, dict) else {}
    if kind == "__triton_gemm":
        return retune or ("triton_gemm_config" not in fbc and _LIBRARY_CALL_FIELD not in fbc)
    if kind == "__triton_nested_gemm_fusion":
        return retune or ("block_level_fusion_config" not in fbc and _LIBRARY_CALL_FIELD not in fbc)
    if kind == "__cudnn$fusion":
        cfc = fbc.get("cudnn_fusion_config", {})
        return retune or not (isinstance(cfc, dict) and "plan_id" in cfc)
    if kind == "__custom_fusion":
        return retune or "custom_fusion_config" not in fbc
    if tune_emitter_fusions and instr.attrs.get("kind") != "kCustom" and kind is None:
        return not any(i.opcode == "scatter" for i in instr.fused_computation.instructions)
    return False


def tunable_instructions(module: "Module", tune_emitter_fusions: bool = False,
                         retune: bool = False) -> list["Instruction"]:
    """Instructions of ``module``'s non-fused computations that need a config, in module order."""
    fused: set[int] = set()
    for c in module.computations:
        for i in c.instructions:
            if i.opcode == "fusion":
                for sub in i.called_computations:
                    fused.add(id(sub))
    out = []
    for c in module.computations:
        if id(c) in fused:
            continue
        out.extend(i for i in c.instructions if needs_config(i, tune_emitter_fusions, retune))
    return out


def nothing_to_tune_note(retune: bool, retune_spelling: str = "retune=True") -> str:
    """Why a tuning tuned nothing, naming how to also tune configured instructions (``--retune`` on the CLI,
    ``retune=True`` in the library)."""
    return ("nothing to tune (no __triton_gemm, cuBLASLt, cuDNN or custom fusion without a config"
            + ("" if retune else f"; {retune_spelling} also tunes instructions that carry one, e.g. an XLA-optimized "
                                 f"module") + ")")


def describe(instr: "Instruction") -> str:
    """The instruction as HLO text (for XLA's messages that embed it)."""
    try:
        from fusegen.hlo.printer import print_instruction

        return print_instruction(instr)
    except Exception:  # printer missing or cannot print this instruction: fall back to a short form
        return f"%{instr.name} = {instr.opcode}(...)"


# --------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------

@attrs.define
class InstructionReport:
    """What happened to one instruction (one row of the summary table).

    ``step``: ``cache`` | ``tuned`` | ``single-config`` | ``single-compiled`` | ``first-compilable`` |
    ``default`` | ``kept`` (re-tuning, no supported config here: its own config stays) | ``error``; ``cache``: ``memory`` | ``directory`` | ``miss``. ``configs`` counts the
    configs tried (after the cost model), ``supported`` every supported config before it. ``source``: where
    ``duration_us`` came from (:meth:`fusegen.cache.provenance.Source.to_json`: measured on a named GPU, estimated
    by a model, CPU interpreter time, not timed); ``hint``: a cached config that was not applied because its figure
    is not one this run trusts (an estimate on a GPU run), named with where its figure came from.
    """

    name: str
    key: str = ""
    cache: str = "miss"
    step: str = ""
    configs: int = 0
    supported: int = 0
    compiled: int = 0
    failures: dict[str, int] = attrs.field(factory=dict)
    winner: str | None = None
    duration_us: float | None = None
    scratch_bytes: int = 0
    tie_break: bool = False
    error: str | None = None
    compile_seconds: float = 0.0
    seconds: float = 0.0
    source: dict | None = None
    hint: str | None = None
    results: list[ProfileResult] = attrs.field(factory=list, repr=False)

    @property
    def cache_hit(self) -> bool:
        return self.cache in ("memory", "directory")

    def to_json(self) -> dict:
        d = attrs.asdict(self, filter=lambda a, v: a.name != "results")
        d["cache_hit"] = self.cache_hit
        return d


def summary_table(reports: Sequence[InstructionReport], title: str = "autotuning"):
    """A ``rich`` table: configs tried, failures by kind, winner, time, scratch, tie-break, cache."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title)
    for col in ("instruction", "cache", "step", "configs", "compiled", "failures", "winner", "time µs",
                "time from", "scratch B", "tie-break"):
        t.add_column(col, overflow="fold")
    for r in reports:
        fails = ", ".join(f"{k}×{v}" for k, v in sorted(r.failures.items())) or "-"
        cache = f"hit ({r.cache})" if r.cache_hit else r.cache
        err = r.error.splitlines()[0] if r.error else ""
        err = err if len(err) <= 160 else err[:159] + "…"  # XLA's messages embed the whole instruction
        t.add_row(r.name, cache, r.step if not r.error else f"[red]error[/]: {escape(err)}",
                  str(r.configs) if r.supported <= r.configs else f"{r.configs} of {r.supported}",
                  str(r.compiled), fails, r.winner or "-",
                  "-" if r.duration_us is None else f"{r.duration_us:.2f}",
                  (r.source or {}).get("label", "-") if not r.error else "-", str(r.scratch_bytes),
                  "yes" if r.tie_break else "no")
    return t
