"""The concatenate emitter: one pass per operand, each writing its slice of the output.

Mirrors XLA's ``ConcatenateFusion`` (``xla/backends/gpu/codegen/emitters/concatenate.cc``): the launch
covers the largest operand (``ComputeLoopFusionConfig`` on its shape); for each operand the threads whose
linear index lies inside that operand compute it at its own index (its fused prologue, read in the
operand's physical order), shift the index along the concatenated dimension by the operand's offset,
inject the value as the concatenate's value there and compute the epilogue (elementwise/bitcast ops
between the concatenate and the root) at the output index. No lane evaluates a select over all
operands.

Nested concatenates: a concatenate operand that is itself a concatenate along the same dimension (used
only by the hero) is flattened into its operands, each with offset ``outer + inner`` (its *own* offsets).
Any other concatenate inside the fusion is emitted elementally with its own offsets (fusegen's
elemental generator) — the failure of jax-ml/jax#40588 (corpus bug B10), where an inner concatenate was
indexed with the outer one's offsets, cannot arise.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import ElementalGenerator, KernelContext, choose_index_dtype, deep_recursion, int_list
from fusegen.codegen.elemental.vector_reads import plain_vector_type
from fusegen.codegen.emitter import EmitterUnsupported, FusionEmitter, store_line
from fusegen.codegen.launch import LoopGeometry, analysis_loop_geometry, calculate_launch_dimensions
from fusegen.codegen.thread_indexing import default_thread_id_indexing_map
from fusegen.indexing import IndexingMap
from fusegen.codegen.kernel import EmittedFusion, KernelSource, LaunchDimensions
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory
from fusegen_plugins.emitters._hero_kernel import flatten, root_leaves, seed_value

#: ``UseConcatenateFusion`` (``hlo_fusion_analysis.cc``): at most this many concatenate operands.
MAX_CONCATENATE_OPERANDS = 4


def concat_dimension(inst: Instruction) -> int:
    dims = int_list(inst.attrs.get("dimensions"))
    if len(dims) != 1:
        raise EmitterUnsupported(inst.opcode, inst.name, f"concatenate needs one dimension, got {dims}")
    return dims[0]


def concat_pieces(hero: Instruction) -> list[tuple[Instruction, int]]:
    """``(operand, offset along the concatenated dimension)`` of each pass, nested same-dimension
    concatenates (whose only user is their parent) flattened with their own offsets added."""
    k = concat_dimension(hero)
    out: list[tuple[Instruction, int]] = []

    def walk(inst: Instruction, base: int) -> None:
        off = base
        for o in inst.operands:
            if (o.opcode == "concatenate" and concat_dimension(o) == k and len(o.users) == 1
                    and o.shape.minor_to_major() == hero.shape.minor_to_major()):
                walk(o, off)
            else:
                out.append((o, off))
            off += o.shape.dimensions[k]

    walk(hero, 0)
    return out


def _stride(dims: Any, m2m: Any, k: int) -> int:
    """Elements between consecutive indices of dimension ``k`` in a layout ``m2m`` of ``dims``."""
    stride = 1
    for d in m2m:
        if d == k:
            return stride
        stride *= dims[d]
    return stride


class ConcatenateFusion(FusionEmitter):
    """Emitter for ``kConcatenate`` fusions (XLA ``ConcatenateFusion``).

    The hero is the fusion's concatenate (``analysis.heroes``); every root must reach it through
    elementwise/bitcast ops with the same element count. ``emit()`` raises :class:`EmitterUnsupported`
    otherwise, or when an op of the fused computation cannot be generated.
    """

    name: ClassVar[str] = "ConcatenateFusion"

    def hero(self) -> Instruction:
        heroes = list(getattr(self.analysis, "heroes", None) or [])
        if not heroes:
            raise EmitterUnsupported("fusion", self.fusion.name, "no hero")
        h = heroes[0]
        if h.opcode != "concatenate" or any(x is not h for x in heroes):
            raise EmitterUnsupported(h.opcode, h.name, "the fusion's heroes are not one concatenate")
        return h

    def geometry(self) -> LoopGeometry:
        """XLA's launch (``ConcatenateFusion::launch_dimensions``): ``CalculateLaunchDimensions`` of the largest
        operand's shape with ``ComputeLoopFusionConfig`` on that shape; a program is one XLA block."""
        hero = self.hero()
        k = int_list(hero.attrs.get("dimensions"))[0]
        # GetLargestConcatOperandShape: the longest along the concatenated dimension (the first of equals)
        largest = max((o.shape for o in hero.operands), key=lambda s: s.dimensions[k])
        geo = analysis_loop_geometry(self.analysis, largest)
        # ComputeUnrollFactor: the unroll divides every operand's concatenated extent (a roll's 3 + 1021
        # columns: one element a thread), and the launch is made with it
        unroll = geo.unroll
        for o in hero.operands:
            unroll = math.gcd(unroll, o.shape.dimensions[k])
        if unroll == geo.unroll:
            return geo
        return calculate_launch_dimensions(largest.numel, self.analysis.device, unroll)

    def launch_dimensions(self) -> LaunchDimensions | None:
        return self.geometry().launch()

    def thread_id_to_output_indexing(self, root_index: int) -> None:
        """``ConcatenateFusion::ComputeThreadIdToOutputIndexing``: none (each operand's pass writes its slice)."""
        return None

    def thread_id_to_input_indexing(self, root_index: int, hero_operand_index: int) -> IndexingMap:
        """``ConcatenateFusion::ComputeThreadIdToInputIndexing``: the default thread map over the largest
        operand's shape (every operand is read at the thread's own index)."""
        geo = self.geometry()
        largest = max((o.shape for o in self.hero().operands), key=lambda s: s.numel)
        return default_thread_id_indexing_map(geo.launch(), geo.unroll, largest)

    def largest_operand_elements(self) -> int:
        return max((o.shape.numel for o, _ in concat_pieces(self.hero())), default=0)

    def emit(self) -> EmittedFusion:
        fusion = self.fusion
        comp = self.computation
        hero = self.hero()
        roots = list(self.analysis.roots)
        leaves = root_leaves(fusion, roots)
        for root in roots:
            if root.shape.numel != hero.shape.numel:
                raise EmitterUnsupported(root.opcode, root.name,
                                         f"root has {root.shape.numel} elements, the concatenate {hero.shape.numel}")
        kdim = concat_dimension(hero)
        pieces = [(o, off) for o, off in concat_pieces(hero) if o.shape.numel > 0]
        n_max = max((o.shape.numel for o, _ in pieces), default=0)
        if n_max == 0:
            return EmittedFusion(emitter=self.name)
        geometry = self.geometry()
        block = 1 << max(0, geometry.elements_per_block - 1).bit_length()
        gx, gy = geometry.blocks
        op_shapes = [o.shape for o in fusion.operands]
        idx_t = choose_index_dtype(op_shapes + list(leaves), max(block, 4096))
        ctx = KernelContext(idx_t, op_shapes)
        # operand indices are clamped into range; loads and stores carry the pass's mask (set per pass)
        ctx.names.reserve("start")
        gen = ElementalGenerator(ctx, comp)
        h_dims, h_m2m = hero.shape.dimensions, hero.shape.minor_to_major()
        # jnp.stack(..., axis=-1): every operand one element along the minor concatenated dimension, all roots
        # laid out as the concatenate: the k passes' values are stored as one k-element vector a lane (XLA's
        # vectoriser merges the k adjacent stores)
        k_stack = len(pieces)
        et_ok = all(plain_vector_type(ls.element_type) and dtypes.bit_width(ls.element_type) * k_stack <= 128
                    for ls in leaves)
        stacked = (k_stack in (2, 4, 8) and h_m2m[0] == kdim and et_ok
                   and all(o.shape.dimensions[kdim] == 1 for o, _ in pieces)
                   and all(ls.dimensions == h_dims and ls.minor_to_major() == h_m2m for ls in leaves))
        stack_vals: dict[int, list[str]] = {}
        exact_grid = n_max % block == 0 and gx * gy == n_max // block
        full_lin: str | None = None
        stack_off: dict[int, str] = {}
        with deep_recursion():
            for p, (op, off) in enumerate(pieces):
                n = op.shape.numel
                ctx.body.line(f"# pass {p}: operand %{ts.sanitize_identifier(op.name)} -> output offset {off}")
                # the clamp moves only lanes past the operand, which the pass's mask keeps from every load and
                # store: lin_p keeps lin's contiguity for Triton's vectoriser (XLA's unrolled 16-byte accesses)
                bound = "N - 1" if n == n_max else str(n - 1)
                if n < n_max:
                    # a program wholly past this operand skips its pass (XLA branches per thread on the operand
                    # the index lies in): the pass's values are not live beside the others'
                    ctx.body.line(f"if start < {n}:")
                    ctx.body.indent()
                    gen.push_scope()
                clamped = f"tl.max_contiguous(tl.multiple_of(tl.minimum(lin, {bound}), BLOCK), BLOCK)"
                if n == n_max and full_lin is not None:
                    lin_p, mask_p = full_lin, "mask"  # one index for every largest operand: their reads share it
                elif exact_grid or n < n_max:
                    # the pass's programs lie wholly inside the operand (XLA's grid covers N exactly; a smaller
                    # operand a multiple of BLOCK, under `start < n`): no clamp, and the mask is a constant
                    # (x_concat0: 14 -> 10 registers, XLA's 10)
                    lin_p = ctx.names.fresh("lin_p")
                    taken = [f"{lin_p} = tl.max_contiguous(tl.multiple_of(lin, BLOCK), BLOCK)"]
                    other = [f"{lin_p} = {clamped}"]
                    mask_p = "mask"
                    if n < n_max:
                        mask_p = ctx.names.fresh("mask_p")
                        taken.append(f"{mask_p} = {ts.true_mask()}")
                        other.append(f"{mask_p} = lin < {n}")
                    for x in ts.constexpr_branches(f"{'N' if n == n_max else n} % BLOCK == 0", taken, other):
                        ctx.body.line(x)
                else:
                    lin_p = gen.iexpr(clamped, "lin_p")
                    mask_p = "mask" if n == n_max else ctx.emit(f"lin < {n}", "mask_p")
                if n == n_max:
                    full_lin = lin_p
                ctx.mask = mask_p
                idx = gen.delinearize(lin_p, op.shape.dimensions, op.shape.minor_to_major())
                v = gen.value(op, idx)
                if isinstance(v, list):
                    raise EmitterUnsupported(op.opcode, op.name, "tuple-valued concatenate operand")
                out_idx = tuple(gen.iadd(c, off) if j == kdim else c for j, c in enumerate(idx))
                seed_value(gen, hero, out_idx, v)
                if op.shape.minor_to_major() == h_m2m and [x for x in h_m2m if h_dims[x] != 1][-1:] == [kdim]:
                    # concatenated along the most major dimension: the output position is the operand's plus the
                    # offset's rows (no division of the linear index, as XLA's simplified index map)
                    lin_h = gen.iadd(lin_p, off * _stride(h_dims, h_m2m, kdim))
                    gen._lin_of[-1][(tuple(out_idx), tuple(h_dims), tuple(h_m2m))] = lin_h
                else:
                    lin_h = gen.linearize(out_idx, h_dims, h_m2m)
                alias = gen.delinearize(lin_h, h_dims, h_m2m)  # the index bitcast epilogues map back to
                if tuple(alias) != out_idx:
                    seed_value(gen, hero, alias, v)
                for k, root in enumerate(roots):
                    ls = leaves[k]
                    same = ls.dimensions == h_dims and ls.minor_to_major() == h_m2m
                    ridx = out_idx if same else gen.delinearize(lin_h, ls.dimensions, ls.minor_to_major())
                    (val,) = flatten(gen.value(root, ridx))
                    if stacked:
                        stack_vals.setdefault(k, []).append(val)
                        if p == 0:
                            stack_off[k] = gen.itensor(gen.linearize(ridx, ls.dimensions, ls.minor_to_major()))
                        continue
                    ptr = ctx.param("output", k, ls, f"out{k}")
                    store_line(gen, ptr, gen.linearize(ridx, ls.dimensions, ls.minor_to_major()), val,
                               ls.element_type, mask_p)
                if n < n_max:
                    gen.pop_scope()
                    ctx.body.dedent()
        for k, vals in stack_vals.items():
            ptr = ctx.param("output", k, leaves[k], f"out{k}")
            vec = gen.joined_columns(vals, "BLOCK")
            ctx.body.line(f"tl.store({ptr} + ({stack_off[k]}[:, None] + tl.arange(0, {len(vals)})[None, :]), {vec}, "
                          "mask=mask[:, None])")
        pid = "tl.program_id(0)" if gy == 1 else f"(tl.program_id(1) * {gx} + tl.program_id(0))"
        if idx_t == "tl.int64":
            pid = f"{pid}.to(tl.int64)"
        mask = ts.constexpr_branches("N % BLOCK == 0", [f"mask = {ts.true_mask()}"], ["mask = lin < N"]) \
            if exact_grid else ["mask = lin < N"]
        prologue = [f"start = {pid} * BLOCK", "lin = start + tl.arange(0, BLOCK)", *mask,
                    f"zero = tl.full([BLOCK], 0, {idx_t})"]
        entry = ts.sanitize_identifier(f"concatenate_{fusion.name}", "k")
        source = ctx.render(entry, ["BLOCK", "N"], prologue)
        variant = None
        if gy == 1 and n_max > block and block < 4096:  # wider programs for the interpreter, same source
            variant = KernelSource(name=entry, source=source, entry=entry, params=tuple(ctx.params),
                                   constexprs={"BLOCK": 4096, "N": n_max},
                                   launch=LaunchDimensions(grid=(-(-n_max // 4096),)), num_stages=1)
        ks = KernelSource(name=entry, source=source, entry=entry, params=tuple(ctx.params),
                          constexprs={"BLOCK": block, "N": n_max}, launch=geometry.launch(), num_stages=1,
                          interpret_variant=variant)
        return EmittedFusion(emitter=self.name, kernels=(ks,))


def _create(analysis: Any, context: Any = None) -> ConcatenateFusion | None:
    heroes = list(getattr(analysis, "heroes", None) or [])
    if not heroes or heroes[0].opcode != "concatenate" or any(h is not heroes[0] for h in heroes):
        return None
    if len(heroes[0].operands) > MAX_CONCATENATE_OPERANDS:
        return None
    return ConcatenateFusion(analysis)


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="concatenate", kind="kConcatenate", rank=100, create=_create)]
