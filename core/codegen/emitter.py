"""The emitter interface every fusion emitter plugin implements.

Mirrors XLA's ``FusionInterface`` / ``KernelFusionInterface`` (``xla/backends/gpu/codegen/fusion_emitter.h``):
an emitter is built for one analysed fusion and produces its kernels (:class:`EmittedFusion`) and launch
dimensions. Kernel arguments are 1-D buffers in *physical* order (:mod:`fusegen.hlo.layout_util`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from fusegen.codegen.emitter_unsupported import EmitterUnsupported
from fusegen.codegen.kernel import EmittedFusion, LaunchDimensions
from fusegen.hlo.ir import Computation, Instruction, Shape
from fusegen.codegen.kernel import KernelSource

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.codegen.launch import LoopGeometry


class FusionEmitter:
    """Base class of fusion emitters.

    Subclasses set :attr:`name` (the XLA class name, ``LoopFusion``...) and implement :meth:`emit`.

    Args:
        analysis: the fusion's :class:`~fusegen.analysis.fusion_analysis.FusionAnalysis` (anything with
            ``.fusion``, the fusion instruction, and ``.computation``, its fused body).
    """

    name: ClassVar[str] = "FusionEmitter"

    def __init__(self, analysis: "FusionAnalysis | Any"):
        self.analysis = analysis

    @property
    def fusion(self) -> Instruction:
        return self.analysis.fusion

    @property
    def computation(self) -> Computation:
        comp = getattr(self.analysis, "computation", None)
        return comp if comp is not None else self.analysis.fusion.fused_computation

    def emit(self) -> EmittedFusion:
        """Generate the fusion's kernels.

        Raises:
            EmitterUnsupported: the fusion uses something this emitter cannot generate.
        """
        raise NotImplementedError

    def launch_dimensions(self) -> LaunchDimensions | None:
        """Launch dimensions of the (first) kernel, ``None`` for kernel-less fusions."""
        return self.emit().launch


def fusion_roots(comp: Computation) -> list[Instruction]:
    """The output-defining instructions of a fused computation: the tuple's operands, else the root.

    Mirrors ``HloFusionAdaptor::GetRoots`` for the (non-nested) tuple outputs fusegen supports.

    Raises:
        EmitterUnsupported: nested tuple outputs.
    """
    root = comp.root
    if root is None:
        raise EmitterUnsupported("", comp.name, "fused computation has no root")
    if root.opcode == "tuple":
        for o in root.operands:
            if o.shape.is_tuple:
                raise EmitterUnsupported("tuple", root.name, "nested tuple outputs are not supported")
        return list(root.operands)
    if root.shape.is_tuple:
        # e.g. a variadic reduce as root: its leaves are the outputs
        return [root]
    return [root]


def choose_block(n: int) -> tuple[int, int]:
    """``(BLOCK, num_warps)`` of a linear-index kernel over ``n`` elements.

    XLA's loop emitter uses 128-thread blocks with up to 4-wide vectorisation; fusegen's programs are
    Triton blocks of up to 1024 elements (4 warps, 8 elements per thread), smaller for small outputs.
    """
    b = 1024
    while b > 32 and b // 2 >= n:
        b //= 2
    return b, max(1, min(4, b // 256))


def build_linear_kernel(emitter: FusionEmitter, kernel_name: str, n_total: int,
                        body: "Any", extra_shapes: "list[Shape] | None" = None,
                        geometry: "LoopGeometry | None" = None) -> "KernelSource":
    """A kernel over the linear index ``[0, n_total)``, one program per XLA block.

    With ``geometry`` (XLA's loop launch, :mod:`fusegen.codegen.launch`) a program covers one block of
    ``threads x unroll`` consecutive elements with ``num_warps = threads / 32`` warps, on XLA's grid;
    without it, Triton-style blocks of up to 1024 elements (:func:`choose_block`). The interpreter runs
    an equivalent variant with fewer, wider programs. The prologue defines ``lin`` (this lane's linear
    index), ``mask = lin < N``, ``lin_c`` (``lin`` clamped into range, so tail lanes compute valid indices)
    and ``zero``; ``body(gen, "lin_c")`` emits the values and stores with the
    :class:`~fusegen.codegen.elemental.ElementalGenerator` ``gen``.
    Mirrors the loop emitter's entry function (``emitters/loop.cc``: ``EmitEntryFunction``).
    """
    from fusegen.codegen import triton_source as ts
    from fusegen.codegen.elemental import ElementalGenerator, KernelContext, choose_index_dtype, deep_recursion
    from fusegen.codegen.kernel import KernelSource

    fusion = emitter.fusion
    op_shapes = [o.shape for o in fusion.operands]
    if geometry is not None:
        block = 1 << max(0, geometry.elements_per_block - 1).bit_length()
        launch = geometry.launch()
        gx, gy = geometry.blocks
    else:
        block, warps = choose_block(n_total)
        gx, gy = max(1, -(-n_total // block)), 1
        launch = LaunchDimensions(grid=(gx,), num_warps=warps)
    idx_t = choose_index_dtype(op_shapes + [fusion.shape] + list(extra_shapes or []), max(block, 4096))
    ctx = KernelContext(idx_t, op_shapes)
    pid = "tl.program_id(0)" if gy == 1 else f"(tl.program_id(1) * {gx} + tl.program_id(0))"
    if idx_t == "tl.int64":
        pid = f"{pid}.to(tl.int64)"
    if geometry is not None:
        ctx.runs = thread_runs(block, launch.num_warps, op_shapes + [fusion.shape] + list(extra_shapes or []))
        if ctx.runs is not None and n_total % ctx.runs.width == 0:
            ctx.runs = attrs.evolve(ctx.runs, whole=True)
    gen = ElementalGenerator(ctx, emitter.computation)
    with deep_recursion():
        body(gen, "lin_c")
    # lin_c keeps lin's contiguity and alignment for Triton's axis analysis (the clamp only changes masked
    # tail lanes), so reads at the element's own position vectorise like XLA's unrolled loads
    # one program (N <= BLOCK) is lane-indexed alone: the program id's term costs a single-element kernel 5 of
    # its 14 registers at sm_90 (XLA's one-thread kernel: 10); the test is a constexpr, so wider variants agree
    prologue = [*ts.constexpr_branches("N <= BLOCK", ["lin = tl.arange(0, BLOCK)"],
                                       [f"lin = {pid} * BLOCK + tl.arange(0, BLOCK)"]), "mask = lin < N",
                f"zero = tl.full([BLOCK], 0, {idx_t})",
                "lin_c = tl.max_contiguous(tl.multiple_of(tl.minimum(lin, N - 1), BLOCK), BLOCK)"]
    if n_total % block == 0 and gx * gy == n_total // block and block > 32 * launch.num_warps:
        # the grid covers N exactly (XLA's launch): no lane is past the end, so the index is not clamped and the
        # lanes a thread holds stay consecutive for LLVM (one base address, immediate offsets: x[:, ::2]'s four
        # loads). A constexpr test: the interpreter's wider variant (same source, BLOCK 4096) keeps the clamp
        # where its last program overhangs. One lane a thread keeps the clamp (ptxas schedules it tighter).
        # The per-run index (lin_q) drops its clamp on the same test
        exact = ["lin_c = tl.max_contiguous(tl.multiple_of(lin, BLOCK), BLOCK)"]
        at = next(k for k, ln in enumerate(prologue) if ln.startswith("lin_c = "))  # the clamped index, last
        tail = [prologue[at]]
        if ctx.runs is not None:
            exact.append(ctx.runs.prologue(pid, clamp=False))
            tail.append(ctx.runs.prologue(pid))
        prologue[at:] = ts.constexpr_branches("N % BLOCK == 0", exact, tail)
    elif ctx.runs is not None:
        prologue.append(ctx.runs.prologue(pid))
    entry = ts.sanitize_identifier(kernel_name, "k")
    source = ctx.render(entry, ["BLOCK", "N"], prologue)
    variant = None
    wide = 4096
    if gy == 1 and n_total > block and block < wide:
        # same source, wider programs: the interpreter's cost is per program
        variant = KernelSource(name=entry, source=source, entry=entry, params=tuple(ctx.params),
                               constexprs={"BLOCK": wide, "N": n_total},
                               launch=LaunchDimensions(grid=(-(-n_total // wide),), num_warps=4), num_stages=1)
    return KernelSource(name=entry, source=source, entry=entry, params=tuple(ctx.params),
                        constexprs={"BLOCK": block, "N": n_total}, launch=launch, num_stages=1,
                        interpret_variant=variant)


def thread_runs(block: int, num_warps: int, shapes: "list[Shape]") -> "Any":
    """The :class:`~fusegen.codegen.elemental.uniform_runs.UniformRuns` of a ``[BLOCK]`` linear-index program
    of ``num_warps`` warps (each thread ``block / (32 * num_warps)`` consecutive lanes), or ``None`` when a thread
    holds one lane, or some buffer of ``shapes`` is too wide for a thread's run to be one 16-byte access (then
    Triton's layout splits the run over several vectors, and a run-wide broadcast would need a layout change)."""
    from fusegen.codegen import triton_source as ts
    from fusegen.codegen.elemental.uniform_runs import UniformRuns
    from fusegen.hlo import dtypes

    width = block // (32 * num_warps)
    if width <= 1 or block % (32 * num_warps):
        return None
    for s in shapes:
        for leaf in s.leaves():
            if leaf.is_array and leaf.element_type != "token":
                et = leaf.element_type
                bits = 8 if ts.storage_type(et) in ("u8", "i8") else dtypes.bit_width(et)
                if bits * width > 128:
                    return None
    return UniformRuns(base="lin_c", width=width, coarse_base="lin_q", coarse_shape=f"[BLOCK // {width}]")


def store_line(gen: "Any", ptr: str, offset: "int | str", value: str, element_type: str, mask: str) -> None:
    """Append ``tl.store`` of ``value`` (converted to the buffer's storage type) at ``ptr + offset``.

    A complex value (:class:`fusegen.codegen.elemental.Cx`) is stored as its two parts at ``2 * offset``
    and ``2 * offset + 1`` (the buffer holds interleaved parts).
    """
    off = gen.itensor(offset)
    if isinstance(value, tuple):
        o2 = gen.ctx.emit(f"{off} * 2", "off")
        gen.ctx.body.line(f"tl.store({ptr} + {o2}, {value[0]}, mask={mask})")
        gen.ctx.body.line(f"tl.store({ptr} + {o2} + 1, {value[1]}, mask={mask})")
        return
    if element_type == "pred":
        value = gen.ctx.emit(f"{value}.to(tl.uint8)", "st")
    gen.ctx.body.line(f"tl.store({ptr} + {off}, {value}, mask={mask})")
