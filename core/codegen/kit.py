"""The emitter author's kit: everything a plugin emitter needs to generate a Triton kernel from indexing maps.

One import for a third-party emitter (``from fusegen.codegen import kit``); every name here is public and
stable, re-exported from where it lives (those modules' imports keep working):

* **The emitter interface**: :class:`FusionEmitter` (subclass it, set ``name``, implement ``emit()``),
  :class:`EmitterUnsupported` (a documented decline), :class:`EmittedFusion`, :class:`KernelSource`,
  :class:`KernelParam`, :class:`LaunchDimensions`, :func:`fusion_roots`, :func:`choose_block`.
* **The linear kernel builder**: :func:`build_linear_kernel` writes a kernel over the linear index
  ``[0, n)``, one program per block, and calls ``body(gen, "lin_c")`` with an :class:`ElementalGenerator`
  ``gen`` (``gen.ctx`` is its :class:`KernelContext`). In the body:

  - :func:`logical_index` / :func:`physical_offset` (``gen.delinearize`` / ``gen.linearize``): physical
    linear position <-> logical index tuple of a shape, in the shape's minor-to-major layout. An index tuple
    holds one entry per dimension: an ``int`` (known now, e.g. a size-1 dimension) or the name of a
    ``[BLOCK]`` index tensor of the kernel;
  - :func:`apply_indexing_map` / :func:`index_expr`: an :class:`~fusegen.indexing.IndexingMap` (or one
    :class:`~fusegen.indexing.AffineExpr`) evaluated at such a tuple, as Triton index arithmetic;
  - ``gen.value(inst, idx)``: the value of an instruction of the fused computation at a logical index
    (parameters are loaded at their physical offset; everything else is generated elementally);
    :func:`fused_parameter` finds the fused computation's ``parameter(k)``;
  - ``gen.ctx.param(kind, index, shape, hint)``: the kernel argument for a buffer (``"output"``, leaf
    ``index`` of the fusion's outputs; ``"operand"``, fusion operand ``index``), its name in the source;
  - :func:`store_line`: ``tl.store`` of a value at ``ptr + offset`` (pred as u8, complex as two parts),
    masked with ``gen.ctx.mask`` (``lin < N``) or a mask of your own (``gen.ctx.emit(expr, hint)``).

* **The indexing protocol** ``explain --indexing`` asks an emitter: ``thread_id_to_output_indexing(root)``
  and ``thread_id_to_input_indexing(root, hero_operand)`` return :class:`~fusegen.indexing.IndexingMap` from
  the launch ids ``(th_x, th_y, th_z, bl_x, bl_y, bl_z)`` (and per-thread symbols) to the element written /
  read, or ``None`` (``fusegen report`` shows them on the fusion's card too); ``launch_dimensions()`` the launch
  (shown by ``run``, ``explain`` and the report).
  :class:`LinearKernelIndexing` implements all three for an emitter whose kernel is
  :func:`build_linear_kernel` without a geometry; :func:`default_thread_id_indexing_map`,
  :func:`compose_with_operand`, :func:`delinearize_in_bounds`, :func:`grid_dims` and :func:`named` build
  maps for other launches.

Mirrors XLA's emitter toolbox: ``KernelFusionInterface`` (``xla/backends/gpu/codegen/fusion_emitter.h``),
``ApplyIndexing`` / ``ProvideParameter`` (``xla/codegen/emitters/elemental_hlo_to_mlir.cc``) and
``GetDefaultThreadIdIndexingMap`` (``fusion_emitter.cc``). docs/plugins.md ("An emitter on indexing maps")
walks through an emitter built on it.
"""

from __future__ import annotations

from fusegen.codegen.elemental import ElementalGenerator, KernelContext
from fusegen.codegen.emitter import (EmitterUnsupported, FusionEmitter, build_linear_kernel, choose_block,
                                     fusion_roots, store_line)
from fusegen.codegen.kernel import EmittedFusion, KernelParam, KernelSource, LaunchDimensions
from fusegen.codegen.thread_indexing import (compose_with_operand, default_thread_id_indexing_map,
                                             delinearize_in_bounds, grid_dims, named)
from fusegen.hlo.ir import Instruction, Shape
from fusegen.indexing import AffineExpr, IndexingMap, dim, sym

Index = tuple  # of int | str: one entry per dimension (an int known now, or an index tensor's name)

__all__ = [
    "EmittedFusion", "EmitterUnsupported", "ElementalGenerator", "FusionEmitter", "Index", "KernelContext",
    "KernelParam", "KernelSource", "LaunchDimensions", "LinearKernelIndexing", "apply_indexing_map",
    "build_linear_kernel", "choose_block", "compose_with_operand", "default_thread_id_indexing_map",
    "delinearize_in_bounds", "fused_parameter", "fusion_roots", "grid_dims", "index_expr", "logical_index",
    "named", "physical_offset", "store_line",
]


class _Where:
    """What an :class:`EmitterUnsupported` from index arithmetic names (an instruction, or the map)."""

    def __init__(self, inst: Instruction | None, what: str):
        self.opcode = inst.opcode if inst is not None else "indexing"
        self.name = inst.name if inst is not None else what


