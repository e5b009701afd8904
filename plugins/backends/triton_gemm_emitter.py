"""The Triton GEMM emitter for ``__triton_gemm`` and ``__triton_nested_gemm_fusion`` fusions.

Mirrors the Triton program XLA builds for them (``xla/backends/gpu/codegen/triton/fusion_emitter.cc`` and its
legacy ``EmitMatMul``): one program per ``block_m x block_n`` output tile (per batch index), a loop over the
contracting dimension in ``block_k`` steps, each step's operand tiles computed by the fused prologue (convert,
bitcast, broadcast, reshape, transpose, slice, elementwise...) and multiplied by one ``tl.dot`` on the operands'
own types into an f32 accumulator (s32 for int8; tf32 only where XLA uses it: :mod:`.triton_gemm_dot`), then the
fused elementwise epilogue applied to the accumulator before one store.

Tiles are 2-D Triton tensors end to end: the prologue and epilogue are written by
:class:`fusegen.codegen.elemental.ElementalGenerator` over ``[rows, cols]`` index tensors (``i_m``/``i_k``,
``i_k``/``i_n``, ``i_m``/``i_n``, broadcast from ``tl.arange``), so a parameter's offset is an affine function of
them that Triton's axis analysis sees as contiguous along the operand's minor dimension and loads 8-16 bytes at a
time, staged through shared memory for the MMA (``LDSM``), as XLA's kernels do. Tiles past the end of M, N or K
are masked (loads and the store), never clamped: a clamped index hides the contiguity. XLA's tiles below 16
(``block_n = 8``) go to ``tl.dot`` as they are (Triton 3.9 pads M and N for ``mma.m16n8k16`` itself); a
``block_k`` below Triton's minimum K is padded in registers (:class:`.triton_gemm_dot.DotPlan`).

Launch: a 1-D grid over tiles (batch-major, then M tiles, then N tiles), XLA's grid; the kernel takes the tile
count as constexpr ``N`` and handles ``BLOCK`` consecutive tiles per program (``BLOCK = 1`` as emitted), the
linear-index convention of :func:`fusegen.codegen.triton_runtime.run_interpreted`, so the interpreter may run it
with fewer, wider programs.

Interpreter variant (:attr:`~fusegen.codegen.kernel.KernelSource.interpret_variant`): the same kernel with
``block_m``/``block_n`` grown towards the whole output and ``block_k`` to 128 (the same conversions, products and
f32 accumulation; only the grouping of the f32 sums differs, as between tensor core and numpy); when one tile
then covers a batch index's whole ``M x N``, several batch indices share a program (a power of two, padding past
the batch count at most 1/8, every tensor within Triton's 2**20 elements) as one 3-D ``tl.dot`` per K step,
each batch index's product the 2-D one's (attention's per-head GEMMs: 48 programs become 3).

Configs: the fusion's ``triton_gemm_config`` (``block_m``, ``block_n``, ``block_k``, ``num_stages``,
``num_warps``, ``num_ctas``), else its ``block_level_fusion_config`` (output tile -> block_m/block_n; block_k
from the nested dot's ``backend_config.sizes``, the contracting tile XLA's nesting writes there), else a size
heuristic. ``split_k > 1`` and ``num_ctas > 1`` are refused.
"""

from __future__ import annotations

from typing import Any

import attrs

from fusegen.codegen import loop_unroll
from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import ElementalGenerator, KernelContext, choose_index_dtype, deep_recursion, int_list
from fusegen.codegen.emitter import EmitterUnsupported, FusionEmitter, store_line
from fusegen.codegen.kernel import EmittedFusion, KernelSource, LaunchDimensions
from fusegen.hlo.dot_numerics import DotNumericsError
from fusegen.hlo.ir import Computation, Instruction
from fusegen_plugins.backends import triton_gemm_dot
from fusegen_plugins.backends.triton_configs import ConfigError, TritonGemmConfig, from_values
from fusegen_plugins.backends.triton_gemm_epilogue import (EpilogueGen, dot_to_root_map, inline_nested, root_dims_of_dot,
                                                           root_index, row_major)

GEMM_KINDS = ("__triton_gemm", "__triton_nested_gemm_fusion")
#: Triton's largest tensor (elements, ``triton.language.TRITON_MAX_TENSOR_NUMEL``): a batched tile's bound.
TRITON_MAX_NUMEL = 1 << 20


def _pow2_at_least(n: int, lo: int = 16, hi: int = 128) -> int:
    p = lo
    while p < n and p < hi:
        p *= 2
    return p


