"""The transpose emitter: tiles of the normalized transpose, read coalesced and written coalesced.

Mirrors XLA's ``TransposeFusion`` and ``PackedTranspose`` (``xla/backends/gpu/codegen/emitters/transpose.cc``;
the choice between them is ``CreateTransposeFusion``, :func:`fusegen.analysis.transpose.choose_transpose_emitter`).

The fusion's transpose hero is described by its *normalized* form (``TransposeDescription``: output dims
``D`` and permutation ``P``, output dim ``i`` = input dim ``P[i]``). One Triton program handles one tile:

* **read phase**: the tile's lanes are ordered input-minor-fastest, so loads are coalesced along the
  input's minor dimension; the hero's operand (the fused prologue) is computed elementally at the input
  index, and side outputs (roots that are not transposes; XLA requires them to be bitcast-compatible with
  the hero input) are written at the input index;
* the tile is transposed in registers/shared memory: ``tl.reshape`` -> ``tl.permute`` -> ``tl.reshape``
  (Triton lowers the layout change through shared memory, XLA's 32x33 shared tile);
* **write phase**: lanes ordered output-minor-fastest; the transposed value is injected as the hero's
  value at the output index and every transpose root (the hero, or an elementwise/bitcast epilogue of it)
  is computed there and stored coalesced.

A complex (``c64``/``c128``) hero is an ``(re, im)`` pair: each part is a tile of the part type, permuted on
its own, and the prologue/epilogue use the elemental generator's complex arithmetic.

Tiles (per normalized output dim): ``TransposeFusion`` uses XLA's ``kTileSize`` 32 on the two swapped minor
dims (plus the whole preserved minor dim of a "021" transpose); ``PackedTranspose`` uses XLA's
``GetPackedTransposeTileSizes`` (larger tiles along the packed dims for sub-32-bit types). Triton needs
power-of-two block extents, so each tile extent is rounded up to a power of two (capped by the dimension
rounded up) and out-of-range lanes are masked.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Sequence

from fusegen.hlo.shape_util import inverse_permutation
from fusegen.analysis.transpose import (
    PackedTransposeDescription,
    TransposeDescription,
    choose_transpose_emitter,
    get_normalized_logical_transpose_shape,
    get_packed_transpose_tile_sizes,
)
from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import (ELEMENTWISE, Cx, ElementalGenerator, KernelContext, choose_index_dtype,
                                      deep_recursion, int_list)
from fusegen.codegen.emitter import EmitterUnsupported, FusionEmitter, store_line
from fusegen.codegen.kernel import EmittedFusion, KernelSource, LaunchDimensions, interpret_tile_sizes
from fusegen.codegen.launch import launch, transpose_vector_size
from fusegen.codegen.thread_indexing import compose_with_operand, transpose_indexing
from fusegen.indexing import IndexingMap
from fusegen.device import DEFAULT_DEVICE
from fusegen.hlo.ir import Instruction
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory
from fusegen.pow2 import next_pow2
from fusegen_plugins.emitters._hero_kernel import flatten, root_leaves, seed_value

#: XLA ``TransposeFusion`` constants (``emitters/transpose.cc``): 32-wide tiles, 4 rows of threads.
TILE_SIZE = 32
NUM_ROWS = 4
#: Lanes per program above which fusegen uses 8 warps instead of XLA's 4 (Triton register pressure): 128 lanes a
#: thread. An s8 128 x 128 tile (16384 lanes) takes XLA's 32 registers on 4 warps; a packed s4 256 x 256 tile
#: (65536) would take 72 there, 48 on 8 warps.
WIDE_BLOCK = 16384


def normalized_transpose(hero: Instruction) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(dims, perm)`` of ``hero``'s normalized transpose regardless of XLA's size thresholds.

    ``None`` when the transpose has non-default layouts or is the identity once normalized.
    """
    if hero.opcode != "transpose" or not hero.operands:
        return None
    norm = get_normalized_logical_transpose_shape(hero.operands[0].shape, hero.shape,
                                                  int_list(hero.attrs.get("dimensions")))
    if norm is None or len(norm[1]) < 2:
        return None
    return tuple(norm[0]), tuple(norm[1])


