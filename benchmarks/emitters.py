"""Emitter benchmark: sm_90 compile time of fusegen's generated kernels per emitter, and on a GPU their
achieved memory bandwidth against XLA's own kernel for the same fusion.

CPU part (always). For every emitter row (``kLoop`` loop and in-place dynamic-update-slice, ``kReduction``
row / multi-row / column / small-column, ``kTranspose`` tiled / packed, ``kConcatenate``, ``kScatter``
distributed updates / indices, ``kSort``, ``kInputSlices``, ``kTriton`` GEMM / block-level) it picks
representative fusions of the shared corpus (``jax/gpt12.h200_opt.hlo``, the ``lit_*`` cases, the other
GPU-optimised modules, ``bugs/B07``/``B20`` after fusegen's pipeline, plus two scaled variants in
:data:`DERIVED`: B20's sort at 1024 and B38's at 2**20 elements, and a sorted-indices scatter that takes
``ScatterWithDistributedIndices``), spread over their byte sizes (at most ``--per-kind``, default 5, 2 with
``--quick``, which takes a derived variant only for a row the corpus does not reach), generates
each fusion's kernels (:meth:`fusegen.runtime.executor.Executor.plan_fusion`) and compiles them cold with
:func:`fusegen.codegen.triton_runtime.compile_for_target` for ``GPUTarget("cuda", 90, 32)``: fusegen's
in-process compile cache is cleared and every fusion gets a fresh ``TRITON_CACHE_DIR`` so Triton's disk cache
hides nothing (one throwaway compile first pays Triton's one-time start-up). Per row: fusions, kernels,
median / max compile seconds per fusion (all its kernels), median PTX size, max static shared memory and the
``num_warps`` of the compiled metadata, median emit (analysis + dispatch + codegen) milliseconds.

GPU part (``--gpu``; needs CuPy and a CUDA device, ``pip install -e '.[gpu]'``, else it says exactly what is
missing and exits 0; the XLA side also needs jax's CUDA plugin, ``jax[cuda12]`` at the installed jax version,
and without it fusegen's side still runs and the XLA side says why). For each fusion small enough for the
reference evaluator (at most ``--gpu-per-kind`` per row, spread over sizes, within ``--gpu-budget-s``):

* fusegen: its kernels launched through Triton's JIT on CuPy buffers (on the legacy default stream, where
  CuPy records its events), operands from :func:`fusegen.runtime.inputs.make_inputs` on the fusion's body
  (index operands in range), output checked against the reference evaluator; timed with CUDA events,
  median of ``--runs`` after ``--warmup`` launches, a 256 MiB L2 flush (a Triton kernel) before every run.
* XLA: the fused computation becomes the ENTRY of its own HLO module (nested fusions become calls; layout
  ``bitcast``s become the logically equal transpose/reshape, so the physical operand and result layouts,
  passed as ``mhlo.layout_mode``, are what XLA must produce; in-place outputs alias their operand through
  ``tf.aliasing_output`` and every run gets a fresh donated buffer), converted with jaxlib's
  ``hlo_module_from_text`` -> ``hlo_to_stablehlo`` and compiled by the ``cuda`` PJRT client (XLA's
  full GPU pipeline re-fuses it; that is XLA's kernel for this fusion). Its output is checked against the
  evaluator as well.
* Both are also timed with CUPTI through jax's profiler (device time from the first kernel's start to the
  last kernel's end of each run, same flush), which is the only clock XLA's private streams allow; the
  ratio fusegen / XLA of achieved bandwidth uses that like-for-like pair. When the profiler yields no GPU
  events, XLA falls back to host wall time around a blocking run (an overestimate of XLA's time, flagged).
* Bytes = every operand read once + every output written once; an output aliasing its operand (in-place
  dynamic-update-slice, scatter) counts only its update region, read and written.

``--xla-cpu-check`` builds the same XLA modules and runs them on jaxlib's CPU client against the evaluator:
the wrapping, layouts, donation and inputs of the GPU part, checked without a GPU. ``--json FILE`` writes
everything. Run: ``python benchmarks/emitters.py [--quick] [--gpu] [--json FILE]``
(``scripts/gpu-check`` runs the GPU part on a GPU machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CORPUS = SHARED / "corpus"

#: Report rows in order: (kind, emitter class). Rows the corpus does not reach are printed as such.
ROWS: list[tuple[str, str]] = [
    ("kLoop", "LoopFusion"),
    ("kLoop", "InPlaceDynamicUpdateSliceFusion"),
    ("kReduction", "RowReductionFusion"),
    ("kReduction", "MultiRowReductionFusion"),
    ("kReduction", "ColumnReductionFusion"),
    ("kReduction", "SmallColumnReductionFusion"),
    ("kTranspose", "TransposeFusion"),
    ("kTranspose", "PackedTranspose"),
    ("kConcatenate", "ConcatenateFusion"),
    ("kScatter", "ScatterWithDistributedUpdates"),
    ("kScatter", "ScatterWithDistributedIndices"),
    ("kSort", "SortFusion"),
    ("kInputSlices", "InputSlicesFusion"),
    ("kTriton", "TritonGemmFusion"),
    ("kTriton", "TritonBlockLevelFusion"),
]

#: Scaled variants of corpus files for rows the corpus only reaches with toy sizes or not at all:
#: (label, corpus file, [(old, new) text substitutions]).
DERIVED: list[tuple[str, str, list[tuple[str, str]]]] = [
    # B20's argsort at 1024 elements (one tile of XLA's sort): the corpus sort has 10. Cold sm_90 compile
    # on 2 shared cores: 0.28-0.35 s (2 kernels); the unrolled 1024-element network it replaced took 12.6 s.
    ("B20@1024", "bugs/B20.hlo", [("s64[10]", "s64[1024]")]),
    # B38's stable key-value sort at 2**20 elements: 256 tiles, XLA's multi-launch sort (issue 10), 46
    # launches of 3 distinct kernels; cold sm_90 compile 0.56 s (budget 10 s per sort fusion).
    ("B38@1048576", "bugs/B38_stable_sort_ties_2048.hlo", [("s32[2000]", "s32[1048576]")]),
    # lit scatter add with sorted, non-unique indices and 4096 slices > 4 warps x 132 SMs: XLA's
    # ScatterWithDistributedIndices (scatter.cc), which no corpus case reaches.
    ("scatter_add_sorted@4096", "xla/cases/lit_gpu__scatter__add.hlo",
     [("f32[10,5]", "f32[4096,5]"), ("s32[24,1]", "s32[4096,1]"), ("f32[24,2,3]", "f32[4096,2,3]"),
      ("unique_indices=false", "unique_indices=false, indices_are_sorted=true")]),
]

FLUSH_BYTES = 256 << 20  # > H200's 60 MiB L2, and long enough (~60 us) to hide the host's launch latency
FLUSH_KERNEL = "fg_l2_flush"
#: The flush: every int32 of ``ptr[0:n]`` written (launched with ``cdiv(n, BLOCK)`` programs).
FLUSH_SOURCE = f"""import triton
import triton.language as tl


