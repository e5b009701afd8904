"""The block-level Triton emitter for ``__triton`` fusions (softmax-like normalizations).

Mirrors XLA's generic Triton fusion emitter (``xla/backends/gpu/codegen/triton/fusion_emitter.cc``,
``EmitGeneric``) driven by ``block_level_fusion_config``: one program per output tile of the configured
``output_tiles[0].sizes``, ``num_warps`` warps. Within a tile, elementwise ops, broadcasts and the other index ops
are generated with :class:`fusegen.codegen.elemental.ElementalGenerator` over the tile's lanes; a ``reduce``
whose reduced dimensions the tile covers entirely is computed on the tile (``tl.sum``/``tl.max``/``tl.min`` after
masking the lanes outside the array, combined with the init value) and broadcast back to the lanes, as the tiled
reduction of XLA's emitter does. Reductions the tile does not cover, or read at indices other than the tile's own,
make the emitter decline (the fusion then runs on the host backend, with the reason).

Launch: a 1-D grid over tiles; the kernel handles ``BLOCK`` consecutive tiles per program out of ``N`` (``BLOCK=1``
as emitted), the linear-index convention the interpreter may widen.
"""

from __future__ import annotations

from typing import Any

import attrs

from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import ElementalGenerator, KernelContext, choose_index_dtype, deep_recursion, int_list
from fusegen.codegen.emitter import EmitterUnsupported, FusionEmitter, fusion_roots, store_line
from fusegen.codegen.kernel import EmittedFusion, KernelSource, LaunchDimensions
from fusegen.hlo.ir import Computation, Instruction

#: reducer root -> combine function of ``tl.reduce`` (the interpreter maps these to numpy reductions; Triton's
#: ``tl.sum``/``tl.max`` are ``@jit`` helpers the interpreter cannot call from a plain ``JITFunction`` module)
_COMBINERS = {"add": "tl.standard._sum_combine", "maximum": "tl.standard._elementwise_max",
              "minimum": "tl.standard._elementwise_min"}


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


class _TileGen(ElementalGenerator):
    """ElementalGenerator that computes covered reductions on the tile."""

    tile: tuple[int, ...] = ()
    lane_idx: tuple[str, ...] = ()
    dims: tuple[int, ...] = ()

    def _emit(self, inst: Instruction, idx: tuple) -> Any:
        if inst.opcode == "reduce" and self.bindings is None:
            return self._tile_reduce(inst, idx)
        return super()._emit(inst, idx)

    def _tile_reduce(self, inst: Instruction, idx: tuple) -> str:
        if len(inst.operands) != 2 or inst.shape.is_tuple:
            raise EmitterUnsupported("reduce", inst.name, "variadic reductions are not supported by the block-level emitter")
        src, init = inst.operands
        if tuple(src.shape.dimensions) != self.dims:
            # Not a reduction over the tile (e.g. a split-K partial sum feeding a layer norm): compute it
            # per lane with the elemental generator's loop over the reduced elements.
            return super()._emit(inst, idx)
        rdims = sorted(int_list(inst.attrs.get("dimensions")))
        kept = [d for d in range(len(self.dims)) if d not in rdims]
        if tuple(idx) != tuple(self.lane_idx[d] for d in kept):
            raise EmitterUnsupported("reduce", inst.name, "reduction read at indices other than the tile's")
        for d in rdims:
            if self.tile[d] < self.dims[d]:
                raise EmitterUnsupported("reduce", inst.name, f"output tile does not cover reduced dimension {d}")
        comp = inst.attrs.get("to_apply")
        op = comp.root.opcode if isinstance(comp, Computation) and comp.root is not None else ""
        if op not in _COMBINERS or not all(o.opcode == "parameter" for o in comp.root.operands):
            raise EmitterUnsupported("reduce", inst.name, f"reducer {op!r} is not add/maximum/minimum")
        et = inst.shape.element_type
        ct = self.compute_type(et)
        x = self.up(self.value(src, self.lane_idx), et)
        init_v = self.up(self.value(init, ()), et)
        shape = "[" + ", ".join(str(t) for t in self.tile) + "]"
        if op == "add":
            ident = ts.float_constant(0.0, ct, shape) if ct.startswith("f") else ts.int_constant(0, ct, shape)
        else:
            if ct.startswith("f"):
                ident = ts.float_constant(float("-inf") if op == "maximum" else float("inf"), ct, shape)
            else:
                import numpy as np

                from fusegen.hlo import dtypes

                info = np.iinfo(dtypes.numpy_dtype(ct))
                ident = ts.int_constant(int(info.min if op == "maximum" else info.max), ct, shape)
        xt = self.ctx.emit(f"tl.where(tl.reshape(valid, {shape}), tl.reshape({x}, {shape}), {ident})", "rin")
        r = xt
        for d in reversed(rdims):
            r = self.ctx.emit(f"tl.reduce({r}, {d}, {_COMBINERS[op]}, keep_dims=True)", "red")
        r = self.ctx.emit(f"tl.reshape(tl.broadcast_to({r}, {shape}), [BLOCK])", "redb")
        if op == "add":
            r = self.ctx.emit(f"{r} + {init_v}", "red")
        elif op == "maximum":
            r = self.ctx.emit(f"tl.maximum({r}, {init_v})", "red")
        else:
            r = self.ctx.emit(f"tl.minimum({r}, {init_v})", "red")
        return self.down(r, et, inst.name)