def describe_any_transpose(hero: Instruction) -> TransposeDescription | None:
    """A :class:`TransposeDescription` for any non-trivial default-layout transpose (no thresholds).

    Used to run the tiled kernel on transposes XLA would leave to the loop emitter (tests, tools);
    the shared-memory estimate follows XLA's TransposeFusion formula ``ceil(32*33*bits/8)``.
    """
    norm = normalized_transpose(hero)
    if norm is None:
        return None
    from fusegen.analysis.transpose import get_bitwidth

    bits = get_bitwidth(hero.shape.element_type)
    return TransposeDescription(hero, norm[0], norm[1], -(-(32 * 33 * bits) // 8))


def packed_tile_sizes_by_output_dim(element_type: str, dims: Sequence[int], perm: Sequence[int]) -> tuple[int, ...] | None:
    """XLA's packed-transpose tile sizes (``GetPackedTransposeTileSizes``) per *normalized* output dim.

    The canonical ``[.., T2, A, T1, B]`` form may insert size-1 ``A``/``B`` dims
    (``PackedTransposeDescription``); their tiles (1) are dropped here. ``None`` when the packed
    transpose does not apply.
    """
    spec = PackedTransposeDescription.from_description(element_type, dims, perm)
    tiles = get_packed_transpose_tile_sizes(spec)
    if tiles is None:
        return None
    # Replay the canonicalisation on labels to map canonical output dims back to normalized ones.
    labels: list[int | None] = list(range(len(dims)))
    cperm = list(perm)
    if cperm[-1] != len(labels) - 1:
        cperm.append(len(labels))
        labels.append(None)
    rank = len(labels)
    if rank >= 3 and cperm[rank - 3] != rank - 3:
        labels.insert(rank - 2, None)
    out = [1] * len(dims)
    for lab, t in zip(labels, tiles):
        if lab is not None:
            out[lab] = t
    return tuple(out)


#: Ops an epilogue may pass through between a root and its transpose hero (XLA's ``IsIntermediate``).
_EPILOGUE_OPS = ELEMENTWISE | {"bitcast", "reshape", "copy", "convert"}


def _find_matching_transpose(root: Instruction, want: tuple[tuple[int, ...], tuple[int, ...]]) -> Instruction | None:
    """A transpose with normalized form ``want`` reachable from ``root`` through epilogue ops, if any
    (used when the analysis did not pick it as the hero, e.g. for a forced description)."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        inst = todo.pop(0)
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        if inst.opcode == "transpose":
            if normalized_transpose(inst) == want:
                return inst
            continue
        if inst.opcode in _EPILOGUE_OPS:
            todo.extend(inst.operands)
    return None


class TransposeFusion(FusionEmitter):
    """Tiled transpose emitter for ``kTranspose`` fusions (XLA ``TransposeFusion``).

    Args:
        analysis: the fusion's analysis; its ``tiled_transpose`` (XLA's ``FindConsistentTransposeHero``)
            describes the hero.
        description: overrides ``analysis.tiled_transpose`` (e.g. :func:`describe_any_transpose`).

    ``emit()`` raises :class:`EmitterUnsupported` when there is no description, a root is tuple-shaped,
    a root's element count matches neither the transpose output (transpose roots) nor its input (side
    outputs), or an op of the fused computation cannot be generated.
    """

    name: ClassVar[str] = "TransposeFusion"

    #: Lanes per program of the interpreter variant: Triton's interpreter pays per program and op, numpy per
    #: element, and a transpose tile of any size moves the same elements to the same places.
    INTERPRET_LANES: ClassVar[int] = 1 << 16

    def __init__(self, analysis: Any, description: TransposeDescription | None = None):
        super().__init__(analysis)
        self.description = description if description is not None else getattr(analysis, "tiled_transpose", None)
        self._tiles: tuple[int, ...] | None = None  # the interpreter variant's tile sizes

    # ------------------------------------------------------------------------------------ tiling
    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(self.description.dimensions)

    @property
    def perm(self) -> tuple[int, ...]:
        return tuple(self.description.permutation)

    def xla_tile_sizes(self) -> tuple[int, ...]:
        """XLA's tile per normalized output dim: 32 x 32 over the input-minor and output-minor dims;
        for a transpose that keeps its minor dim ("021") the whole minor dim rides along (vectorised)."""
        d, p = self.dims, self.perm
        r = len(d)
        inv = inverse_permutation(p)
        t = [1] * r
        if p[-1] == r - 1:
            t[r - 1] = d[r - 1]
            t[r - 2] = TILE_SIZE
            t[inv[r - 2]] = TILE_SIZE
        else:
            vec = self.vector_size()
            t[r - 1] = TILE_SIZE * vec
            t[inv[r - 1]] = TILE_SIZE * vec
        return tuple(t)

    def vector_size(self) -> int:
        """XLA's vector size along the two tiled dims (:func:`fusegen.codegen.launch.transpose_vector_size`):
        tiles of ``32 v x 32 v`` for large sub-32-bit transposes; 1 for "021" transposes."""
        d, p = self.dims, self.perm
        if p[-1] == len(d) - 1:
            return 1
        from fusegen.analysis.transpose import get_bitwidth

        inv = inverse_permutation(p)
        in_dims = [d[k] for k in inv]
        nbytes = max(1, get_bitwidth(self.description.instr.shape.element_type) // 8)
        heroes = list(getattr(self.analysis, "heroes", None) or [])
        n_heroes = max(1, sum(1 for h in heroes if normalized_transpose(h) == (d, p)))
        device = getattr(self.analysis, "device", None) or DEFAULT_DEVICE
        return transpose_vector_size(in_dims, p, nbytes, n_heroes, device)

    def _is_hero_transpose(self, root_index: int) -> bool:
        heroes = list(getattr(self.analysis, "heroes", None) or [])
        return root_index < len(heroes) and normalized_transpose(heroes[root_index]) == (self.dims, self.perm)

    def thread_id_to_output_indexing(self, root_index: int) -> IndexingMap | None:
        """``TransposeFusion::ComputeThreadIdToOutputIndexing``: tiles of the hero's output for transpose
        roots, of the input for side outputs (bitcast to the root). ``None`` for packed transposes."""
        if self.description is None or type(self) is not TransposeFusion:
            return None
        roots = list(self.analysis.roots)
        if self._is_hero_transpose(root_index):
            return transpose_indexing(self.dims, self.perm, self.vector_size(), False,
                                      self.analysis.heroes[root_index].shape)
        return transpose_indexing(self.dims, self.perm, self.vector_size(), True, roots[root_index].shape)

    def thread_id_to_input_indexing(self, root_index: int, hero_operand_index: int) -> IndexingMap | None:
        """``TransposeFusion::ComputeThreadIdToInputIndexing``: the input tile for the hero's operand; for
        side outputs their output map composed with the root's output-to-input map."""
        if self.description is None or type(self) is not TransposeFusion:
            return None
        if self._is_hero_transpose(root_index):
            hero = self.analysis.heroes[root_index]
            return transpose_indexing(self.dims, self.perm, self.vector_size(), True,
                                      hero.operands[hero_operand_index].shape)
        return compose_with_operand(self.thread_id_to_output_indexing(root_index), self.analysis.roots[root_index],
                                    hero_operand_index)

    def launch_dimensions(self) -> LaunchDimensions | None:
        """XLA's launch (``TransposeFusion::launch_dimensions``): one 128-thread block per tile."""
        if self.description is None:
            return None
        n = 1
        for c in self.launch_grid():
            n *= c
        return launch((n,), (NUM_ROWS * TILE_SIZE,))

    def tile_sizes(self) -> tuple[int, ...]:
        """Block extent per normalized output dim: the XLA tile rounded up to a power of two, no larger
        than the dimension rounded up (1 for dims walked by the grid)."""
        if self._tiles is not None:
            return self._tiles
        return tuple(1 if t <= 1 else min(next_pow2(t), next_pow2(n)) for t, n in zip(self.xla_tile_sizes(), self.dims))

    def launch_grid(self) -> tuple[int, ...]:
        """Number of tiles per normalized output dim (row-major program order)."""
        return tuple(-(-n // t) for n, t in zip(self.dims, self.tile_sizes()))

    def num_warps(self, block: int) -> int:
        """XLA's 128 threads (4 warps); 8 warps above :data:`WIDE_BLOCK` lanes (Triton register pressure)."""
        return NUM_ROWS if block <= WIDE_BLOCK else 2 * NUM_ROWS

    # -------------------------------------------------------------------------------------- emit
    def _hero_roots(self, roots: list[Instruction], heroes: list[Instruction]) -> tuple[list[Instruction], list[bool]]:
        """Distinct transpose heroes equivalent to the description, and per root whether it is one of
        their (epilogue) roots."""
        want = (self.dims, self.perm)
        distinct: list[Instruction] = []
        is_tr: list[bool] = []
        for r, h in zip(roots, heroes):
            if h is None or normalized_transpose(h) != want:
                h = _find_matching_transpose(r, want)
            is_tr.append(h is not None)
            if h is not None and all(h is not x for x in distinct):
                distinct.append(h)
        return distinct, is_tr

    def emit(self) -> EmittedFusion:
        if self.description is None:
            raise EmitterUnsupported("fusion", self.fusion.name, "no tiled transpose hero (FindConsistentTransposeHero)")
        fusion = self.fusion
        comp = self.computation
        roots = list(getattr(self.analysis, "roots", None) or [])
        heroes = list(getattr(self.analysis, "heroes", None) or [])
        if not roots or len(heroes) != len(roots):
            from fusegen.codegen.emitter import fusion_roots
            from fusegen.analysis.hero import find_non_trivial_hero

            roots = fusion_roots(comp)
            heroes = [find_non_trivial_hero(r) for r in roots]
        leaves = root_leaves(fusion, roots)
        hero_list, is_tr = self._hero_roots(roots, heroes)
        if not hero_list:
            raise EmitterUnsupported("fusion", fusion.name, "no root reaches a transpose matching the description")
        d, p = self.dims, self.perm
        r = len(d)
        numel = 1
        for n in d:
            numel *= n
        for root, tr in zip(roots, is_tr):
            if root.shape.numel != numel:
                what = "transpose root" if tr else "side output"
                raise EmitterUnsupported(root.opcode, root.name,
                                         f"{what} has {root.shape.numel} elements, the transpose {numel}")
        if numel == 0:
            return EmittedFusion(emitter=self.name)

        tiles = self.tile_sizes()
        ntiles = self.launch_grid()
        block = 1
        for t in tiles:
            block *= t
        n_programs = 1
        for n in ntiles:
            n_programs *= n
        op_shapes = [o.shape for o in fusion.operands]
        idx_t = choose_index_dtype(op_shapes + list(leaves), block + n_programs)
        ctx = KernelContext(idx_t, op_shapes)
        for n in ("lane", "mask_all"):
            ctx.names.reserve(n)
        # Lanes of a partial tile keep unclamped indices and are masked on every load and store (ctx.mask is the
        # phase's mask): a clamp would make every lane's address its own 64-bit sum (XLA's kernels address a
        # tile as one base plus constant offsets, masked at the array's edge)
        ctx.complex_values = True  # c64/c128 are (re, im) pairs: each part is a tile of its own
        gen = ElementalGenerator(ctx, comp)

        tiled = [k for k in range(r) if tiles[k] > 1]
        in_order = sorted(tiled, key=lambda k: p[k])  # major -> minor in the input
        out_order = sorted(tiled)  # major -> minor in the output
        in_stride = [1] * r  # stride of normalized *input* dim j
        din = [d[k] for k in inverse_permutation(p)]
        for j in range(r - 2, -1, -1):
            in_stride[j] = in_stride[j + 1] * din[j + 1]
        out_stride = [1] * r
        for k in range(r - 2, -1, -1):
            out_stride[k] = out_stride[k + 1] * d[k + 1]

        with deep_recursion():
            # Tile coordinates of this program (row-major over the tile grid).
            base: list[int | str] = [0] * r
            pstride = 1
            for k in range(r - 1, -1, -1):
                if ntiles[k] > 1:
                    q = "pid" if pstride == 1 else f"(pid // {pstride})"
                    expr = q if pstride * ntiles[k] == n_programs else f"{q} % {ntiles[k]}"
                    t = ctx.emit(expr, f"tile{k}")
                    base[k] = ctx.emit(f"{t} * {tiles[k]}", f"base{k}") if tiles[k] > 1 else t
                pstride *= ntiles[k]

            def coords(order: list[int]) -> tuple[list[int | str], str]:
                c: list[int | str] = [0] * r
                conds: list[str] = []
                s = 1
                lane_of: dict[int, int | str] = {}
                for k in reversed(order):
                    q = "lane" if s == 1 else f"(lane // {s})"
                    lane_of[k] = gen.iexpr(q if s * tiles[k] == block else f"{q} % {tiles[k]}", f"l{k}")
                    s *= tiles[k]
                for k in range(r):
                    if k in lane_of:
                        v = lane_of[k] if base[k] == 0 else gen.iexpr(f"{lane_of[k]} + {base[k]}", f"c{k}")
                        if d[k] % tiles[k] != 0:  # masked, not clamped: see ctx.mask below
                            conds.append(f"({v} < {d[k]})")
                        c[k] = v
                    elif base[k] != 0:
                        c[k] = gen.iexpr(f"{ctx.zero} + {base[k]}", f"c{k}")
                mask = ctx.emit(" & ".join(conds), "mask_t") if conds else "mask_all"
                return c, mask

            def linear(c: list[int | str], strides: list[int]) -> int | str:
                terms = [f"{c[k]} * {strides[k]}" if strides[k] != 1 else str(c[k])
                         for k in range(len(c)) if not isinstance(c[k], int)]
                const = sum(c[k] * strides[k] for k in range(len(c)) if isinstance(c[k], int))
                if not terms:
                    return const
                return gen.iexpr(" + ".join(terms) + (f" + {const}" if const else ""), "lin")

            # ---- read phase: lanes input-minor-fastest
            ctx.body.line("# read phase: input-minor-fastest lanes (coalesced loads)")
            c_in, mask_in = coords(in_order)
            ctx.mask = mask_in
            lin_in = linear([c_in[k] for k in inverse_permutation(p)], in_stride)
            # each real dimension from its own normalized coordinate: per-lane constants stay per lane, and one
            # division by a dimension's extent replaces the chain over the whole linear index
            parts_in = [(c_in[k], in_stride[j], din[j]) for j, k in enumerate(inverse_permutation(p))]
            in_shape = [tiles[k] for k in in_order]
            axes = [in_order.index(k) for k in out_order]
            transposed: list[Any] = []
            for h in hero_list:
                src = h.operands[0]
                idx = gen.delinearize_by_parts(parts_in, lin_in, src.shape.dimensions, src.shape.minor_to_major())
                x = gen.value(src, idx)
                if isinstance(x, list):
                    raise EmitterUnsupported(h.opcode, h.name, "transpose of a tuple")
                parts = [ctx.emit(f"tl.reshape(tl.permute(tl.reshape({xp}, {in_shape}), {tuple(axes)}), [BLOCK])",
                                  f"{h.name}_tile") for xp in (x if isinstance(x, Cx) else [x])]
                transposed.append(Cx(parts) if isinstance(x, Cx) else parts[0])
            for k, (root, tr) in enumerate(zip(roots, is_tr)):
                if tr:
                    continue
                ls = leaves[k]
                ridx = gen.delinearize_by_parts(parts_in, lin_in, ls.dimensions, ls.minor_to_major())
                (v,) = flatten(gen.value(root, ridx))
                ptr = ctx.param("output", k, ls, f"out{k}")
                store_line(gen, ptr, gen.linearize(ridx, ls.dimensions, ls.minor_to_major()), v,
                           ls.element_type, mask_in)

            # ---- write phase: lanes output-minor-fastest
            ctx.body.line("# write phase: output-minor-fastest lanes (coalesced stores)")
            c_out, mask_out = coords(out_order)
            ctx.mask = mask_out
            lin_out = linear(c_out, out_stride)
            parts_out = [(c_out[k], out_stride[k], d[k]) for k in range(r)]
            for h, xt in zip(hero_list, transposed):
                oidx = gen.delinearize_by_parts(parts_out, lin_out, h.shape.dimensions, h.shape.minor_to_major())
                seed_value(gen, h, oidx, xt)
            for k, (root, tr) in enumerate(zip(roots, is_tr)):
                if not tr:
                    continue
                ls = leaves[k]
                ridx = gen.delinearize_by_parts(parts_out, lin_out, ls.dimensions, ls.minor_to_major())
                (v,) = flatten(gen.value(root, ridx))
                ptr = ctx.param("output", k, ls, f"out{k}")
                store_line(gen, ptr, gen.linearize(ridx, ls.dimensions, ls.minor_to_major()), v,
                           ls.element_type, mask_out)

        pid = "tl.program_id(0).to(tl.int64)" if idx_t == "tl.int64" else "tl.program_id(0)"
        lane = "tl.arange(0, BLOCK).to(tl.int64)" if idx_t == "tl.int64" else "tl.arange(0, BLOCK)"
        prologue = [f"pid = {pid}", f"lane = {lane}", f"zero = tl.full([BLOCK], 0, {idx_t})", "mask_all = zero == 0"]
        entry = ts.sanitize_identifier(f"transpose_{fusion.name}", "k")
        source = ctx.render(entry, ["BLOCK"], prologue)
        shmem = int(self.description.shmem_usage) * len(hero_list)
        ks = KernelSource(name=entry, source=source, entry=entry, params=tuple(ctx.params),
                          constexprs={"BLOCK": block},
                          launch=launch((n_programs,), (NUM_ROWS * TILE_SIZE,), num_warps=self.num_warps(block),
                                        shared_memory_bytes=shmem),
                          num_stages=1, interpret_variant=self._interpret_variant(tiles))
        return EmittedFusion(emitter=self.name, kernels=(ks,))

    def _interpret_variant(self, tiles: tuple[int, ...]) -> KernelSource | None:
        """The same kernel over tiles grown (innermost output dimension first, by powers of two, at most to the
        dimension rounded up) to :attr:`INTERPRET_LANES` lanes, for Triton's interpreter; ``None`` when the
        tiles cannot grow or this is the variant itself."""
        if self._tiles is not None:
            return None
        wide = [next_pow2(t) for t in interpret_tile_sizes(self.dims, list(tiles), self.INTERPRET_LANES)]
        if tuple(wide) == tuple(tiles):
            return None
        other = copy.copy(self)
        other._tiles = tuple(wide)
        emitted = other.emit()
        return emitted.kernels[0] if emitted.kernels else None


class PackedTranspose(TransposeFusion):
    """Transpose of sub-32-bit elements with XLA's packed tiles (XLA ``PackedTranspose``).

    Chosen when ``GetPackedTransposeTileSizes`` succeeds; the tiles cover the canonical ``T1``, ``A`` and
    ``T2`` dims (up to ``32 * 32/bits`` elements along each packed dim), so several narrow elements
    share one 32-bit shared-memory bank word in XLA's kernel.
    """

    name: ClassVar[str] = "PackedTranspose"

    def xla_tile_sizes(self) -> tuple[int, ...]:
        t = packed_tile_sizes_by_output_dim(self.description.instr.shape.element_type, self.dims, self.perm)
        if t is None:
            raise EmitterUnsupported("transpose", self.description.instr.name,
                                     "GetPackedTransposeTileSizes does not apply (not a packed transpose)")
        return t


def create_transpose_emitter(analysis: Any, description: TransposeDescription | None = None) -> TransposeFusion | None:
    """``CreateTransposeFusion``: :class:`PackedTranspose` when the packed tile sizes exist, else
    :class:`TransposeFusion`; ``None`` when the fusion has no tiled transpose hero."""
    desc = description if description is not None else getattr(analysis, "tiled_transpose", None)
    if desc is None:
        return None
    cls = PackedTranspose if choose_transpose_emitter(desc) == "PackedTranspose" else TransposeFusion
    return cls(analysis, desc)


def _create(analysis: Any, context: Any = None) -> TransposeFusion | None:
    return create_transpose_emitter(analysis)


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="transpose", kind="kTranspose", rank=100, create=_create)]