@triton.jit
def {FLUSH_KERNEL}(ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(ptr + offs, 0x5A5A5A5A, mask=offs < n)
"""


# --------------------------------------------------------------------------------------------------
# candidates
# --------------------------------------------------------------------------------------------------
@attrs.define(eq=False)
class Candidate:
    """One corpus fusion and what fusegen emitted for it."""

    source: str  # corpus-relative file (or derived label)
    fusion: Any  # fusegen.hlo.ir.Instruction
    kind: str
    emitter: str
    emitted: Any  # EmittedFusion with at least one kernel
    emit_seconds: float
    derived: bool = False

    @property
    def row(self) -> tuple[str, str]:
        return self.kind, self.emitter

    @property
    def label(self) -> str:
        return f"{self.source}:%{self.fusion.name}"


def _corpus_files() -> list[tuple[str, str, bool]]:
    """(label, HLO text, derived) of every module the benchmark draws from."""
    files = [CORPUS / "jax" / "gpt12.h200_opt.hlo"]
    files += sorted(p for p in (CORPUS / "jax").glob("*.h1*_opt.hlo") if p not in files)
    files += sorted((CORPUS / "xla" / "cases").glob("lit_*.hlo"))
    files += sorted((CORPUS / "xla" / "cases").glob("hist2025__*.hlo"))
    files += sorted((CORPUS / "xla" / "modules").glob("*.hlo"))
    files += [CORPUS / "bugs" / "B07.hlo", CORPUS / "bugs" / "B20.hlo"]
    out = [(str(p.relative_to(CORPUS)), p.read_text(), False) for p in files if p.exists()]
    for label, rel, subs in DERIVED:
        p = CORPUS / rel
        if p.exists():
            text = p.read_text()
            for old, new in subs:
                text = text.replace(old, new)
            out.append((label, text, True))
    return out


def collect_candidates() -> tuple[dict[tuple[str, str], list[Candidate]], list[str]]:
    """Every corpus fusion that fusegen gives at least one kernel, grouped by (kind, emitter).

    Modules without fusions go through fusegen's default pipeline first (``optimize_if_needed``). Fusions
    whose kernels are identical to an earlier one's (gpt12 repeats each layer) are dropped. Returns the
    groups and the problems met (unparsable files, plugins raising), as text.
    """
    from fusegen.codegen.triton_runtime import source_hash
    from fusegen.hlo.parser import parse_modules
    from fusegen.passes.pipeline import optimize_if_needed
    from fusegen.runtime.executor import Executor

    groups: dict[tuple[str, str], list[Candidate]] = {}
    seen: set[tuple[str, ...]] = set()
    problems: list[str] = []
    for label, text, derived in _corpus_files():
        try:
            modules = parse_modules(text, label)
        except Exception as e:  # the corpus holds deliberately broken files (bugs/B01...)
            problems.append(f"{label}: not parsed ({type(e).__name__})")
            continue
        for m in modules:
            try:
                optimize_if_needed(m)
            except Exception as e:
                problems.append(f"{label}: pipeline failed ({type(e).__name__}: {e})".splitlines()[0])
                continue
            ex = Executor(m, compile_kernels=False)
            for inst in m.fusion_instructions():
                t0 = time.perf_counter()
                try:
                    emitted, rep = ex.plan_fusion(inst)
                except Exception as e:
                    problems.append(f"{label}:%{inst.name}: {type(e).__name__}: {e}".splitlines()[0])
                    continue
                dt = time.perf_counter() - t0
                if emitted is None or not emitted.kernels:
                    continue
                # same source and constexprs = the same compile (gpt12 repeats each layer)
                key = tuple((source_hash(k), tuple(sorted(k.constexprs.items())), k.launch.grid)
                            for k in emitted.kernels)
                if key in seen:
                    continue
                seen.add(key)
                c = Candidate(label, inst, rep.kind, emitted.emitter, emitted, dt, derived)
                groups.setdefault(c.row, []).append(c)
    return groups, problems


def shape_bytes(shape: Any) -> int:
    """Bytes of an array shape's buffer (sub-byte types take a byte per element, as kernels store them)."""
    from fusegen.hlo import dtypes

    if shape.is_tuple:
        return sum(shape_bytes(s) for s in shape.tuple_shapes)
    if shape.element_type == "token":
        return 0
    return shape.numel * max(1, dtypes.bit_width(shape.element_type) // 8)


def _root_leaves(comp: Any) -> list[Any]:
    root = comp.root
    return list(root.operands) if root.opcode == "tuple" else [root]


def fusion_bytes(c: Candidate) -> int:
    """Bytes a fusion must move: operands read once, outputs written once; an output aliasing an operand
    (in place) counts its update region read and written instead of the whole buffer."""
    f = c.fusion
    aliased = c.emitted.output_aliases
    out_leaves = f.shape.leaves()
    roots = _root_leaves(f.fused_computation)
    total = sum(shape_bytes(o.shape) for k, o in enumerate(f.operands) if k not in aliased.values())
    for k, s in enumerate(out_leaves):
        if k not in aliased:
            total += shape_bytes(s)
            continue
        r = roots[k] if k < len(roots) else None
        if r is not None and r.opcode == "dynamic-update-slice":
            upd = shape_bytes(r.operands[1].shape)
        elif r is not None and r.opcode == "scatter":
            n = (len(r.operands) - 1) // 2
            upd = sum(shape_bytes(u.shape) for u in r.operands[n + 1:])
        else:
            upd = shape_bytes(s)
        total += 2 * upd
    return total


#: Largest buffer (any instruction of the body) the GPU part and the XLA CPU check run: the reference
#: evaluator materialises every instruction on the host (some XLA test modules broadcast to terabytes).
RUN_LIMIT_BYTES = 64 << 20


def runnable(c: Candidate) -> bool:
    """Whether ``c`` is small enough to evaluate on the host and run (:data:`RUN_LIMIT_BYTES`)."""
    comps, todo = [], [c.fusion.fused_computation]
    while todo:
        comp = todo.pop()
        comps.append(comp)
        todo.extend(cc for i in comp.instructions for cc in i.called_computations)
    return all(shape_bytes(i.shape) <= RUN_LIMIT_BYTES for comp in comps for i in comp.instructions)


def select(cands: list[Candidate], n: int, derived_only_if_needed: bool = False) -> list[Candidate]:
    """``n`` candidates spread over the byte sizes (smallest and largest included), then one derived one.

    ``derived_only_if_needed``: derived variants only for a row the corpus itself does not reach (``--quick``:
    the 1024-element sort alone compiles for ~20 s on 2 cores).
    """
    plain = sorted((c for c in cands if not c.derived), key=lambda c: (fusion_bytes(c), c.label))
    derived = [c for c in cands if c.derived]
    if derived_only_if_needed and plain:
        derived = []
    if n <= 0:
        return []
    if len(plain) + len(derived) <= n:
        return plain + derived
    # keep one derived slot when a row has derived cases (they are there for size)
    k = n - (1 if derived else 0)
    if len(plain) <= k:
        picked = list(plain)
    elif k == 1:
        picked = [plain[-1]]
    else:
        idx = sorted({round(i * (len(plain) - 1) / (k - 1)) for i in range(k)})
        picked = [plain[i] for i in idx]
    return picked + derived[: n - len(picked)]


# --------------------------------------------------------------------------------------------------
# CPU part: cold sm_90 compiles
# --------------------------------------------------------------------------------------------------
@attrs.define
class CompileStats:
    label: str
    kernels: int
    seconds: float
    ptx_bytes: int
    cubin_bytes: int
    shared_bytes: int
    num_warps: list[int]
    emit_ms: float
    launch: str
    error: str = ""


def compile_cold(c: Candidate, cache_root: Path, n: int) -> CompileStats:
    """Compile every kernel of ``c`` for sm_90 with no cache anywhere; sums time and PTX over kernels."""
    from fusegen.codegen import triton_runtime

    triton_runtime._COMPILED.clear()  # fusegen's in-process cache
    os.environ["TRITON_CACHE_DIR"] = str(cache_root / f"c{n}")  # Triton reads it at each compile
    secs = 0.0
    ptx = cubin = smem = 0
    warps: list[int] = []
    err = ""
    for ks in c.emitted.kernels:
        try:
            r = triton_runtime.compile_for_target(ks, capability=90)
        except Exception as e:
            lines = [x.strip() for x in str(e).splitlines() if x.strip() and x.strip() != "^"]
            # Triton's CompilationError: "at L:C:", the source, the message last or in its cause
            parts = lines[:1] + ([str(e.__cause__).strip().splitlines()[0]] if str(e.__cause__ or "").strip()
                                 else lines[-1:])
            err = f"{ks.name}: {type(e).__name__}: {' ... '.join(dict.fromkeys(parts))}"
            break
        secs += r.seconds
        ptx += len(r.ptx)
        cubin += r.cubin_bytes
        smem = max(smem, r.shared_bytes)
        warps.append(r.num_warps)
    return CompileStats(c.label, len(c.emitted.kernels), secs, ptx, cubin, smem, sorted(set(warps)),
                        c.emit_seconds * 1e3, str(c.emitted.launch), err)


def _warm_up_triton(c: Candidate, cache_root: Path) -> None:
    """One throwaway compile: loading Triton's NVIDIA backend, LLVM and ptxas is paid once per process."""
    compile_cold(c, cache_root, -1)


def run_cpu(selected: dict[tuple[str, str], list[Candidate]], cache_root: Path,
            on_row: Any = None) -> list[dict]:
    rows = []
    first = next((cs[0] for cs in selected.values() if cs), None)
    if first is not None:
        _warm_up_triton(first, cache_root)
    n = 0
    for (kind, emitter), cands in selected.items():
        stats = []
        for c in cands:
            stats.append(compile_cold(c, cache_root, n))
            n += 1
        ok = [s for s in stats if not s.error]
        row: dict[str, Any] = {"kind": kind, "emitter": emitter, "fusions": len(stats),
                               "kernels": sum(s.kernels for s in stats), "failed": len(stats) - len(ok)}
        if ok:
            secs = [s.seconds for s in ok]
            row.update(compile_s_median=statistics.median(secs), compile_s_max=max(secs),
                       ptx_bytes_median=int(statistics.median(s.ptx_bytes for s in ok)),
                       ptx_bytes_max=max(s.ptx_bytes for s in ok),
                       shared_bytes_max=max(s.shared_bytes for s in ok),
                       num_warps=sorted({w for s in ok for w in s.num_warps}),
                       emit_ms_median=statistics.median(s.emit_ms for s in ok))
        row["detail"] = [attrs.asdict(s) for s in stats]
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows


# --------------------------------------------------------------------------------------------------
# the fusion as its own HLO module (XLA's side; also checked on jaxlib's CPU client)
# --------------------------------------------------------------------------------------------------
class XlaWrapError(Exception):
    """The fusion cannot be handed to XLA as a module (the message says why)."""


def _major_to_minor(shape: Any) -> list[int]:
    return list(reversed(shape.minor_to_major()))


def _shape_text(et: str, dims: list[int]) -> str:
    return f"{et}[{','.join(map(str, dims))}]"


def _bitcast_lines(inst: Any) -> list[tuple[str, str]]:
    """``bitcast`` as the logically equal transpose -> reshape -> transpose (identity steps left out).

    XLA's HLO -> StableHLO import keeps a layout bitcast as ``mhlo.bitcast`` with layouts the PJRT compile
    path rejects; in logical terms a bitcast is: read the operand in its physical order (transpose to its
    major-to-minor order), reinterpret the dims (reshape), and view it in the result's logical order.
    Returns (name, instruction text) pairs; the last one carries the bitcast's name.
    """
    (x,) = inst.operands
    a, b = x.shape, inst.shape
    if a.element_type != b.element_type:
        raise XlaWrapError(f"%{inst.name}: bitcast between element types {a.element_type} -> {b.element_type}")
    et = a.element_type
    pa, pb = _major_to_minor(a), _major_to_minor(b)
    a_phys = [a.dimensions[d] for d in pa]
    b_phys = [b.dimensions[d] for d in pb]
    steps: list[tuple[str, str]] = []
    cur = f"%{x.name}"
    if pa != sorted(pa):
        name = f"{inst.name}.fg_phys"
        steps.append((name, f"%{name} = {_shape_text(et, a_phys)} transpose({cur}), "
                            f"dimensions={{{','.join(map(str, pa))}}}"))
        cur = f"%{name}"
    inv = [int(i) for i in np.argsort(pb)]
    if a_phys != b_phys or inv == list(range(len(inv))):
        name = inst.name if inv == list(range(len(inv))) else f"{inst.name}.fg_reshape"
        steps.append((name, f"%{name} = {_shape_text(et, b_phys)} reshape({cur})"))
        cur = f"%{name}"
    if inv != list(range(len(inv))):
        steps.append((inst.name, f"%{inst.name} = {_shape_text(et, list(b.dimensions))} transpose({cur}), "
                                 f"dimensions={{{','.join(map(str, inv))}}}"))
    return steps


def standalone_module_text(fusion: Any) -> str:
    """HLO text of a module whose ENTRY is ``fusion``'s body (and every computation it calls).

    Nested fusions become ``call``s (XLA inlines and re-fuses them), layout bitcasts become logical
    transpose/reshape (:func:`_bitcast_lines`), metadata is dropped. Parameter shapes keep their layouts.

    Raises:
        XlaWrapError: a tuple-shaped parameter (PJRT entry arguments are arrays) or a type-changing bitcast.
    """
    from fusegen.hlo.printer import print_instruction, print_shape

    body = fusion.fused_computation
    if any(p.shape.is_tuple for p in body.parameters):
        raise XlaWrapError("a tuple-shaped fusion parameter (PJRT entry arguments are arrays)")
    comps: list[Any] = []
    seen: set[int] = set()

    def visit(c: Any) -> None:
        if id(c) in seen:
            return
        seen.add(id(c))
        for i in c.instructions:
            for cc in i.called_computations:
                visit(cc)
        comps.append(c)

    visit(body)

    def one(c: Any) -> str:
        params = ", ".join(f"{p.name}: {print_shape(p.shape, False)}" for p in c.parameters)
        root = c.root if c.root is not None else c.instructions[-1]
        lines = [f"{'ENTRY ' if c is body else ''}%{c.name} ({params}) -> {print_shape(root.shape, False)} {{"]
        for i in c.instructions:
            if i.opcode == "fusion":
                ops = ", ".join("%" + o.name for o in i.operands)
                steps = [(i.name, f"%{i.name} = {print_shape(i.shape)} call({ops}), "
                                  f"to_apply=%{i.fused_computation.name}")]
            elif i.opcode == "bitcast":
                steps = _bitcast_lines(i)
            else:
                clean = attrs.evolve(i, attrs={k: v for k, v in i.attrs.items() if k != "metadata"})
                steps = [(i.name, print_instruction(clean))]
            for name, text in steps:
                lines.append(("  ROOT " if i is root and name == i.name else "  ") + text)
        lines.append("}")
        return "\n".join(lines)

    return f"HloModule {fusion.name}_standalone\n\n" + "\n\n".join(one(c) for c in comps) + "\n"


def _identity(comp: Any, dt: np.dtype) -> np.ndarray | None:
    """The identity of a reducer computation that is one binary op of its two parameters, else ``None``."""
    root = getattr(comp, "root", None)
    if root is None or len(root.operands) != 2 or any(o.opcode != "parameter" for o in root.operands):
        return None
    if dt == np.bool_:
        table = {"add": False, "or": False, "xor": False, "maximum": False, "and": True, "multiply": True,
                 "minimum": True}
    elif np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        table = {"add": 0, "or": 0, "xor": 0, "multiply": 1, "maximum": info.min, "minimum": info.max,
                 "and": info.max if info.min == 0 else -1}
    else:
        table = {"add": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}
    if root.opcode not in table:
        return None
    return np.asarray(table[root.opcode]).astype(dt)


def fusion_inputs(fusion: Any, seed: int = 0) -> list[Any]:
    """Logical operand values for ``fusion``: :func:`fusegen.runtime.inputs.make_inputs` on its body as a
    module (index operands in range); index operands of scatters hinted ``indices_are_sorted`` are sorted."""
    from fusegen.hlo.parser import parse_module
    from fusegen.runtime.inputs import make_inputs, random_value

    try:
        m = parse_module(standalone_module_text(fusion), f"{fusion.name}_standalone")
        args = make_inputs(m, seed=seed)
    except Exception:  # tuple parameters etc.: plain random values (indices may be out of range)
        rng = np.random.default_rng(seed)
        return [random_value(o.shape, rng) for o in fusion.operands]
    body = fusion.fused_computation
    for inst in body.instructions:
        if inst.opcode == "reduce" and len(inst.operands) == 2 and inst.operands[1].opcode == "parameter":
            # XLA may fold the init value in more than once (it must be the combiner's identity): make it so
            k = inst.operands[1].parameter_number
            ident = _identity(inst.attrs.get("to_apply"), np.asarray(args[k]).dtype)
            if ident is not None:
                args[k] = ident
        if inst.opcode == "scatter" and str(inst.attrs.get("indices_are_sorted", "")).lower() == "true":
            idx = inst.operands[(len(inst.operands) - 1) // 2]
            if idx.opcode == "parameter":
                k = idx.parameter_number
                a = np.asarray(args[k])
                flat = np.sort(a.reshape(a.shape[0], -1) if a.ndim else a, axis=0)
                args[k] = flat.reshape(a.shape)
    return args


def compile_xla(fusion: Any, aliases: dict[int, int], platform_name: str) -> tuple[Any, Any]:
    """Compile ``fusion``'s body with XLA on the ``platform_name`` PJRT client (``"cuda"`` or ``"cpu"``).

    Args:
        fusion: the fusion instruction.
        aliases: output leaf -> operand number that output is computed in place into (donated).
    Returns:
        ``(loaded executable, device)``.
    Raises:
        XlaWrapError: the module cannot be built; jaxlib errors propagate.
    """
    from jax._src import xla_bridge as xb
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib.mlir import ir
    from jaxlib import _hlo as jhlo
    from jaxlib import _jax

    text = standalone_module_text(fusion)
    mod = jhlo.hlo_module_from_text(text)
    bytecode = _jax.mlir.hlo_to_stablehlo(mod.as_serialized_hlo_module_proto())
    body = fusion.fused_computation
    outs = fusion.shape.leaves()

    def layout(s: Any) -> dict:
        # only non-default layouts are pinned (``mhlo.layout_mode``, how jax passes jax.Format layouts)
        m2m = s.minor_to_major()
        if m2m == tuple(range(len(m2m) - 1, -1, -1)):
            return {}
        return {"mhlo.layout_mode": ir.StringAttr.get("{" + ",".join(map(str, m2m)) + "}")}

    with jmlir.make_ir_context():
        m = ir.Module.parse(bytecode)
        main = next(op for op in m.body.operations
                    if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == "main")
        n_results = len(ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value).results)
        if n_results != len(outs):
            raise XlaWrapError(f"main has {n_results} results, the fusion {len(outs)} output leaves")
        donate = {j: k for k, j in aliases.items()}
        i32 = ir.IntegerType.get_signless(32)
        arg_attrs = []
        for j, p in enumerate(body.parameters):
            d = layout(p.shape)
            if j in donate:
                d["tf.aliasing_output"] = ir.IntegerAttr.get(i32, donate[j])
            arg_attrs.append(ir.DictAttr.get(d))
        main.attributes["arg_attrs"] = ir.ArrayAttr.get(arg_attrs)
        main.attributes["res_attrs"] = ir.ArrayAttr.get(
            [ir.DictAttr.get(layout(s)) for s in outs])
        mlir_text = str(m)
    backend = xb.get_backend(platform_name)
    dev = backend.local_devices()[0]
    exe = backend.compile_and_load(mlir_text, _jax.DeviceList((dev,)), _jax.CompileOptions())
    return exe, dev


def to_device(value: Any, shape: Any, dev: Any) -> Any:
    """``value`` (logical numpy) as a jax array on ``dev`` laid out as ``shape``'s layout: a raw PJRT execute
    reinterprets the argument buffer in the layout the executable was compiled for, it does not relayout."""
    import jax
    from jax.experimental.layout import Format, Layout
    from jax.sharding import SingleDeviceSharding

    m2m = tuple(_major_to_minor(shape))
    target = dev if m2m == tuple(range(len(m2m))) else Format(Layout(major_to_minor=m2m), SingleDeviceSharding(dev))
    with jax.enable_x64(True):  # s64/f64 operands stay 64-bit
        return jax.device_put(np.asarray(value), target)


def check_outputs(fusion: Any, outs: list[np.ndarray], ref: Any) -> tuple[bool, float]:
    """(all leaves match the reference, worst max-abs error)."""
    from fusegen.runtime.compare import compare
    from fusegen.runtime.inputs import leaves

    ok, worst = True, 0.0
    refs = leaves(ref)
    shapes = fusion.shape.leaves()
    if len(outs) != len(refs):
        return False, float("inf")
    for s, o, r in zip(shapes, outs, refs):
        o = np.asarray(o).reshape(s.dimensions)
        with np.errstate(all="ignore"):
            c = compare(o, np.asarray(r), s.element_type)
        ok = ok and c.ok
        worst = max(worst, float(c.max_abs_error))
    return ok, worst


def xla_cpu_check(c: Candidate) -> dict:
    """Build XLA's module for ``c`` and run it on jaxlib's CPU client against the evaluator (no GPU needed;
    validates the module wrapping and the inputs the GPU part uses)."""
    from fusegen.evaluator.evaluator import evaluate_instruction

    ops = fusion_inputs(c.fusion)
    ref = evaluate_instruction(c.fusion, ops)
    try:
        exe, dev = compile_xla(c.fusion, c.emitted.output_aliases, "cpu")
        params = c.fusion.fused_computation.parameters
        res = exe.execute([to_device(a, p.shape, dev) for a, p in zip(ops, params)])
    except Exception as e:
        return {"fusion": c.label, "status": "error", "reason": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    ok, err = check_outputs(c.fusion, [np.asarray(r) for r in res], ref)
    return {"fusion": c.label, "status": "ok" if ok else "mismatch", "max_abs_error": err}


# --------------------------------------------------------------------------------------------------
# GPU part
# --------------------------------------------------------------------------------------------------
def gpu_unavailable_reason() -> str | None:
    """Why fusegen's kernels cannot run on a GPU here, or ``None``."""
    try:
        import cupy
    except Exception as e:
        return (f"CuPy is not importable ({type(e).__name__}: {e}); on a CUDA machine install the gpu extra: "
                "pip install -e '.[gpu]'")
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return f"CuPy is installed but cannot reach a CUDA device ({type(e).__name__}: {e})"
    if n < 1:
        return "CuPy is installed but reports no CUDA device"
    try:
        from triton.runtime import driver

        driver.active.get_current_target()
    except Exception as e:
        return f"Triton has no usable CUDA driver ({type(e).__name__}: {e})"
    return None


def xla_gpu_unavailable_reason() -> str | None:
    """Why XLA's kernels cannot run here (jax without its CUDA plugin...), or ``None``."""
    try:
        from jax._src import xla_bridge as xb

        backend = xb.get_backend("cuda")
        if not backend.local_devices():
            return "jax's CUDA backend has no local device"
    except Exception as e:
        import jax

        return (f"jax {jax.__version__} has no CUDA backend ({type(e).__name__}: {str(e).splitlines()[0]}); "
                f"install jax[cuda12]=={jax.__version__} (jax-cuda12-plugin + jax-cuda12-pjrt)")
    return None


class _DevPtr:
    """A buffer as a Triton launch argument: ``data_ptr()`` + the storage numpy dtype (ml_dtypes included)
    that Triton mangles to the kernel's pointer type (``*bf16``, ``*u8``...)."""

    def __init__(self, buf: Any, dtype: np.dtype):
        self.buf = buf
        self.dtype = dtype

    def data_ptr(self) -> int:
        data = getattr(self.buf, "data", None)
        ptr = getattr(data, "ptr", None)  # cupy.ndarray.data is a MemoryPointer
        return int(ptr) if ptr is not None else int(self.buf.ctypes.data)


def _host(buf: Any) -> np.ndarray:
    get = getattr(buf, "get", None)  # cupy: copy to the host
    return get() if callable(get) else np.asarray(buf)


class _Flusher:
    """Writes a ``FLUSH_BYTES`` buffer before every timed run so each starts with a cold L2. A Triton kernel:
    no NVRTC needed, and CUPTI sees it as :data:`FLUSH_KERNEL`, which separates the runs of a trace."""

    def __init__(self) -> None:
        import cupy as cp

        from fusegen.codegen import triton_runtime
        from fusegen.codegen.kernel import KernelSource

        self.fn = triton_runtime.load_kernel(KernelSource(FLUSH_KERNEL, FLUSH_SOURCE, FLUSH_KERNEL, ()))
        self.n = FLUSH_BYTES // 4
        self.buf = cp.zeros(self.n, dtype=np.int32)
        self.block = 4096
        self.grid = ((self.n + self.block - 1) // self.block,)
        self.arg = _DevPtr(self.buf, np.dtype(np.int32))

    def __call__(self) -> None:
        self.fn[self.grid](self.arg, self.n, BLOCK=self.block, num_warps=8)


class FusegenOnDevice:
    """An :class:`~fusegen.codegen.kernel.EmittedFusion` bound to device buffers: physical order, storage
    dtypes, in-place outputs starting as a copy of their operand, as
    :func:`fusegen.codegen.triton_runtime.run_fusion` lays them out on the host.

    Args:
        emitted, fusion: the emitted kernels and their fusion instruction.
        ops: logical operand values (numpy).
        xp: the array module of the buffers: ``cupy`` (default) for the GPU; ``numpy`` with ``interpret=True``
            runs the same binding through Triton's interpreter (how the tests check it without a GPU).
    """

    def __init__(self, emitted: Any, fusion: Any, ops: list[Any], xp: Any = None, interpret: bool = False):
        from fusegen.codegen import triton_runtime as tr
        from fusegen.codegen.kernel import constant_buffer
        from fusegen.hlo import dtypes
        from fusegen.hlo.layout_util import to_physical
        from fusegen.runtime.inputs import leaves

        if xp is None:
            import cupy as xp
        self.xp, self.interpret = xp, interpret
        self.emitted, self.fusion = emitted, fusion
        op_shapes = [o.shape for o in fusion.operands]
        self.out_shapes = fusion.shape.leaves()

        def upload(host: np.ndarray) -> tuple[Any, np.dtype]:
            host = np.ascontiguousarray(host).reshape(-1)
            # raw bytes on the device: CuPy has no bf16/fp8 dtypes; the pointer's dtype goes with _DevPtr
            return xp.array(host.view(np.uint8)), host.dtype

        phys: dict[tuple[int, int | None], tuple[Any, np.dtype]] = {}

        def operand(i: int, leaf: int | None = None) -> tuple[Any, np.dtype]:
            if (i, leaf) not in phys:
                s, v = op_shapes[i], ops[i]
                if leaf is not None:
                    s, v = s.leaves()[leaf], leaves(v)[leaf]
                phys[(i, leaf)] = upload(tr.to_storage(to_physical(np.asarray(v), s), s.element_type))
            return phys[(i, leaf)]

        self.outs: list[tuple[Any, np.dtype]] = []
        for k, s in enumerate(self.out_shapes):
            if k in emitted.output_aliases:
                buf, dt = operand(emitted.output_aliases[k])
                self.outs.append((buf.copy(), dt))
            else:
                # the storage layout decides the size (complex leaves are stored as float pairs)
                z = tr.to_storage(np.zeros(s.numel, dtypes.numpy_dtype(s.element_type)), s.element_type)
                self.outs.append((xp.zeros(z.nbytes, dtype=np.uint8), z.dtype))
        self.copies = [(self.outs[leaf][0], operand(op)[0]) for op, leaf in emitted.copies]
        self.launches: list[tuple[Any, tuple[int, ...], list[_DevPtr], Any]] = []
        scratch: dict[int, tuple[Any, np.dtype]] = {}  # one buffer per index, shared by all the kernels
        for ks in emitted.kernels:
            args = []
            for p in ks.params:
                if p.kind == "operand":
                    buf, dt = operand(p.index)
                elif p.kind == "operand_leaf":
                    buf, dt = operand(p.index, int(p.value))
                elif p.kind == "output":
                    buf, dt = self.outs[p.index]
                elif p.kind == "constant":
                    buf, dt = upload(tr.to_storage(constant_buffer(np.asarray(p.value), p.shape),
                                                   p.shape.element_type))
                elif p.kind == "scratch":
                    if p.index not in scratch:
                        dt = tr.to_storage(np.zeros(1, dtypes.numpy_dtype(p.shape.element_type)),
                                           p.shape.element_type).dtype
                        scratch[p.index] = (xp.zeros(p.shape.numel * dt.itemsize, dtype=np.uint8), dt)
                    buf, dt = scratch[p.index]
                else:
                    raise ValueError(f"kernel {ks.name}: unknown parameter kind {p.kind!r}")
                args.append(_DevPtr(buf, dt))
            fn = None if interpret else tr.load_kernel(ks)
            self.launches.append((fn, tuple(ks.launch.grid), args, ks))

    def run(self) -> None:
        """Copies, then every kernel in order (asynchronous on the GPU: the legacy default stream)."""
        from fusegen.codegen import triton_runtime as tr

        for dst, src in self.copies:
            if self.interpret:
                dst[...] = src
            else:
                rt = self.xp.cuda.runtime
                rt.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, rt.memcpyDeviceToDevice, 0)
        for fn, grid, args, ks in self.launches:
            for scalars in ks.launch_args:  # several launches of one kernel (multi-launch sorts)
                if self.interpret:
                    tr.run_interpreted(ks, [a.buf.view(a.dtype) for a in args], scalars=scalars, max_programs=16)
                else:
                    fn[grid](*args, *scalars, num_warps=ks.launch.num_warps, num_stages=ks.num_stages,
                             **tr.launch_options(ks), **ks.constexprs)

    def outputs(self) -> list[np.ndarray]:
        """The output leaves as logical host arrays."""
        from fusegen.codegen import triton_runtime as tr
        from fusegen.hlo.layout_util import from_physical

        return [from_physical(tr.from_storage(_host(buf).view(dt), s.element_type), s)
                for (buf, dt), s in zip(self.outs, self.out_shapes)]


def _events_time_us(run: Any, flush: _Flusher, runs: int) -> float:
    """Median CUDA-event time of ``run`` (legacy default stream), an L2 flush before each. The flush is
    queued first, so the GPU is busy while the host issues the start event and the launches."""
    import cupy as cp

    samples = []
    for _ in range(runs):
        flush()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        run()
        stop.record()
        stop.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, stop) * 1e3)
    return float(statistics.median(samples))


def trace_segments(data: Any) -> list[tuple[float, int]]:
    """Per run of a profiler trace: (device microseconds from its first kernel's start to its last one's
    end, number of kernels). Runs are what follows each :data:`FLUSH_KERNEL`; host-to-device copies are left
    out. ``data`` is a ``jax.profiler.ProfileData``; ``[]`` when it has no GPU plane.
    """
    events = []
    for plane in data.planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        for line in plane.lines:
            if "stream" not in line.name.lower():
                continue  # derived lines (XLA Ops, XLA Modules...) repeat the stream events
            for ev in line.events:
                events.append((float(ev.start_ns), float(ev.start_ns) + float(ev.duration_ns), ev.name))
    events.sort()
    segments: list[list[tuple[float, float, str]]] = []
    for ev in events:
        if FLUSH_KERNEL in ev[2]:
            segments.append([])
        elif segments and "memcpyh" not in ev[2].lower().replace(" ", ""):
            segments[-1].append(ev)
    return [((max(e[1] for e in s) - min(e[0] for e in s)) / 1e3, len(s)) for s in segments if s]


class _Cupti:
    """A jax profiler (CUPTI on the GPU) session; :meth:`segments` reads the trace back."""

    def __enter__(self) -> "_Cupti":
        from jax._src.lib import _profiler

        self.session = _profiler.ProfilerSession(_profiler.ProfileOptions())
        return self

    def __exit__(self, *exc: Any) -> None:
        self.xspace = self.session.stop()

    def segments(self) -> list[tuple[float, int]]:
        from jax.profiler import ProfileData

        return trace_segments(ProfileData.from_serialized_xspace(self.xspace))


@attrs.define
class GpuResult:
    """One fusion on the GPU. Times in microseconds, bandwidth in GB/s (1e9 bytes/s); ``ratio`` is fusegen /
    XLA bandwidth (>1: fusegen faster), from the like-for-like pair (both CUPTI, or events vs wall)."""

    fusion: str
    kind: str
    emitter: str
    bytes: int
    fusegen_ok: bool | None = None
    fusegen_events_us: float | None = None
    fusegen_cupti_us: float | None = None
    xla_ok: bool | None = None
    xla_us: float | None = None
    xla_method: str = "-"
    xla_kernels: int | None = None
    fusegen_gbps: float | None = None
    xla_gbps: float | None = None
    ratio: float | None = None
    note: str = ""


def _xla_prepare(c: Candidate, ops: list[Any], ref: Any, warmup: int,
                 platform_name: str = "cuda") -> tuple[Any, Any, bool, str]:
    """Compile XLA's kernel for ``c`` and run it once; returns (executable, fresh-arguments function, output
    matches the evaluator, note). An in-place output is donated; if that fails, XLA gets it without the alias
    (it then copies the operand, and the note says so)."""
    import jax

    params = c.fusion.fused_computation.parameters
    note = ""
    aliases = dict(c.emitted.output_aliases)
    while True:
        try:
            exe, dev = compile_xla(c.fusion, aliases, platform_name)
            donated = set(aliases.values())
            shared = [to_device(a, p.shape, dev) for a, p in zip(ops, params)]

            def fresh() -> list[Any]:
                # a donated (in-place) operand is consumed by the run: every run gets its own copy
                return [to_device(ops[j], params[j].shape, dev) if j in donated else a
                        for j, a in enumerate(shared)]

            out = exe.execute(fresh())
            break
        except Exception as e:
            if not aliases:
                raise
            note = f"XLA without donation (copies the operand): {type(e).__name__}: {e}".splitlines()[0][:200]
            aliases = {}
    ok, _ = check_outputs(c.fusion, [np.asarray(o) for o in out], ref)
    for _ in range(warmup):
        jax.block_until_ready(exe.execute(fresh()))
    return exe, fresh, ok, note


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


def gpu_one(c: Candidate, flush: _Flusher, runs: int, warmup: int, xla_reason: str | None) -> GpuResult:
    """Time ``c`` on the GPU with fusegen's kernels and with XLA's (see the module docstring)."""
    import cupy as cp

    from fusegen.evaluator.evaluator import evaluate_instruction

    res = GpuResult(c.label, c.kind, c.emitter, fusion_bytes(c))
    ops = fusion_inputs(c.fusion)
    ref = evaluate_instruction(c.fusion, ops)
    fg = FusegenOnDevice(c.emitted, c.fusion, ops)
    fg.run()  # the first launch compiles for this device
    cp.cuda.Device().synchronize()
    res.fusegen_ok, _ = check_outputs(c.fusion, fg.outputs(), ref)
    for _ in range(warmup):
        fg.run()
    res.fusegen_events_us = _events_time_us(fg.run, flush, runs)

    xla = None
    if xla_reason is not None:
        res.note = "XLA skipped (see below)"
    else:
        try:
            exe, fresh, res.xla_ok, res.note = _xla_prepare(c, ops, ref, warmup)
            xla = (exe, fresh)
        except Exception as e:
            res.note = f"XLA: {type(e).__name__}: {e}".splitlines()[0][:300]
    if xla is not None:
        import jax

        exe, fresh = xla
        # one profiler session: fusegen's runs, then XLA's, each after a flush
        try:
            xla_args = [fresh() for _ in range(runs)]  # donated copies made before the trace
            cp.cuda.Device().synchronize()
            with _Cupti() as prof:
                for _ in range(runs):
                    flush()
                    fg.run()
                cp.cuda.Device().synchronize()
                for a in xla_args:
                    flush()
                    cp.cuda.Device().synchronize()  # XLA runs on its own stream: order it after the flush
                    jax.block_until_ready(exe.execute(a))
            segs = prof.segments()
            if len(segs) == 2 * runs:
                res.fusegen_cupti_us = float(statistics.median(s[0] for s in segs[:runs]))
                res.xla_us = float(statistics.median(s[0] for s in segs[runs:]))
                res.xla_kernels = int(statistics.median(s[1] for s in segs[runs:]))
                res.xla_method = "cupti"
            else:
                res.note = _join(res.note, f"CUPTI trace has {len(segs)} runs, expected {2 * runs}; "
                                           "XLA timed by wall clock")
        except Exception as e:
            res.note = _join(res.note, f"CUPTI: {type(e).__name__}: {e}".splitlines()[0][:200]
                             + "; XLA timed by wall clock")
        if res.xla_us is None:
            samples = []
            for _ in range(runs):
                a = fresh()
                jax.block_until_ready(a)
                flush()
                cp.cuda.Device().synchronize()
                t0 = time.perf_counter()
                jax.block_until_ready(exe.execute(a))
                samples.append((time.perf_counter() - t0) * 1e6)
            res.xla_us = float(statistics.median(samples))
            res.xla_method = "wall (overestimates XLA)"
    fg_us = res.fusegen_cupti_us if res.xla_method == "cupti" else res.fusegen_events_us
    if fg_us:
        res.fusegen_gbps = res.bytes / (fg_us * 1e-6) / 1e9
    if res.xla_us:
        res.xla_gbps = res.bytes / (res.xla_us * 1e-6) / 1e9
    if res.fusegen_gbps and res.xla_gbps:
        res.ratio = res.fusegen_gbps / res.xla_gbps
    return res


def summarize_gpu(selected: dict[tuple[str, str], list[Candidate]], results: list[GpuResult]) -> list[dict]:
    """Per emitter row: correct runs, median bandwidths, median and geometric-mean ratio."""
    rows = []
    for kind, emitter in selected:
        rs = [r for r in results if (r.kind, r.emitter) == (kind, emitter)]
        if not rs:
            continue
        ratios = [r.ratio for r in rs if r.ratio]
        fg = [r.fusegen_gbps for r in rs if r.fusegen_gbps]
        xl = [r.xla_gbps for r in rs if r.xla_gbps]
        rows.append({"kind": kind, "emitter": emitter, "fusions": len(rs),
                     "fusegen_ok": sum(1 for r in rs if r.fusegen_ok), "xla_ok": sum(1 for r in rs if r.xla_ok),
                     "fusegen_gbps_median": statistics.median(fg) if fg else None,
                     "xla_gbps_median": statistics.median(xl) if xl else None,
                     "ratio_median": statistics.median(ratios) if ratios else None,
                     "ratio_geomean": float(np.exp(np.mean(np.log(ratios)))) if ratios else None})
    return rows


def run_gpu(selected: dict[tuple[str, str], list[Candidate]], runs: int, warmup: int, budget_s: float,
            on_result: Any = None) -> dict:
    """The GPU part over ``selected``; returns ``{"skipped": reason}`` when it cannot run here."""
    why = gpu_unavailable_reason()
    if why:
        return {"skipped": why}
    import cupy as cp

    xla_reason = xla_gpu_unavailable_reason()
    dev = cp.cuda.Device()
    name = cp.cuda.runtime.getDeviceProperties(dev.id)["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    flush = _Flusher()
    flush()
    dev.synchronize()
    t0 = time.perf_counter()
    results: list[GpuResult] = []
    over_budget: list[str] = []
    for cands in selected.values():
        for c in cands:
            if time.perf_counter() - t0 > budget_s:
                over_budget.append(c.label)
                continue
            try:
                r = gpu_one(c, flush, runs, warmup, xla_reason)
            except Exception as e:
                r = GpuResult(c.label, c.kind, c.emitter, fusion_bytes(c),
                              note=f"fusegen: {type(e).__name__}: {e}".splitlines()[0][:300])
            results.append(r)
            if on_result is not None:
                on_result(r)
    return {"device": name, "xla_skipped": xla_reason, "runs": runs, "warmup": warmup,
            "flush_bytes": FLUSH_BYTES, "seconds": time.perf_counter() - t0, "budget_skipped": over_budget,
            "rows": summarize_gpu(selected, results), "fusions": [attrs.asdict(r) for r in results]}


# --------------------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------------------
def _fmt(v: Any, spec: str, none: str = "-") -> str:
    return none if v is None else format(v, spec)


def print_cpu_table(console: Any, rows: list[dict], title: str) -> None:
    from rich.table import Table

    t = Table(title=title)
    for col, just in [("kind", "left"), ("emitter", "left"), ("fusions", "right"), ("kernels", "right"),
                      ("median s", "right"), ("max s", "right"), ("PTX KB", "right"), ("smem B", "right"),
                      ("warps", "right"), ("emit ms", "right")]:
        t.add_column(col, justify=just)
    for r in rows:
        if not r["fusions"]:
            t.add_row(r["kind"], r["emitter"], "0", "-", "-", "-", "-", "-", "-", "-")
            continue
        if "compile_s_median" not in r:
            t.add_row(r["kind"], r["emitter"], str(r["fusions"]), str(r["kernels"]), "failed", "", "", "", "", "")
            continue
        fails = f" ({r['failed']} failed)" if r["failed"] else ""
        t.add_row(r["kind"], r["emitter"], f"{r['fusions']}{fails}", str(r["kernels"]),
                  f"{r['compile_s_median']:.2f}", f"{r['compile_s_max']:.2f}", f"{r['ptx_bytes_median'] / 1024:.1f}",
                  str(r["shared_bytes_max"]), ",".join(map(str, r["num_warps"])), f"{r['emit_ms_median']:.1f}")
    console.print(t)


def print_gpu_tables(console: Any, gpu: dict) -> None:
    from rich.table import Table
    from rich.text import Text  # labels and notes hold HLO shapes: no markup

    t = Table(title=f"achieved bandwidth on {gpu['device']}: fusegen vs XLA (median of {gpu['runs']}, L2 flushed)")
    for col in ["fusion", "emitter", "MB", "ok fg/xla", "fusegen GB/s", "XLA GB/s", "ratio", "XLA timing", "note"]:
        t.add_column(col, justify="left" if col in ("fusion", "emitter", "note", "XLA timing") else "right")
    for r in gpu["fusions"]:
        ok = f"{'-' if r['fusegen_ok'] is None else 'y' if r['fusegen_ok'] else 'N'}/" \
             f"{'-' if r['xla_ok'] is None else 'y' if r['xla_ok'] else 'N'}"
        t.add_row(Text(r["fusion"][-48:]), r["emitter"], f"{r['bytes'] / 1e6:.2f}", ok,
                  _fmt(r["fusegen_gbps"], ".0f"), _fmt(r["xla_gbps"], ".0f"), _fmt(r["ratio"], ".2f"),
                  r["xla_method"], Text(r["note"][:60]))
    console.print(t)
    t = Table(title="per emitter: fusegen / XLA bandwidth")
    for col in ["kind", "emitter", "fusions", "ok fg/xla", "fusegen GB/s", "XLA GB/s", "ratio median", "ratio geomean"]:
        t.add_column(col, justify="left" if col in ("kind", "emitter") else "right")
    for r in gpu["rows"]:
        t.add_row(r["kind"], r["emitter"], str(r["fusions"]), f"{r['fusegen_ok']}/{r['xla_ok']}",
                  _fmt(r["fusegen_gbps_median"], ".0f"), _fmt(r["xla_gbps_median"], ".0f"),
                  _fmt(r["ratio_median"], ".2f"), _fmt(r["ratio_geomean"], ".2f"))
    console.print(t)
    if gpu.get("xla_skipped"):
        console.print(f"XLA side skipped: {gpu['xla_skipped']}", markup=False)
    if gpu.get("budget_skipped"):
        console.print(f"{len(gpu['budget_skipped'])} fusions not timed (over --gpu-budget-s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--quick", action="store_true", help="2 fusions per emitter (about 30 s on 2 cores)")
    ap.add_argument("--per-kind", type=int, default=None, help="fusions per emitter row (default 5, --quick 2)")
    ap.add_argument("--json", metavar="FILE", help="write all numbers as JSON")
    ap.add_argument("--gpu", action="store_true", help="also time the kernels on the GPU against XLA's")
    ap.add_argument("--gpu-per-kind", type=int, default=3, help="fusions per emitter row on the GPU (default 3)")
    ap.add_argument("--runs", type=int, default=20, help="timed runs per fusion on the GPU (median)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs before timing")
    ap.add_argument("--gpu-budget-s", type=float, default=180.0,
                    help="stop starting GPU measurements after this many seconds (default 180)")
    ap.add_argument("--xla-cpu-check", action="store_true",
                    help="run each selected fusion's XLA module on jaxlib's CPU client against the evaluator "
                         "(checks the GPU part's module wrapping without a GPU)")
    a = ap.parse_args(argv)
    per_kind = a.per_kind if a.per_kind is not None else (2 if a.quick else 5)
    if a.gpu:  # before any jax backend starts: XLA must not take 75% of the device from CuPy
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

    from rich.console import Console

    console = Console(width=160)
    if not CORPUS.exists():
        console.print(f"shared corpus not found at {CORPUS}; nothing to benchmark")
        return 1
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fusegen-bench-") as tmp:
        tmpdir = Path(tmp)
        # generated kernel modules and Triton's cache both start empty
        os.environ["FUSEGEN_KERNEL_DIR"] = str(tmpdir / "kernels")
        os.environ["TRITON_CACHE_DIR"] = str(tmpdir / "triton-init")
        os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
        import triton

        groups, problems = collect_candidates()
        order = ROWS + sorted(k for k in groups if k not in ROWS)
        selected = {k: select(groups.get(k, []), per_kind, a.quick) for k in order}
        # what runs (GPU part, XLA CPU check): the same spread over the fusions small enough to evaluate
        run_selected = {k: select([c for c in groups.get(k, []) if runnable(c)], a.gpu_per_kind) for k in order}
        report: dict[str, Any] = {
            "target": "sm_90 (GPUTarget('cuda', 90, 32))", "triton": triton.__version__,
            "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "per_kind": per_kind, "quick": a.quick,
            "corpus_fusions_with_kernels": {f"{k[0]}/{k[1]}": len(v) for k, v in groups.items()},
            "problems": problems,
        }
        rows = run_cpu(selected, tmpdir / "triton")
        report["cpu"] = {"rows": rows}
        print_cpu_table(console, rows, f"cold sm_90 compile per emitter (Triton {triton.__version__}, "
                                       f"{os.cpu_count()} CPUs, up to {per_kind} corpus fusions each)")
        missing = [f"{k}/{e}" for (k, e), cs in selected.items() if not cs]
        if missing:
            console.print("no corpus fusion reaches: " + ", ".join(missing), markup=False)
        for r in rows:
            for d in r["detail"]:
                if d["error"]:
                    console.print(f"sm_90 compile failed: {d['label']}: {d['error'][:200]}", markup=False)
        if a.xla_cpu_check:
            checks = [xla_cpu_check(c) for cs in run_selected.values() for c in cs]
            report["xla_cpu_check"] = checks
            bad = [x for x in checks if x["status"] != "ok"]
            console.print(f"XLA modules on jaxlib's CPU client: {len(checks) - len(bad)}/{len(checks)} match "
                          "the evaluator")
            for x in bad:
                console.print(f"  {x['fusion']}: {x['status']} {x.get('reason', x.get('max_abs_error', ''))}",
                              markup=False)
        if a.gpu:
            os.environ["TRITON_CACHE_DIR"] = str(tmpdir / "triton-gpu")
            def progress(r: GpuResult) -> None:
                print(f"  gpu: {r.fusion}: fusegen {_fmt(r.fusegen_gbps, '.0f')} GB/s, XLA {_fmt(r.xla_gbps, '.0f')} "
                      f"GB/s ({r.xla_method}) {r.note}", file=sys.stderr, flush=True)

            gpu = run_gpu(run_selected, a.runs, a.warmup, a.gpu_budget_s, on_result=progress)
            report["gpu"] = gpu
            if "skipped" in gpu:
                console.print(f"GPU part skipped: {gpu['skipped']}", markup=False)
            else:
                print_gpu_tables(console, gpu)
        else:
            report["gpu"] = {"skipped": "not requested (--gpu)"}
    report["seconds"] = time.perf_counter() - t_start
    console.print(f"total {report['seconds']:.1f} s")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(report, indent=2, default=str))
        console.print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