#: Triton's largest tensor (``TRITON_MAX_TENSOR_NUMEL``), the bound XLA checks block-level tiles against.
MAX_TENSOR_NUMEL = 1048576


class TritonBlockLevelFusion(FusionEmitter):
    """Block-level emitter for ``__triton`` fusions (see the module docstring)."""

    name = "TritonBlockLevelFusion"

    def _config(self) -> tuple[list[int], int, int]:
        fbc = self.fusion.backend_config.get("fusion_backend_config") or {}
        blc = fbc.get("block_level_fusion_config") or {}
        tiles = blc.get("output_tiles") or []
        if not tiles:
            raise EmitterUnsupported("fusion", self.fusion.name, "no block_level_fusion_config.output_tiles")
        sizes = [int(x) for x in tiles[0].get("sizes", [])]
        return sizes, int(blc.get("num_warps", 4) or 4), int(blc.get("num_stages", 1) or 1)

    def emit(self) -> EmittedFusion:
        fusion = self.fusion
        roots = fusion_roots(self.computation)
        if len(roots) != 1 or roots[0].shape.is_tuple:
            raise EmitterUnsupported("fusion", fusion.name, "multi-output __triton fusions are not supported")
        dims = tuple(roots[0].shape.dimensions)
        sizes, warps, stages = self._config()
        if len(sizes) != len(dims):
            raise EmitterUnsupported("fusion", fusion.name, f"output tile rank {len(sizes)} != root rank {len(dims)}")
        ks = self._kernel(roots[0], dims, sizes, warps, stages)
        if ks is None:
            return EmittedFusion(emitter=self.name)
        wide = interpret_tile_sizes(dims, sizes)
        if wide != sizes:
            variant = self._kernel(roots[0], dims, wide, warps, stages)
            if variant is not None and variant.params == ks.params:
                ks = attrs.evolve(ks, interpret_variant=variant)
        return EmittedFusion(emitter=self.name, kernels=(ks,))

    def _kernel(self, root: Instruction, dims: tuple[int, ...], sizes: list[int], warps: int,
                stages: int) -> KernelSource | None:
        """The kernel for output tiles of ``sizes`` (``None`` when the output is empty)."""
        fusion = self.fusion
        tile = tuple(_pow2(max(1, s)) for s in sizes)
        counts = [-(-d // max(1, s)) for d, s in zip(dims, sizes)]
        ntiles = 1
        for c in counts:
            ntiles *= c
        lanes = 1
        for t in tile:
            lanes *= t
        if ntiles == 0:
            return None
        if lanes > MAX_TENSOR_NUMEL:
            # XLA rejects such a tiling too (triton fusion emitter's tile-size constraint).
            raise EmitterUnsupported("fusion", fusion.name, f"tile of {lanes} elements exceeds the maximum allowed "
                                                            f"tensor size of {MAX_TENSOR_NUMEL} elements")
        op_shapes = [o.shape for o in fusion.operands]
        idx_t = choose_index_dtype(op_shapes + [fusion.shape], lanes)
        ctx = KernelContext(idx_t, op_shapes)
        for n in ("tile", "valid", "BLOCK", "N") + tuple(f"g{d}" for d in range(len(dims))):
            ctx.names.reserve(n)
        body = ts.SourceBuilder()
        body.level = 1
        ctx.body = body
        gen = _TileGen(ctx, self.computation)
        gen.tile, gen.dims = tile, dims
        gen.lane_idx = tuple(f"g{d}" for d in range(len(dims)))
        with deep_recursion():
            v = gen.value(root, gen.lane_idx)
        out_shape = fusion.shape
        ptr = ctx.param("output", 0, out_shape, "out")
        off = gen.linearize(gen.lane_idx, out_shape.dimensions, out_shape.minor_to_major())
        store_line(gen, ptr, off, v, out_shape.element_type, "valid")
        params = list(ctx.param_names)
        pre = [f"zero = tl.full([BLOCK], 0, {idx_t})", "mask = zero == 0",
               f"lane = tl.arange(0, BLOCK).to({idx_t})"]
        # tile origin per dim (tiles in row-major order of the tile grid), lane coordinates row-major in the tile
        stride_t = 1
        strides_t = []
        for c in reversed(counts):
            strides_t.append(stride_t)
            stride_t *= c
        strides_t.reverse()
        stride_l = 1
        strides_l = []
        for t in reversed(tile):
            strides_l.append(stride_l)
            stride_l *= t
        strides_l.reverse()
        valid = []
        for d in range(len(dims)):
            pre.append(f"o{d} = ((tile // {strides_t[d]}) % {counts[d]}) * {sizes[d]}")
            pre.append(f"l{d} = (lane // {strides_l[d]}) % {tile[d]}")
            pre.append(f"u{d} = l{d} + o{d}")
            cond = f"(u{d} < {dims[d]})"
            if tile[d] > sizes[d]:
                cond += f" & (l{d} < {sizes[d]})"
            valid.append(cond)
            pre.append(f"g{d} = tl.minimum(u{d}, {dims[d] - 1})")
        pre.append("valid = " + (" & ".join(valid) if valid else "mask"))
        src = ts.module_header()
        src.insert(4, "from fusegen_plugins.backends.triton_devfn import device_jit")
        src += ["", "@device_jit", f"def tile_fn({', '.join(params + ['tile', 'BLOCK: tl.constexpr'])}):"]
        src += ["    " + p for p in pre]
        src += body.lines
        src += ["", "@triton.jit", f"def block_level({', '.join(params + ['BLOCK: tl.constexpr', 'N: tl.constexpr'])}):",
                "    pid = tl.program_id(0)", "    for t in range(0, BLOCK):", "        tile = pid * BLOCK + t",
                "        if tile < N:", f"            tile_fn({', '.join(params)}, tile, {lanes})"]
        name = ts.sanitize_identifier(f"block_{fusion.name}", "k")
        return KernelSource(name=name, source="\n".join(src) + "\n", entry="block_level", params=tuple(ctx.params),
                            constexprs={"BLOCK": 1, "N": ntiles},
                            launch=LaunchDimensions(grid=(ntiles,), num_warps=warps), num_stages=stages)


#: Lanes per tile of the interpreter variant: the interpreter's cost is per tile, numpy's per element.
INTERPRET_TILE_LANES = 1 << 17


def interpret_tile_sizes(dims: tuple[int, ...], sizes: list[int], max_lanes: int = INTERPRET_TILE_LANES) -> list[int]:
    """Output tile sizes of the interpreter variant: ``sizes`` grown (innermost dimension first, by powers
    of two, at most to the dimension) while the power-of-two tile stays within ``max_lanes``.

    A larger tile computes the same values: every reduction on the tile already covers its reduced
    dimensions entirely and folds each kept position on its own (the same pairwise tree), and the
    elementwise part is per lane. ``sizes`` is returned unchanged when it already exceeds ``max_lanes``.
    """
    out = [max(1, s) for s in sizes]

    def lanes(ss: list[int]) -> int:
        n = 1
        for s in ss:
            n *= _pow2(s)
        return n

    for d in reversed(range(len(dims))):
        while out[d] < dims[d]:
            grown = list(out)
            grown[d] = min(out[d] * 2, dims[d])
            if lanes(grown) > max_lanes:
                break
            out = grown
    return out


def create(analysis: Any, context: Any = None) -> TritonBlockLevelFusion | None:
    """Factory: ``__triton`` fusions with a ``block_level_fusion_config``; ``None`` (decline) otherwise."""
    f = analysis.fusion
    if f.fusion_backend_kind != "__triton":
        return None
    fbc = f.backend_config.get("fusion_backend_config") or {}
    if not isinstance(fbc.get("block_level_fusion_config"), dict):
        return None
    return TritonBlockLevelFusion(analysis)