# ------------------------------------------------------------------------------------------------ config
def resolve_config(fusion: Instruction, dot: Instruction, comp: Computation | None = None) -> TritonGemmConfig:
    """The config the fusion carries, or a size-based default.

    A ``block_level_fusion_config`` tiles the fusion's root; with ``comp`` (the fused computation, nested
    fusions inlined) its M and N tiles are read where the epilogue's bitcasts and transposes put the dot's last
    M and N dimensions (:func:`.triton_gemm_epilogue.root_dims_of_dot`), else from the root's last two.

    Raises:
        EmitterUnsupported: ``split_k > 1`` or ``num_ctas > 1``.
    """
    bc = fusion.backend_config
    fbc = bc.get("fusion_backend_config") if isinstance(bc.get("fusion_backend_config"), dict) else {}
    try:
        if isinstance(fbc.get("triton_gemm_config"), dict):
            cfg = from_values(fbc["triton_gemm_config"])
        elif isinstance(fbc.get("block_level_fusion_config"), dict):
            blc = fbc["block_level_fusion_config"]
            tiles = blc.get("output_tiles") or []
            sizes = [int(x) for x in (tiles[0].get("sizes") if tiles else [])]
            bm = sizes[-2] if len(sizes) >= 2 else 64
            bn = sizes[-1] if sizes else 64
            where = _mn_root_dims(comp, dot) if comp is not None else None
            if where is not None and len(sizes) == comp.root.shape.rank:
                bm, bn = sizes[where[0]], sizes[where[1]]
            cfg = from_values({"block_m": bm, "block_n": bn, "block_k": _nested_block_k(dot),
                               "num_warps": blc.get("num_warps", 4), "num_stages": blc.get("num_stages", 1),
                               "num_ctas": blc.get("num_ctas", 1)})
        else:
            m, n = _mn_sizes(dot)
            cfg = TritonGemmConfig(_pow2_at_least(m, 16, 64), _pow2_at_least(n, 16, 64),
                                   _pow2_at_least(_contracting_size(dot), 16, 32), num_stages=3, num_warps=4)
    except ConfigError as e:
        raise EmitterUnsupported("fusion", fusion.name, str(e)) from None
    if cfg.num_ctas != 1:
        raise EmitterUnsupported("fusion", fusion.name, f"num_ctas={cfg.num_ctas} (clusters) is not supported")
    return cfg


def _mn_root_dims(comp: Computation, dot: Instruction) -> tuple[int, int] | None:
    """The root dimensions holding the dot's last M and last N dimension, or None where unknown."""
    dims = root_dims_of_dot(comp, dot)
    nb = len(_dims(dot, "lhs_batch_dims"))
    nl = len(_nc(dot.operands[0].shape, _dims(dot, "lhs_contracting_dims"), _dims(dot, "lhs_batch_dims")))
    m_last, n_last = nb + nl - 1, dot.shape.rank - 1
    if dims is None or m_last not in dims or n_last not in dims or m_last < nb:
        return None
    return dims.index(m_last), dims.index(n_last)


def _nested_block_k(dot: Instruction) -> int:
    """The contracting tile of a nested GEMM fusion's dot: its ``backend_config.sizes`` (XLA's
    ``NestGemmFusion`` writes ``block_k`` there), else a power of two from 16 towards K (at most 64)."""
    sizes = dot.backend_config.get("sizes")
    if isinstance(sizes, list) and len(sizes) == 1:
        try:
            return int(sizes[0])
        except (TypeError, ValueError):
            pass
    return _pow2_at_least(_contracting_size(dot), 16, 64)


def _dims(dot: Instruction, key: str) -> tuple[int, ...]:
    return tuple(int(x) for x in (dot.attrs.get(key) or ()))


def _contracting_size(dot: Instruction) -> int:
    k = 1
    for d in _dims(dot, "lhs_contracting_dims"):
        k *= dot.operands[0].shape.dimensions[d]
    return k


def _nc(shape, contracting, batch) -> list[int]:
    return [d for d in range(shape.rank) if d not in contracting and d not in batch]


def _mn_sizes(dot: Instruction) -> tuple[int, int]:
    lhs, rhs = dot.operands[0].shape, dot.operands[1].shape
    m = 1
    for d in _nc(lhs, _dims(dot, "lhs_contracting_dims"), _dims(dot, "lhs_batch_dims")):
        m *= lhs.dimensions[d]
    n = 1
    for d in _nc(rhs, _dims(dot, "rhs_contracting_dims"), _dims(dot, "rhs_batch_dims")):
        n *= rhs.dimensions[d]
    return m, n