def index_expr(gen: ElementalGenerator, e: AffineExpr, dims: Index, symbols: Index = (),
               inst: Instruction | None = None) -> int | str:
    """One affine expression as Triton index arithmetic at ``d_k = dims[k]``, ``s_k = symbols[k]``.

    Args:
        gen: the generator of the kernel being written (``body``'s first argument).
        e: built from ``dim``/``sym``/``const`` with ``+``, ``*`` by a constant, ``floordiv`` / ``mod`` by a
            positive constant.
        dims, symbols: ints or index-tensor names (``[BLOCK]`` tensors of ``gen.ctx.idx_t``).
        inst: the instruction errors name (default: the expression itself).

    Returns:
        an ``int`` when every input is known now, else the name of an index tensor (shared: equal
        sub-expressions are computed once per kernel).

    Raises:
        EmitterUnsupported: a node without index arithmetic (``ceildiv``, ``min``/``max``, a product of two
            variables, runtime variables). ``floordiv``/``mod`` are Triton's ``//``/``%``, equal to the map's
            for non-negative dividends: :func:`apply_indexing_map` checks that over the map's domain.
    """
    n = len(dims)
    if symbols:
        e = e.replace({sym(i): dim(n + i) for i in range(len(symbols))})
    return gen.index_expr(e, tuple(dims) + tuple(symbols), _Where(inst, str(e)))


def apply_indexing_map(gen: ElementalGenerator, m: IndexingMap, dims: Index, symbols: Index = (),
                       inst: Instruction | None = None) -> Index:
    """The results of ``m`` at dimension values ``dims`` (and symbol values ``symbols``): one entry per
    result, ints or index-tensor names. The caller keeps ``dims`` inside ``m``'s domain (e.g. clamped tail
    lanes, ``lin_c``); constraints are not tested.

    Example: the operand index a ``transpose`` with ``dimensions={1,0}`` reads for output index ``idx``::

        m = compute_output_to_input_indexing(root).maps(0)[0]    # (d0, d1) -> (d1, d0)
        src = apply_indexing_map(gen, m, idx)

    Raises:
        EmitterUnsupported: ``m`` is undefined, has fewer dims/symbols than values given, or a ``floordiv`` /
            ``mod`` whose dividend may be negative in ``m``'s domain (Triton truncates, the map floors), or
            as :func:`index_expr`.
    """
    where = _Where(inst, str(m))
    if m.is_undefined or m.num_dims != len(dims) or m.num_symbols != len(symbols) or m.num_rt_vars:
        raise EmitterUnsupported(where.opcode, where.name, f"indexing map {m} cannot be applied to {len(dims)} "
                                                           f"dims and {len(symbols)} symbols")
    gen._check_divisions(m, where)
    return tuple(index_expr(gen, e, dims, symbols, inst) for e in m.exprs)


def logical_index(gen: ElementalGenerator, lin: int | str, shape: Shape) -> Index:
    """The logical index of physical linear position ``lin`` of ``shape`` (its minor-to-major layout):
    ``f32[4,8]{0,1}``, ``lin = 9`` -> ``(1, 2)``. Cached: the same ``lin`` gives the same variables."""
    return gen.delinearize(lin, shape.dimensions, shape.minor_to_major())


def physical_offset(gen: ElementalGenerator, idx: Index, shape: Shape) -> int | str:
    """The physical linear position of logical index ``idx`` in ``shape``'s buffer (elements, minor-to-major
    layout): the inverse of :func:`logical_index` (their round trip is recognised, no arithmetic)."""
    return gen.linearize(idx, shape.dimensions, shape.minor_to_major())


def fused_parameter(emitter: FusionEmitter, k: int) -> Instruction:
    """The fused computation's ``parameter(k)`` (what ``gen.value`` loads from fusion operand ``k``).

    Raises:
        EmitterUnsupported: the fused computation has no ``parameter(k)``.
    """
    for inst in emitter.computation.instructions:
        if inst.opcode == "parameter" and inst.parameter_number == k:
            return inst
    raise EmitterUnsupported("parameter", emitter.fusion.name, f"fused computation has no parameter({k})")


class LinearKernelIndexing:
    """The indexing protocol for an emitter whose kernel is :func:`build_linear_kernel` over
    :meth:`linear_shape`, without a geometry (mix into a :class:`FusionEmitter` subclass).

    The launch is ``ceil(n / BLOCK)`` programs of ``num_warps`` warps (:func:`choose_block`); in the maps a
    thread holds ``BLOCK / (32 num_warps)`` consecutive elements (``unroll_id``) of the linear index, split by
    the shape's layout (:func:`default_thread_id_indexing_map`): program ``bl_x``, thread ``th_x`` and
    ``unroll_id`` name the element of physical position ``bl_x * BLOCK + th_x * unroll + unroll_id``, the
    position the kernel's lane stores at. (Inside a program Triton spreads the lanes over its threads by its
    own layout; the map is the XLA-style launch the kernel stands for, as for the loop emitter.)
    """

    def linear_shape(self) -> Shape:
        """The shape whose physical linear index the kernel walks (default: the fusion's first output leaf)."""
        return self.fusion.shape.leaves()[0]

    def launch_dimensions(self) -> LaunchDimensions | None:
        """The kernel's launch (``None`` for an empty shape)."""
        n = self.linear_shape().numel
        if n == 0:
            return None
        block, warps = choose_block(n)
        return LaunchDimensions(grid=(max(1, -(-n // block)),), num_warps=warps)

    def thread_id_to_output_indexing(self, root_index: int) -> IndexingMap | None:
        """Launch ids -> the element of :meth:`linear_shape` a thread writes (``chunk_id``, ``unroll_id``:
        its loop symbols)."""
        launch = self.launch_dimensions()
        if launch is None:
            return None
        block, _ = choose_block(self.linear_shape().numel)
        unroll = max(1, block // launch.threads3[0])
        return default_thread_id_indexing_map(launch, unroll, self.linear_shape())

    def thread_id_to_input_indexing(self, root_index: int, hero_operand_index: int) -> IndexingMap | None:
        """The output map composed with root ``root_index``'s output-to-input map of ``hero_operand_index``."""
        return compose_with_operand(self.thread_id_to_output_indexing(root_index),
                                    self.analysis.roots[root_index], hero_operand_index)