# ------------------------------------------------------------------------------------------------ emitter
@attrs.frozen
class _Problem:
    """The GEMM's sizes and tiling: batch ``B`` (over ``bsizes``), ``M``/``N``/``K``, the tile and the dot plan."""

    B: int
    M: int
    N: int
    K: int
    bsizes: tuple[int, ...]
    bm: int
    bn: int
    bk: int
    plan: triton_gemm_dot.DotPlan
    plain_operands: bool = True  # both operand tiles are loads only (no prologue arithmetic, no type conversion)

    @property
    def tk(self) -> int:
        """The K extent of the loaded tiles: ``block_k``, padded to Triton's smallest ``tl.dot`` K."""
        return max(self.bk, self.plan.min_k)

    @property
    def k_masked(self) -> bool:
        """Whether some K lanes of a step lie past K or past the step's ``block_k`` (padding): they are zeroed."""
        return self.K % self.bk != 0 or self.tk != self.bk


class TritonGemmFusion(FusionEmitter):
    """Emitter for ``__triton_gemm`` / ``__triton_nested_gemm_fusion`` fusions (see the module docstring).

    Args:
        analysis: the fusion's analysis (``.fusion``).
        config: a :class:`TritonGemmConfig` overriding the fusion's own (used by the autotuning backend).
        interpret_variant: also build the interpreter variant (larger tiles, same arithmetic).
        block_batch: batch indices per program (a power of two); interpreter variant only: one 3-D ``tl.dot``
            over ``block_batch`` whole ``M x N`` tiles instead of ``block_batch`` programs.

    ``emit`` raises :class:`~fusegen.codegen.emitter.EmitterUnsupported` (naming the instruction) for a fusion
    without exactly one dot, a multi-output root, an epilogue that is not a permutation of the dot's elements, a
    type Triton lacks, an unknown dot algorithm, or a config with ``split_k > 1`` / ``num_ctas > 1``.
    """

    name = "TritonGemmFusion"

    #: Largest tile edge of the interpreter variant, and its largest tile (elements): the interpreter's cost is
    #: per tile and per K step, numpy's per element (a 2048x1024 f32 accumulator is 8 MiB).
    INTERPRET_TILE = 2048
    INTERPRET_TILE_ELEMENTS = 1 << 21
    #: block_k of the interpreter variant (at most; at least the kernel's)
    INTERPRET_BLOCK_K = 128

    def __init__(self, analysis: Any, config: TritonGemmConfig | None = None, interpret_variant: bool = True,
                 block_batch: int = 1):
        super().__init__(analysis)
        self.config_override = config
        self.build_interpret_variant = interpret_variant
        self.block_batch = block_batch

    def _find_dot(self, comp: Computation) -> Instruction:
        dots = [i for i in comp.instructions if i.opcode == "dot"]
        if len(dots) != 1:
            raise EmitterUnsupported("dot", self.fusion.name, f"expected one dot in the GEMM fusion, found {len(dots)}")
        return dots[0]

    def emit(self) -> EmittedFusion:
        fusion = self.fusion
        comp = inline_nested(self.computation)
        dot = self._find_dot(comp)
        dot_to_root_map(comp, dot)
        root = comp.root
        if root.shape.is_tuple:
            raise EmitterUnsupported("tuple", root.name, "multi-output GEMM fusions are not supported")
        cfg = self.config_override or resolve_config(fusion, dot, comp)
        lhs, rhs = dot.operands
        lb, rb = _dims(dot, "lhs_batch_dims"), _dims(dot, "rhs_batch_dims")
        lc, rc = _dims(dot, "lhs_contracting_dims"), _dims(dot, "rhs_contracting_dims")
        lnc, rnc = _nc(lhs.shape, lc, lb), _nc(rhs.shape, rc, rb)
        bsizes = tuple(lhs.shape.dimensions[d] for d in lb)
        msizes = [lhs.shape.dimensions[d] for d in lnc]
        nsizes = [rhs.shape.dimensions[d] for d in rnc]
        B, M, N, K = _prod(bsizes), _prod(msizes), _prod(nsizes), _prod([lhs.shape.dimensions[d] for d in lc])
        if M == 0 or N == 0 or B == 0:
            return EmittedFusion(emitter=self.name)
        for et in (lhs.shape.element_type, rhs.shape.element_type, dot.shape.element_type):
            ts.tl_dtype(et)  # raises for types Triton lacks
        try:
            plan = triton_gemm_dot.plan(dot, cfg.block_k)
        except DotNumericsError as e:
            raise EmitterUnsupported("dot", dot.name, str(e)) from None
        # the K loop body only loads the tiles: no prologue, and the tiles enter the dot in their loaded types
        # (fp8 tiles below Triton's fp8 K are upcast to f16 in the body, as XLA's Triton does: see _k_loop)
        mt, nt = -(-M // cfg.block_m), -(-N // cfg.block_n)
        batched = B > 1 and mt == nt == 1 and plan.tensor_core and min(cfg.block_m, cfg.block_n, cfg.block_k) >= 16
        bb = self.block_batch if batched else 1
        # an operand concatenated along its one M (N) dimension at tile boundaries (XLA's dot merger: two
        # GEMMs sharing an operand): each tile reads one piece, so the K loop is written once per piece
        pieces_a = _tile_pieces(lhs, lnc, cfg.block_m) if bb == 1 else None
        pieces_b = _tile_pieces(rhs, rnc, cfg.block_n) if bb == 1 and pieces_a is None else None
        ops_a = [o for o, _, _ in pieces_a] if pieces_a else [lhs]
        ops_b = [o for o, _, _ in pieces_b] if pieces_b else [rhs]
        plain = (all(_loads_only(o) for o in ops_a + ops_b)
                 and (plan.lhs_type, plan.rhs_type) == (lhs.shape.element_type, rhs.shape.element_type))
        pb = _Problem(B, M, N, K, bsizes, cfg.block_m, cfg.block_n, cfg.block_k, plan, plain)
        tiles = B * mt * nt if bb == 1 else -(-B // bb)

        op_shapes = [o.shape for o in fusion.operands]
        idx_t = choose_index_dtype(op_shapes + [fusion.shape], bb * max(pb.bm * pb.tk, pb.tk * pb.bn, pb.bm * pb.bn))
        ctx = KernelContext(idx_t, op_shapes)
        ctx.native_loops = False  # XLA's Triton pipeline has no xla-gpu-optimize-loops
        bnames = [f"ib{j}" for j in range(len(bsizes))]
        for n in bnames + ["i_m", "i_n", "i_k", "acc", "mask", "smask", "zero", "tile", "BLOCK", "N", "a", "b",
                           "part", "nounroll"]:
            ctx.names.reserve(n)
        # every tile is a full [rows, cols] (or [batch, rows, cols]) tensor: constants take the shape of `zero`
        ctx.block_shape, ctx.mask, ctx.zero = "zero.shape", "mask", "zero"

        def gen_body(operand: Instruction, batch: tuple[int, ...], contracting: tuple[int, ...],
                     noncontracting: list[int], k_first: bool, start: int = 0) -> tuple[list[str], str]:
            """Lines computing ``operand`` on its tile (``start``: where a concatenated piece begins along the
            one non-contracting dimension); returns (lines, value variable)."""
            ctx.body = ts.SourceBuilder()
            ctx.body.level = 1
            gen = ElementalGenerator(ctx, comp)
            idx: list[Any] = [0] * operand.shape.rank
            for j, d in enumerate(batch):
                idx[d] = bnames[j] if bsizes[j] > 1 else 0
            kc = gen.delinearize("i_k", [operand.shape.dimensions[d] for d in contracting], row_major(len(contracting)))
            for d, v in zip(contracting, kc):
                idx[d] = v
            nc = gen.delinearize("i_n" if k_first else "i_m", [operand.shape.dimensions[d] for d in noncontracting],
                                 row_major(len(noncontracting)))
            for d, v in zip(noncontracting, nc):
                # a piece one row long has one valid index (its shifted tile index is dropped with the unit
                # dimension, but not its constant: the reads landed before the buffer)
                idx[d] = (0 if operand.shape.dimensions[d] == 1 else gen.isub(v, start)) if start else v
            with deep_recursion():
                v = gen.value(operand, tuple(idx))
            if isinstance(v, list):
                raise EmitterUnsupported(operand.opcode, operand.name, "tuple-valued dot operand")
            return list(ctx.body.lines), v

        a_fns = [gen_body(o, lb, lc, lnc, False, st) for o, st, _ in pieces_a] if pieces_a else \
            [gen_body(lhs, lb, lc, lnc, False)]
        b_fns = [gen_body(o, rb, rc, rnc, True, st) for o, st, _ in pieces_b] if pieces_b else \
            [gen_body(rhs, rb, rc, rnc, True)]

        # epilogue: the accumulator's elements at their root indices, stored under the tile's bounds
        ctx.body = ts.SourceBuilder()
        ctx.body.level = 1
        gen = EpilogueGen(ctx, comp, dot)
        out_idx: list[Any] = [bnames[j] if bsizes[j] > 1 else 0 for j in range(len(bsizes))]
        out_idx.extend(gen.delinearize("i_m", msizes, row_major(len(msizes))))
        out_idx.extend(gen.delinearize("i_n", nsizes, row_major(len(nsizes))))
        out_idx_t = root_index(gen, comp, dot, tuple(out_idx))
        with ctx.block("zero.shape", mask="smask"):
            with deep_recursion():
                v = gen.value(root, out_idx_t)
            out_shape = fusion.shape
            ptr = ctx.param("output", 0, out_shape, "out")
            off = gen.linearize(out_idx_t, out_shape.dimensions, out_shape.minor_to_major())
            store_line(gen, ptr, off, v, out_shape.element_type, "smask")
        e_lines = list(ctx.body.lines)

        params = list(ctx.param_names)
        src = ts.module_header()
        src.insert(4, "from fusegen_plugins.backends.triton_devfn import device_jit")

        def fn(name: str, index: str, extra: list[str], lines: list[str], ret: str | None) -> None:
            src.append("")
            src.append("@device_jit")
            src.append(f"def {name}({', '.join(params + bnames + extra)}):")
            src.append(f"    zero = tl.full({index}.shape, 0, {index}.dtype)")
            # batch indices as tiles: an operand indexed by them alone (a per-batch scale) still loads a tile
            src.extend(f"    {b} = {b} + zero" for b, size in zip(bnames, bsizes) if size > 1)
            src.extend(lines)
            if ret is not None:
                src.append(f"    return {ret}")

        for k, (lines, val) in enumerate(a_fns):
            fn("lhs_tile" + (f"_{k}" if pieces_a else ""), "i_m", ["i_m", "i_k", "mask"], lines, val)
        for k, (lines, val) in enumerate(b_fns):
            fn("rhs_tile" + (f"_{k}" if pieces_b else ""), "i_n", ["i_k", "i_n", "mask"], lines, val)
        fn("epilogue", "i_m", ["i_m", "i_n", "acc", "smask"], e_lines, None)
        loaded = (lhs.shape.element_type, rhs.shape.element_type)
        split = ("lhs_tile", "m_t", pb.bm, pieces_a) if pieces_a else ("rhs_tile", "n_t", pb.bn, pieces_b) \
            if pieces_b else None
        body = (_batched_tile(pb, bb, params, bnames, idx_t, loaded, dot.shape.element_type) if bb > 1 else
                _tile(pb, params, bnames, idx_t, loaded, dot.shape.element_type, split))
        src += ["", "@triton.jit", f"def gemm({', '.join(params + ['BLOCK: tl.constexpr', 'N: tl.constexpr'])}):",
                "    pid = tl.program_id(0)", "    for t in range(0, BLOCK):", "        tile = pid * BLOCK + t",
                "        if tile < N:"] + body
        variant = self._interpret_variant(cfg, pb) if bb == 1 and self.build_interpret_variant else None
        ks = KernelSource(name=ts.sanitize_identifier(f"gemm_{fusion.name}", "k"), source="\n".join(src) + "\n",
                          entry="gemm", params=tuple(ctx.params), constexprs={"BLOCK": 1, "N": tiles},
                          launch=LaunchDimensions(grid=(tiles,), num_warps=cfg.num_warps),
                          num_stages=cfg.num_stages, interpret_variant=variant,
                          notes=_notes(pb, [o.shape.element_type for o in fusion.operands]))
        return EmittedFusion(emitter=self.name, kernels=(ks,))

    def _interpret_variant(self, cfg: TritonGemmConfig, pb: _Problem) -> KernelSource | None:
        """The same arithmetic on bigger tiles: the interpreter pays per tile and per K step (each ``tl.dot`` call
        writes the whole accumulator), so XLA's small configs (16x8x16 tiles, thousands of programs, 48 K steps)
        would take minutes. ``block_m``/``block_n`` grow towards the whole output and ``block_k`` to
        :attr:`INTERPRET_BLOCK_K`: the operands are converted and rounded as in the GPU kernel and their products
        summed into the f32 (s32) accumulator as there; only the grouping of those f32 sums differs, as it does
        between the tensor core and numpy anyway. When one tile then covers a batch index's whole ``M x N``,
        batch indices are grouped (doubled while the padding past ``B`` stays within 1/8 of the work and the
        tiles within Triton's largest tensor)."""
        bm, bn, B, M, N = pb.bm, pb.bn, pb.B, pb.M, pb.N
        bk = max(pb.bk, min(self.INTERPRET_BLOCK_K, _pow2_at_least(pb.K, 16, self.INTERPRET_BLOCK_K)))
        bm_i = max(bm, _pow2_at_least(M, 16, self.INTERPRET_TILE))
        bn_i = max(bn, _pow2_at_least(N, 16, self.INTERPRET_TILE))
        while bm_i * bn_i > self.INTERPRET_TILE_ELEMENTS and max(bm_i // bm, bn_i // bn) > 1:
            if bm_i // bm >= bn_i // bn:
                bm_i //= 2
            else:
                bn_i //= 2
        bb_i = 1
        while (B > 1 and bm_i >= M and bn_i >= N and bb_i < B and -(-B // (2 * bb_i)) * 2 * bb_i * 8 <= B * 9
               and 2 * bb_i * max(bm_i * bn_i, bm_i * bk, bk * bn_i) <= TRITON_MAX_NUMEL):
            bb_i *= 2
        if (bm_i, bn_i, bk, bb_i) == (bm, bn, pb.bk, 1):
            return None
        big = attrs.evolve(cfg, block_m=bm_i, block_n=bn_i, block_k=bk)
        emitted = TritonGemmFusion(self.analysis, config=big, interpret_variant=False, block_batch=bb_i).emit()
        return emitted.kernels[0] if emitted.kernels else None


def _notes(pb: _Problem, operand_types: list[str]) -> tuple[str, ...]:
    """Where this kernel is knowingly not XLA's program (:attr:`KernelSource.notes`)."""
    out = []
    if pb.tk != pb.bk and pb.plan.lhs_type == "s8" and 2 * pb.bk == pb.tk:
        # z_i8_mm's PTX: mma.m16n8k32 on A {a0, a1, a0, a1} and B {b0, b0} of 16-deep tiles
        out.append(f"block_k={pb.bk} padded to {pb.tk} in registers (upstream Triton's smallest s8 tl.dot K; "
                   f"XLA's Triton fork feeds the {pb.bk}-deep tiles to the K-{pb.tk} MMA with each fragment repeated "
                   "in both K halves, summing each step's products twice): the staged tiles, so shared memory, "
                   "are larger than XLA's")
    elif pb.tk != pb.bk:
        out.append(f"block_k={pb.bk} padded to {pb.tk} in registers (upstream Triton's smallest "
                   f"{pb.plan.lhs_type} tl.dot K; XLA's Triton fork multiplies K={pb.bk}): the staged tiles, so "
                   "shared memory, are larger than XLA's")
    if any(t in ("s4", "u4", "s2", "u2") for t in operand_types):
        out.append("sub-byte operands are one element per byte in fusegen's buffers; XLA packs them "
                   "(Int4ToPackedInt4RewritePass), so its loads and shared memory differ")
    return tuple(out)


def _in_range(terms: list[tuple[str, int, int]]) -> str | None:
    """``(r0 < n0)[...] & ...`` over the ``(range variable, size, tile)`` terms whose tile overhangs its size, each
    broadcast along its own axis of a ``len(terms)``-D tile; ``None`` when no tile overhangs (nothing to mask)."""
    out = []
    for axis, (var, size, tile) in enumerate(terms):
        if tile is None or size % tile:
            sl = ", ".join(":" if a == axis else "None" for a in range(len(terms)))
            out.append(f"({var} < {size})[{sl}]")
    return " & ".join(out) if out else None


def _full_true(shape: list[int]) -> str:
    return f"tl.full({shape}, 1, tl.int1)"


#: K loops of more than this many steps stay loops, as in XLA's kernels (ptxas would unroll Triton's whole, so
#: it is marked ``nounroll`` in PTX); XLA's LLVM pipeline unrolls such a loop twice when its body only loads
#: the operand tiles (a prologue computing them makes the body too large for it, and so does the upcast of fp8
#: tiles to f16 below Triton's fp8 K: z_fp8_mm's 16x8x16 e4m3 kernel, six ``cvt.rn.f16x2.e4m3x2`` a step, is
#: one ``ld.global.b32`` + one ``ld.global.b16`` + one ``mma`` a step in XLA's PTX). Up to this many steps
#: ptxas unrolls the loop fully, in XLA's kernels too.
FULL_UNROLL_STEPS = 8
#: The same where the body also computes its tiles (a prologue: converts, arithmetic): a larger body, unrolled
#: by LLVM for fewer steps (a bf16 GEMM of f16 operands converted in the fusion, 8 steps of 16: XLA's kernel keeps
#: the loop, one load of each operand a step; fresh random program 100112).
PROLOGUE_UNROLL_STEPS = 4
_LOAD_OPS = ("parameter", "bitcast", "reshape", "transpose", "copy", "broadcast", "slice")


def _loads_only(operand: Instruction) -> bool:
    """Whether ``operand`` is computed by data movement alone (parameters through layout ops)."""
    stack, seen = [operand], set()
    while stack:
        i = stack.pop()
        if id(i) in seen:
            continue
        seen.add(id(i))
        if i.opcode not in _LOAD_OPS:
            return False
        stack.extend(i.operands)
    return True


def _k_loop(I: str, pb: _Problem) -> list[str]:
    """The K loop's header (and, for a long loop, its ``nounroll`` pragma as the loop body's first statement)."""
    steps = -(-pb.K // pb.bk)
    if steps <= FULL_UNROLL_STEPS and pb.tk != pb.bk:
        # a tile padded to Triton's smallest dot K (int8 block_k 16, bf16 block_k 8): the zeroing makes the
        # body too big for ptxas to unroll it, where XLA's steps are unrolled (u_i8_scaled: 8 IMMA, no loop)
        return [f"{I}for k0 in tl.static_range(0, {pb.K}, {pb.bk}):"]
    if steps <= (FULL_UNROLL_STEPS if pb.plain_operands else PROLOGUE_UNROLL_STEPS):
        return [f"{I}for k0 in range(0, {pb.K}, {pb.bk}):"]
    unroll = ", loop_unroll_factor=2" if steps % 2 == 0 and pb.plain_operands else ""
    return [f"{I}for k0 in tl.range(0, {pb.K}, {pb.bk}{unroll}):",
            f"{I}    {loop_unroll.nounroll_statement('nounroll')}"]


def _k_step_lines(I: str, pb: _Problem, P: str, a_args: str, b_args: str, rank: int, loaded: tuple[str, str],
                  la: list[int], lb: list[int], mask_a: list, mask_b: list) -> list[str]:
    """One K step (inside ``for k0``): the operand tiles (masked where they overhang), K lanes past K or past
    ``block_k`` zeroed, the conversions and the dot."""
    lead = ", ".join(["None"] * (rank - 2))
    lead = lead + ", " if lead else ""
    lines = [f"{I}rk = k0 + tl.arange(0, {pb.tk})"]
    k_terms = ("rk", pb.K, None if pb.k_masked else pb.bk)
    ma = _in_range(mask_a + [k_terms])
    mb = _in_range(mask_b[:-1] + [k_terms, mask_b[-1]])
    if pb.tk != pb.bk:  # padded step: lanes past this step's block_k belong to the next step
        lines.append(f"{I}kin = (rk < {pb.K}) & (rk < k0 + {pb.bk})")
    elif pb.k_masked:
        lines.append(f"{I}kin = rk < {pb.K}")
    if pb.k_masked:
        ma = ma.replace(f"(rk < {pb.K})", "kin")
        mb = mb.replace(f"(rk < {pb.K})", "kin")
    lines += [f"{I}a = lhs_tile({P}, {a_args}rk[{lead}None, :] + zero_a, {ma or _full_true(la)})",
              f"{I}b = rhs_tile({P}, {b_args}rk[{lead}:, None] + zero_b, i_n_b, {mb or _full_true(lb)})"]
    if pb.k_masked:  # the prologue may turn a masked 0 into something else (x + 1): zero the lanes after it
        lines += [f"{I}a = tl.where(kin[{lead}None, :], a, tl.full(a.shape, 0, a.dtype))",
                  f"{I}b = tl.where(kin[{lead}:, None], b, tl.full(b.shape, 0, b.dtype))"]
    lines += pb.plan.cast_lines(I, loaded)
    lines += pb.plan.dot_lines(I, pb.tk)
    return lines


def _tile_pieces(operand: Instruction, noncontracting: list[int], block: int) -> list[tuple] | None:
    """``[(piece, start, end)]`` of a dot operand that is a concatenate along its one non-contracting
    dimension, every piece a whole number of ``block`` tiles (so a tile reads one piece; the last may overhang
    the end, masked as usual); ``None`` otherwise."""
    if operand.opcode != "concatenate" or len(noncontracting) != 1 or len(operand.operands) < 2:
        return None
    (d,) = noncontracting
    if int_list(operand.attrs.get("dimensions"))[0] != d:
        return None
    out, start = [], 0
    for o in operand.operands:
        size = o.shape.dimensions[d]
        if size == 0:
            continue
        out.append((o, start, start + size))
        start += size
    if len(out) < 2 or any(st % block for _, st, _ in out):
        return None
    return out


def _tile(pb: _Problem, params: list[str], bnames: list[str], idx_t: str, loaded: tuple[str, str],
          out_et: str, split: tuple | None = None) -> list[str]:
    """Kernel lines for one ``block_m x block_n`` output tile (``tile``: batch-major, then M, then N tiles);
    ``split``: ``(tile function, tile index, block, pieces)`` of an operand concatenated at tile boundaries,
    whose K loop is written once per piece under a test of the tile index (XLA's kernel unswitches it so)."""
    I = " " * 12
    P = ", ".join(params)
    bm, bn, tk = pb.bm, pb.bn, pb.tk
    mt, nt = -(-pb.M // bm), -(-pb.N // bn)
    lines = [f"{I}n_t = tile % {nt}", f"{I}rest = tile // {nt}", f"{I}m_t = rest % {mt}", f"{I}b_t = rest // {mt}"]
    stride = 1
    for j in reversed(range(len(pb.bsizes))):
        lines.append(f"{I}{bnames[j]} = (b_t // {stride}) % {pb.bsizes[j]}")
        stride *= pb.bsizes[j]
    bargs = "".join(f"{b}, " for b in bnames)
    lines += [
        f"{I}rm = (m_t * {bm} + tl.arange(0, {bm})).to({idx_t})",
        f"{I}rn = (n_t * {bn} + tl.arange(0, {bn})).to({idx_t})",
        f"{I}zero_a = tl.full([{bm}, {tk}], 0, {idx_t})",
        f"{I}zero_b = tl.full([{tk}, {bn}], 0, {idx_t})",
        f"{I}i_m_a = rm[:, None] + zero_a",
        f"{I}i_n_b = rn[None, :] + zero_b",
        f"{I}acc = tl.full([{bm}, {bn}], 0, {pb.plan.acc_t})",
    ]

    def k_loop(indent: str) -> list[str]:
        return _k_loop(indent, pb) + _k_step_lines(indent + "    ", pb, P, f"{bargs}i_m_a, ", bargs, 2, loaded,
                                                   [bm, tk], [tk, bn], [("rm", pb.M, bm)], [("rn", pb.N, bn)])

    if split is None:
        lines += k_loop(I)
    else:
        name, t, blk, pieces = split
        for k, (_, _, end) in enumerate(pieces):
            head = "if" if k == 0 else "elif"
            lines.append(f"{I}{head} {t} * {blk} < {end}:" if k < len(pieces) - 1 else f"{I}else:")
            lines += [ln.replace(f"{name}(", f"{name}_{k}(") for ln in k_loop(I + "    ")]
    smask = _in_range([("rm", pb.M, bm), ("rn", pb.N, bn)]) or _full_true([bm, bn])
    lines += [
        f"{I}zero_o = tl.full([{bm}, {bn}], 0, {idx_t})",
        f"{I}epilogue({P}, {bargs}rm[:, None] + zero_o, rn[None, :] + zero_o, acc.to({ts.tl_dtype(out_et)}), "
        f"{smask})",
    ]
    return lines


def _batched_tile(pb: _Problem, bb: int, params: list[str], bnames: list[str], idx_t: str,
                  loaded: tuple[str, str], out_et: str) -> list[str]:
    """Kernel lines for one tile of ``bb`` batch indices x the whole ``M x N`` (``bm >= M``, ``bn >= N``): per K
    step a ``[bb, bm, tk] x [bb, tk, bn]`` ``tl.dot``, each batch index's product the 2-D one's. The device
    functions get the batch indices as tiles beside ``i_m``/``i_k``/``i_n``."""
    I = " " * 12
    P = ", ".join(params)
    bm, bn, tk = pb.bm, pb.bn, pb.tk
    la, lb, lo = [bb, bm, tk], [bb, tk, bn], [bb, bm, bn]
    lines = [f"{I}rb = (tile * {bb} + tl.arange(0, {bb})).to({idx_t})",
             f"{I}rm = tl.arange(0, {bm}).to({idx_t})", f"{I}rn = tl.arange(0, {bn}).to({idx_t})",
             f"{I}zero_a = tl.full({la}, 0, {idx_t})", f"{I}zero_b = tl.full({lb}, 0, {idx_t})",
             f"{I}zero_o = tl.full({lo}, 0, {idx_t})"]
    stride = 1
    for j in reversed(range(len(pb.bsizes))):
        lines.append(f"{I}{bnames[j]} = ((rb // {stride}) % {pb.bsizes[j]})[:, None, None]")
        stride *= pb.bsizes[j]
    args = {t: "".join(f"{n} + zero_{t}, " for n in bnames) for t in "abo"}
    lines += [f"{I}i_m_a = rm[None, :, None] + zero_a", f"{I}i_n_b = rn[None, None, :] + zero_b",
              f"{I}acc = tl.full({lo}, 0, {pb.plan.acc_t})"] + _k_loop(I, pb)
    lines += _k_step_lines(I + "    ", pb, P, f"{args['a']}i_m_a, ", args["b"], 3, loaded, la, lb,
                           [("rb", pb.B, bb), ("rm", pb.M, bm)], [("rb", pb.B, bb), ("rn", pb.N, bn)])
    smask = _in_range([("rb", pb.B, bb), ("rm", pb.M, bm), ("rn", pb.N, bn)]) or _full_true(lo)
    lines.append(f"{I}epilogue({P}, {args['o']}rm[None, :, None] + zero_o, rn[None, None, :] + zero_o, "
                 f"acc.to({ts.tl_dtype(out_et)}), {smask})")
    return lines


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def create(analysis: Any, context: Any = None) -> TritonGemmFusion | None:
    """Factory: a :class:`TritonGemmFusion` for GEMM-stamped fusions; ``None`` (decline) for anything else."""
    if analysis.fusion.fusion_backend_kind not in GEMM_KINDS:
        return None
    return TritonGemmFusion(analysis)
