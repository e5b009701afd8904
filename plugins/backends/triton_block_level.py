"""The block-level Triton emitter for ``__triton`` fusions (softmax-like normalizations).

Mirrors XLA's generic Triton fusion emitter (``xla/backends/gpu/codegen/triton/fusion_emitter.cc``,
``EmitGeneric``) driven by ``block_level_fusion_config``: one program per output tile of the configured
``output_tiles[0].sizes``, ``num_warps`` warps. Within a tile, elementwise ops, broadcasts and the other index ops
are generated with :class:`fusegen.codegen.elemental.ElementalGenerator` over the tile's lanes; a ``reduce``
whose reduced dimensions the tile covers entirely is computed on the tile (``tl.sum``/``tl.max``/``tl.min`` after
masking the lanes outside the array, combined with the init value) and broadcast back to the lanes, as the tiled
reduction of XLA's emitter does. As XLA's symbolic tile propagation gives a reduce operand the full reduced
extent, the other reductions run in a device function on the operand's tile, in this order:

* an operand that is the tile's array with unit dimensions dropped or added (a bitcast of ``[1, R, C]`` to
  ``[R, C]``) is read at the tile's index without them, and reduced as the tile's own array;
* a row statistic over a row the tile holds part of, read back at the lane's own kept index: once per program on
  the tile along the kept dimensions by the whole row (``row_tile``), a statistic nested in it an ordinary
  tile reduce there;
* a reduce whose result has the tile's shape over an operand with more dimensions: on the extended tile
  (``ext_tile``);
* a reduce of its operand's every dimension (a scalar normaliser): on the whole array once per program
  (``whole_tile``);
* anything else read at other indices: a ``[lanes, reduced]`` sub-tile per output lane at the indices it reads,
  or, where even that does not fit, the elemental generator's loop per lane.

Launch: a 1-D grid over tiles; the kernel handles ``BLOCK`` consecutive tiles per program out of ``N`` (``BLOCK=1``
as emitted), the linear-index convention the interpreter may widen.
"""

from __future__ import annotations

from typing import Any

from fusegen.pow2 import next_pow2
from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import (COMPLEX_PARTS, ElementalGenerator, KernelContext, choose_index_dtype,
                                      deep_recursion, int_list)
from fusegen.codegen.emitter import EmitterUnsupported, FusionEmitter, fusion_roots, store_line
from fusegen.codegen.kernel import (INTERPRET_TILE_LANES, EmittedFusion, KernelSource, LaunchDimensions,
                                    interpret_tile_sizes)
from fusegen.hlo.ir import Computation, Instruction
from fusegen_plugins.backends.triton_block_level_tiles import (MAX_TENSOR_NUMEL, PARAMS_TOKEN, broadcast_map,
                                                               feeds_reduce, lane_invariant, reduce_identity,
                                                               reduced_count, reshaped_rows, row_major_strides,
                                                               tile_coordinates, unit_map)

#: reducer root -> combine function of ``tl.reduce``: Triton's ``_sum_combine``, and NaN-propagating maximum /
#: minimum written into the module (``tl.standard._elementwise_max`` drops NaNs on the GPU, XLA's maximum keeps
#: them: ``max.NaN.f32``). Their ``fg_combine_`` prefix lets the interpreter fold them vectorised
#: (:func:`fusegen.codegen.interpreter_patches.patch_reduce`).
_COMBINERS = {"add": "tl.standard._sum_combine", "maximum": "fg_combine_maximum", "minimum": "fg_combine_minimum"}
_COMBINE_FNS = ["", "@triton.jit", "def fg_combine_maximum(a, b):",
                "    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)",
                "", "@triton.jit", "def fg_combine_minimum(a, b):",
                "    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)"]


class _TileGen(ElementalGenerator):
    """ElementalGenerator that computes covered reductions on the tile."""

    tile: tuple[int, ...] = ()
    lane_idx: tuple[str, ...] = ()
    #: the tile coordinates' definitions (``g<d>``, ``l<d>``) where the kernel writes them after its body
    coordinate_lines: tuple[str, ...] = ()
    #: a one-row sub-tile function's generator: its kept indices are scalars (``_sub_tile_reduce(rows=1)``)
    one_row: bool = False
    #: names of the reduces reduced as one row (the emitter's set, shared with sub-generators; None: not kept)
    one_rows: set | None = None
    #: in the interpreter's variant: the reduces the compiled program reduces as one row
    variant_of: frozenset = frozenset()
    #: [count] of reduces generated in sub-tile functions as a [lanes, R] sub-tile or a per-lane loop (shared)
    wide: list = (0,)
    dims: tuple[int, ...] = ()
    block: int = 1
    sizes: tuple[int, ...] | list[int] = ()
    counts: tuple[int, ...] | list[int] = ()
    #: per dimension, the stride and count of the kernel's tile index (empty: ``counts``, row-major)
    tile_strides: tuple[int, ...] = ()
    grid_counts: tuple[int, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        #: (name, formals, body lines, return value) of the kernel's sub-tile functions (shared with sub-generators)
        self.subfns: list[tuple[str, list[str], list[str], str]] = []

    def _emit(self, inst: Instruction, idx: tuple) -> Any:
        if inst.opcode == "reduce" and self.bindings is None:
            return self._tile_reduce(inst, idx)
        if inst.opcode == "bitcast" and self.bindings is None and self.dims and inst.operands[0].opcode == "reduce":
            k = reshaped_rows(inst, self.dims, self.tile)
            if k and tuple(idx) == tuple(self.lane_idx[:-k]):
                return self._tile_reduce(inst.operands[0], idx, reshaped=k)
        return super()._emit(inst, idx)

    def _grid(self) -> tuple[list[int], list[int]]:
        """``(strides, counts)`` of the kernel's tile index over this generator's dimensions."""
        return ((list(self.tile_strides), list(self.grid_counts)) if self.tile_strides
                else (row_major_strides(self.counts), list(self.counts)))

    def _tile_reduce(self, inst: Instruction, idx: tuple, reshaped: int = 0) -> str:
        if len(inst.operands) != 2 or inst.shape.is_tuple:
            raise EmitterUnsupported("reduce", inst.name, "variadic reductions are not supported by the block-level emitter")
        src, init = inst.operands
        if not self.dims:  # inside a sub-tile function: every reduce is a sub-tile reduce
            comp = inst.attrs.get("to_apply")
            op = comp.root.opcode if isinstance(comp, Computation) and comp.root is not None else ""
            if op in _COMBINERS and all(o.opcode == "parameter" for o in comp.root.operands):
                # in a one-row function the row's own statistic is again one row (every lane reads it alike)
                one = self.one_row and self.ctx.body.level == 1 and all(self._lane_invariant(i) for i in idx)
                if one and self.one_rows is not None:
                    self.one_rows.add(inst.name)
                if not one:
                    self.wide[0] += 1
                return self._sub_tile_reduce(inst, idx, op, rows=1 if one else 0)
            self.wide[0] += 1
            return super()._emit(inst, idx)
        if inst.name in self.variant_of and not all(self._lane_invariant(i) for i in idx):
            # the interpreter's variant (several tiles a program) of a program that reduces this row once: a
            # [lanes, R] sub-tile folds each lane's row in the same tree as the compiled program, bit for bit
            comp = inst.attrs.get("to_apply")
            return self._sub_tile_reduce(inst, idx, comp.root.opcode)
        src_idx: tuple = self.lane_idx
        kept_idx: tuple | None = None  # the reduce's output index at the lane, where not the tile's own dims
        units = None if reshaped else unit_map(tuple(src.shape.dimensions), self.dims)
        if units is None and not reshaped:  # rows the tile holds whole, broadcast along dimensions they lack
            rd = int_list(inst.attrs.get("dimensions"))
            b = broadcast_map(tuple(src.shape.dimensions), self.dims, rd, tuple(idx), self.lane_idx)
            if b is not None and all(b[s] is None or self.tile[b[s]] >= self.dims[b[s]] for s in rd):
                units = b
        if reshaped:  # the source is a row-major reshape of the tile's array: reduce the tile's trailing dims
            rdims = list(range(len(self.dims) - reshaped, len(self.dims)))
            lin = self.linearize(self.lane_idx, self.dims, tuple(reversed(range(len(self.dims)))))
            src_idx = tuple(self.delinearize(lin, src.shape.dimensions, src.shape.minor_to_major()))
        elif units is not None and tuple(src.shape.dimensions) != self.dims:
            # the operand is the tile's array with unit dimensions dropped or added (a bitcast of [1, R, C] to
            # [R, C]): its element at the lane is the tile's, so the reduce is a tile reduce over the mapped dims
            src_rdims = set(int_list(inst.attrs.get("dimensions")))
            rdims = sorted(units[d] for d in src_rdims if units[d] is not None)
            src_idx = tuple(0 if t is None else self.lane_idx[t] for t in units)
            kept_idx = tuple(0 if units[d] is None else self.lane_idx[units[d]]
                             for d in range(len(units)) if d not in src_rdims)
            if not rdims or tuple(idx) != kept_idx:
                return super()._emit(inst, idx)  # read elsewhere: per lane
            if any(self.tile[d] < self.dims[d] for d in rdims):  # a row the tile holds part of
                comp = inst.attrs.get("to_apply")
                op = comp.root.opcode if isinstance(comp, Computation) and comp.root is not None else ""
                row = None
                if op in _COMBINERS and all(o.opcode == "parameter" for o in comp.root.operands):
                    row = self._row_tile_reduce(inst, rdims, op, units)
                return row if row is not None else super()._emit(inst, idx)
        elif tuple(src.shape.dimensions) != self.dims:
            if tuple(inst.shape.dimensions) == self.dims and tuple(idx) == tuple(self.lane_idx):
                ext = self._extended_tile_reduce(inst)
                if ext is not None:
                    return ext
            whole = self._whole_reduce(inst)
            if whole is not None:
                return whole
            # a row every lane of the tile reads alike (a row statistic the output broadcasts): one [1, R] row
            # per program, where the per-lane loop would load the row once per lane. Per lane inside another
            # loop's body (a sub-tile per iteration) and for a row longer than the tile over a nested reduce
            # (whose own sub-tiles, where not one row, would hold a tile per level)
            if self.ctx.body.level == 1:
                comp = inst.attrs.get("to_apply")
                op = comp.root.opcode if isinstance(comp, Computation) and comp.root is not None else ""
                if (op in _COMBINERS and all(o.opcode == "parameter" for o in comp.root.operands)
                        and all(self._lane_invariant(i) for i in idx)):
                    one = self._one_row_reduce(inst, idx, op,
                                               next_pow2(reduced_count(inst)) > self.block and feeds_reduce(src))
                    if one is not None:
                        return one

            # Not a reduction over the tile (e.g. a split-K partial sum feeding a layer norm): compute it
            # per lane with the elemental generator's loop over the reduced elements.
            return super()._emit(inst, idx)
        else:
            rdims = sorted(int_list(inst.attrs.get("dimensions")))
        kept = [d for d in range(len(self.dims)) if d not in rdims]
        comp = inst.attrs.get("to_apply")
        op = comp.root.opcode if isinstance(comp, Computation) and comp.root is not None else ""
        if op not in _COMBINERS or not all(o.opcode == "parameter" for o in comp.root.operands):
            raise EmitterUnsupported("reduce", inst.name, f"reducer {op!r} is not add/maximum/minimum")
        aligned = bool(reshaped) or kept_idx is not None or tuple(idx) == tuple(self.lane_idx[d] for d in kept)
        if aligned and not reshaped and any(self.tile[d] < self.dims[d] for d in rdims):
            row = self._row_tile_reduce(inst, rdims, op)
            if row is not None:
                return row
        if not aligned or any(self.tile[d] < self.dims[d] for d in rdims):
            # Read at other indices (a backward pass's bitcast/broadcast of a row statistic) or over a tile that
            # holds only part of the reduced dimension: reduce a [lanes, reduced] sub-tile, as XLA's tiling gives
            # the reduce operand the full reduced extent whatever the output tile (symbolic tile propagation).
            return self._sub_tile_reduce(inst, idx, op)
        et = inst.shape.element_type
        x = self.up(self.value(src, src_idx), et)
        shape = "[" + ", ".join(str(t) for t in self.tile) + "]"
        ident = reduce_identity(op, self.compute_type(et), shape)
        xt = self.ctx.emit(f"tl.where(tl.reshape(valid, {shape}), tl.reshape({x}, {shape}), {ident})", "rin")
        r = xt
        for d in reversed(rdims):
            r = self.ctx.emit(f"tl.reduce({r}, {d}, {_COMBINERS[op]}, keep_dims=True)", "red")
        if init.opcode == "constant" and init.shape.is_array and init.shape.rank == 0 and \
                init.shape.element_type not in COMPLEX_PARTS:
            # the init and the rounding to the reduce's type on the reduced value, once (XLA combines the tile's
            # reduction with the init before broadcasting it); not once per lane after the broadcast
            with self.ctx.block("[]"):
                iv = self.up(self._constant(init, ()), et)
            r = self.down(self._with_init(r, iv, op), et, inst.name)
            return self.ctx.emit(f"tl.reshape(tl.broadcast_to({r}, {shape}), [BLOCK])", "redb")
        init_v = self.up(self.value(init, ()), et)
        r = self.ctx.emit(f"tl.reshape(tl.broadcast_to({r}, {shape}), [BLOCK])", "redb")
        return self.down(self._with_init(r, init_v, op), et, inst.name)

    def _extended_tile_reduce(self, inst: Instruction) -> str | None:
        """A reduce whose result has the tile's shape, read at the lane's own index, with an operand of more
        dimensions (a variance's ``reduce(square(x - mean(x)))`` over a row the output tile does not hold): the
        operand's tile is the output tile along the kept dimensions and the whole extent along the reduced ones,
        as XLA's symbolic tile propagation gives it (``SymbolicTileAnalysis``). It is computed in a device
        function on that extended tile (a reduce inside it over the same dimensions is an ordinary tile reduce)
        and reduced there; the result comes back in the output tile's row-major lane order. ``None`` when the
        reduce is not plain (kept dimensions out of the operand's order, a non add/max/min reducer) or the
        extended tile exceeds Triton's largest tensor (the caller loops per lane)."""
        src, init = inst.operands
        rdims = sorted(int_list(inst.attrs.get("dimensions")))
        comp = inst.attrs.get("to_apply")
        op = comp.root.opcode if isinstance(comp, Computation) and comp.root is not None else ""
        if op not in _COMBINERS or not all(o.opcode == "parameter" for o in comp.root.operands) or not rdims:
            return None
        sd = tuple(src.shape.dimensions)
        kept = [d for d in range(len(sd)) if d not in rdims]
        if tuple(sd[d] for d in kept) != self.dims:
            return None
        ext_tile, ext_sizes, ext_counts = [1] * len(sd), [1] * len(sd), [1] * len(sd)
        ext_strides, ext_grid = [1] * len(sd), [1] * len(sd)
        for d, t, s, c, st, g in zip(kept, self.tile, self.sizes, self.counts, *self._grid()):
            ext_tile[d], ext_sizes[d], ext_counts[d], ext_strides[d], ext_grid[d] = t, s, c, st, g
        for d in rdims:
            ext_tile[d], ext_sizes[d] = next_pow2(sd[d]), sd[d]
        lanes = 1
        for t in ext_tile:
            lanes *= t
        if lanes > MAX_TENSOR_NUMEL:
            return None
        r = self._tile_function(inst, op, rdims, (tuple(ext_tile), ext_sizes, ext_counts), ext_strides, None,
                                self.block, "ext_tile", grid=ext_grid)
        et = inst.shape.element_type
        init_v = self.up(self.value(init, ()), et)
        return self.down(self._with_init(r, init_v, op), et, inst.name)

    def _tile_function(self, inst: Instruction, op: str, rdims: list[int], ext: tuple, strides_t: list[int],
                       outer_counts: list[int] | None, out_lanes: int, hint: str,
                       units: list[int | None] | None = None, grid: list[int] | None = None) -> str:
        """The call of a device function computing reduce ``inst``'s operand on tile ``ext`` (``(tile, sizes,
        counts)`` over the operand's dimensions; the program's tile index walks ``strides_t``, see
        :func:`tile_coordinates`) and reducing it over ``rdims``: ``out_lanes`` values in row-major order of
        the kept dimensions (``outer_counts``: given, the reduced dimensions are kept as size 1 first).
        ``units``: the operand is the tile's array with unit dimensions dropped or added (:func:`unit_map`);
        ``ext`` is then over the tile's dimensions, and the operand is read at the mapped index. ``grid``: the
        kernel's tile grid over ``ext``'s dimensions (default ``outer_counts``, else ``ext``'s counts), by which
        with ``strides_t`` the function and those nested in it place their tiles."""
        src = inst.operands[0]
        ext_tile, ext_sizes, ext_counts = ext
        dims = tuple(src.shape.dimensions) if units is None else self.dims
        lanes = 1
        for t in ext_tile:
            lanes *= t
        ctx = self.ctx
        fn = ctx.names.fresh(hint)
        for d in range(len(dims)):
            ctx.names.reserve(f"g{d}")
            ctx.names.reserve(f"l{d}")
        outer_body = ctx.body
        body = ts.SourceBuilder()
        body.level = 1
        ctx.body = body
        try:
            lines = [f"zero = tl.full([BLOCK], 0, {ctx.idx_t})", "mask = zero == 0",
                     f"lane = tl.arange(0, BLOCK).to({ctx.idx_t})"]
            grid = grid if grid is not None else outer_counts if outer_counts is not None else list(ext_counts)
            lines += tile_coordinates(dims, ext_sizes, ext_tile, ext_counts, strides_t,
                                       row_major_strides(ext_tile), outer_counts=grid)
            for ln in lines:
                body.line(ln)
            sub = _TileGen(ctx, self.comp)
            sub.tile, sub.dims, sub.block, sub.subfns = ext_tile, dims, lanes, self.subfns
            sub.one_rows, sub.variant_of, sub.wide = self.one_rows, self.variant_of, self.wide
            sub.sizes, sub.counts = ext_sizes, ext_counts
            sub.tile_strides, sub.grid_counts = tuple(strides_t), tuple(grid)
            sub.lane_idx = tuple(f"g{d}" for d in range(len(dims)))
            et = inst.shape.element_type
            at = sub.lane_idx if units is None else tuple(0 if t is None else sub.lane_idx[t] for t in units)
            x = sub.up(sub.value(src, at), et)
            shape = "[" + ", ".join(str(t) for t in ext_tile) + "]"
            ident = reduce_identity(op, sub.compute_type(et), shape)
            r = ctx.emit(f"tl.where(tl.reshape(valid, {shape}), tl.reshape({x}, {shape}), {ident})", "rin")
            keep = ", keep_dims=True" if outer_counts is not None else ""
            for d in reversed(rdims):
                r = ctx.emit(f"tl.reduce({r}, {d}, {_COMBINERS[op]}{keep})", "red")
            ret = ctx.emit(f"tl.reshape({r}, [{out_lanes}])", "redo")
        finally:
            ctx.body = outer_body
        self.subfns.append((fn, ["tile"], list(body.lines), ret))
        return ctx.emit(f"{fn}({PARAMS_TOKEN}tile, {lanes})", "red")

    def _whole_reduce(self, inst: Instruction) -> str | None:
        """A reduce of every dimension of its operand (a scalar statistic broadcast over the tile: a sum that
        normalises the fusion's output): once per program on the operand's whole array as one tile, as XLA's
        symbolic tile propagation gives the reduce operand its full extent, then broadcast to the lanes; it was
        a loop over the whole array per lane. ``None`` when the reduce is not plain (not add/max/min) or the
        array exceeds Triton's largest tensor (the caller loops per lane)."""
        src, init = inst.operands
        sd = tuple(src.shape.dimensions)
        rdims = sorted(int_list(inst.attrs.get("dimensions")))
        comp = inst.attrs.get("to_apply")
        op = comp.root.opcode if isinstance(comp, Computation) and comp.root is not None else ""
        if (inst.shape.rank != 0 or not sd or rdims != list(range(len(sd))) or op not in _COMBINERS
                or not all(o.opcode == "parameter" for o in comp.root.operands)):
            return None
        ext_tile = tuple(next_pow2(n) for n in sd)
        lanes = 1
        for t in ext_tile:
            lanes *= t
        if lanes > MAX_TENSOR_NUMEL:
            return None
        ones = [1] * len(sd)
        r = self._tile_function(inst, op, rdims, (ext_tile, list(sd), ones), ones, ones, 1, "whole_tile")
        r = self.ctx.emit(f"tl.broadcast_to(tl.reshape({r}, [1]), [BLOCK])", "redb")
        et = inst.shape.element_type
        init_v = self.up(self.value(init, ()), et)
        return self.down(self._with_init(r, init_v, op), et, inst.name)

    def _row_tile_reduce(self, inst: Instruction, rdims: list[int], op: str,
                         units: list[int | None] | None = None) -> str | None:
        """A reduce over dimensions the output tile holds only part of (a softmax's row statistic broadcast back
        along the row, the output tile a piece of the row), read at the lane's own kept indices: computed once
        per kept index of the tile, on the output tile along the kept dimensions and the whole extent along the
        reduced ones (XLA's symbolic tile propagation: the reduce's operand tile), in a device function where a
        reduce nested in its operand over the same rows is an ordinary tile reduce, then broadcast back along
        the reduced dimensions. ``None`` when that tile exceeds Triton's largest tensor (the caller reduces
        ``[lanes, reduced]`` sub-tiles)."""
        init = inst.operands[1]
        rank = len(self.dims)
        ext_tile, ext_sizes, ext_counts = list(self.tile), list(self.sizes), list(self.counts)
        for d in rdims:
            ext_tile[d], ext_sizes[d], ext_counts[d] = next_pow2(self.dims[d]), self.dims[d], 1
        lanes = 1
        for t in ext_tile:
            lanes *= t
        if lanes > MAX_TENSOR_NUMEL:
            return None
        kshape = [1 if d in rdims else ext_tile[d] for d in range(rank)]
        kept_lanes = 1
        for t in kshape:
            kept_lanes *= t
        strides, grid = self._grid()
        r = self._tile_function(inst, op, rdims, (tuple(ext_tile), ext_sizes, ext_counts), strides, self.counts,
                                kept_lanes, "row_tile", units, grid=grid)
        tshape = "[" + ", ".join(str(t) for t in self.tile) + "]"
        r = self.ctx.emit(f"tl.reshape(tl.broadcast_to(tl.reshape({r}, {kshape}), {tshape}), [BLOCK])", "redb")
        et = inst.shape.element_type
        init_v = self.up(self.value(init, ()), et)
        return self.down(self._with_init(r, init_v, op), et, inst.name)

    def _with_init(self, r: str, init_v: str, op: str) -> str:
        if op == "add":
            return self.ctx.emit(f"{r} + {init_v}", "red")
        return self.ctx.emit(f"tl.{op}({r}, {init_v}, propagate_nan=tl.PropagateNan.ALL)", "red")

    def _one_row_reduce(self, inst: Instruction, idx: tuple, op: str, strict: bool) -> str | None:
        """:meth:`_sub_tile_reduce` with ``rows=1``; ``strict`` (a row longer than the tile over a nested
        reduce): ``None``, and nothing emitted, unless every reduce nested in the row is one row too (a
        ``[lanes, R]`` sub-tile or a per-lane loop per nesting level holds more than the tile)."""
        if not strict:
            if self.one_rows is not None:
                self.one_rows.add(inst.name)
            return self._sub_tile_reduce(inst, idx, op, rows=1)
        body, subfns, rows = self.ctx.body, self.subfns, set(self.one_rows or ())
        mark, nfns, wide = len(body.lines), len(subfns), self.wide[0]
        caches = ([dict(d) for d in self._scopes], [dict(d) for d in self.idx_scopes])  # what the lines defined
        r = self._sub_tile_reduce(inst, idx, op, rows=1)
        if self.wide[0] == wide:
            if self.one_rows is not None:
                self.one_rows.add(inst.name)
            return r
        del body.lines[mark:], subfns[nfns:]
        self._scopes[:], self.idx_scopes[:] = caches
        self.wide[0] = wide
        if self.one_rows is not None:
            self.one_rows.intersection_update(rows)
        return None

    def _lane_invariant(self, expr: int | str) -> bool:
        """Whether the index ``expr`` is the same at every lane of the tile (:func:`lane_invariant` over the
        tile coordinates' definitions and the statements emitted so far)."""
        return lane_invariant(expr, list(self.coordinate_lines) + list(self.ctx.body.lines))

    def _sub_tile_reduce(self, inst: Instruction, idx: tuple, op: str, rows: int = 0) -> str:
        """The reduce at ``idx`` (one value per lane) from a ``[lanes, Rp]`` sub-tile computed in a device
        function: lane ``l * Rp + r`` holds the operand at the lane's kept indices and reduced position ``r``
        (``Rp`` = the reduced element count rounded up to a power of two, masked past the end). ``rows=1``:
        ``idx`` is the same at every lane (:meth:`_lane_invariant`: a row statistic the tile broadcasts), so
        one ``[1, Rp]`` row is reduced and broadcast to the lanes, as XLA's symbolic tile propagation gives the
        reduce's operand the tile of that one row."""
        src, init = inst.operands
        rdims = sorted(int_list(inst.attrs.get("dimensions")))
        rsizes = [src.shape.dimensions[d] for d in rdims]
        total = 1
        for n in rsizes:
            total *= n
        rp = next_pow2(total)
        rows = rows or self.block
        block = rows * rp
        if block > MAX_TENSOR_NUMEL:
            return super()._emit(inst, idx)  # per-lane loop over the reduced elements
        ctx = self.ctx
        fn = ctx.names.fresh("red_tile")
        # the kept indices of lanes past the array are out of range (masked in the tile): clamp them, as the
        # sub-tile's loads are masked only by its own reduced-range test
        args = [self.itensor(i if isinstance(i, int) else self.iexpr(f"tl.minimum({i}, {n - 1})", "kc"))
                for i, n in zip(idx, inst.shape.dimensions)]
        if rows != self.block:  # one row: its kept indices as scalars (every lane holds the same: lane 0's)
            args = [self.iexpr(f"tl.reduce(tl.where(lane == 0, {a}, 0), 0, tl.standard._sum_combine)", "k1")
                    for a in args]
        formals = [ctx.names.fresh("k") for _ in args]
        outer_body = ctx.body
        body = ts.SourceBuilder()
        body.level = 1
        ctx.body = body
        try:
            sub = _TileGen(ctx, self.comp)
            sub.block, sub.subfns = block, self.subfns
            # one row: so is a program of one lane's [1, Rp] sub-tile, whose nested statistics are one row again
            sub.one_row, sub.one_rows, sub.variant_of = rows == 1, self.one_rows, self.variant_of
            sub.wide = self.wide
            sub.dims = ()
            sub.tile = ()
            idx_t = ctx.idx_t
            body.line(f"zero = tl.full([BLOCK], 0, {idx_t})")
            body.line("mask = zero == 0")
            body.line(f"lane = tl.arange(0, BLOCK).to({idx_t})")
            rr = ctx.emit(f"lane % {rp}", "rr")
            body.line(f"valid = {rr} < {total}")
            rc = ctx.emit(f"tl.minimum({rr}, {total - 1})", "rc")
            # one row: a scalar kept index, splat
            kept_b = [ctx.emit(f"zero + {k}" if rows != self.block else
                               f"tl.reshape(tl.broadcast_to({k}[:, None], [{rows}, {rp}]), [BLOCK])", "kb")
                      for k in formals]
            full: list[Any] = [0] * src.shape.rank
            for d, v in zip(rdims, sub.delinearize(rc, rsizes, tuple(range(len(rsizes) - 1, -1, -1)))):
                full[d] = v
            for d, v in zip([d for d in range(src.shape.rank) if d not in rdims], kept_b):
                full[d] = v
            et = inst.shape.element_type
            x = sub.up(sub.value(src, tuple(full)), et)
            ident = reduce_identity(op, sub.compute_type(et), "[BLOCK]")
            xt = ctx.emit(f"tl.where(valid, {x}, {ident})", "rin")
            # one row: a 1-D reduce (reshaped to [1, Rp] first, ptxas spilled a 2048-element row by 63 KB)
            ret = ctx.emit(f"tl.reduce({xt}, 0, {_COMBINERS[op]}, keep_dims=True)" if rows == 1 and rows != self.block
                           else f"tl.reduce(tl.reshape({xt}, [{rows}, {rp}]), 1, {_COMBINERS[op]})", "red")
        finally:
            ctx.body = outer_body
        self.subfns.append((fn, formals, list(body.lines), ret))
        r = ctx.emit(f"{fn}({PARAMS_TOKEN}{''.join(a + ', ' for a in args)}{block})", "red")
        if rows != self.block:
            r = ctx.emit(f"tl.broadcast_to({r}, [BLOCK])", "redb")
        init_v = self.up(self.value(init, ()), et)
        return self.down(self._with_init(r, init_v, op), et, inst.name)


class TritonBlockLevelFusion(FusionEmitter):
    """Block-level emitter for ``__triton`` fusions (see the module docstring)."""

    name = "TritonBlockLevelFusion"

    #: Lanes of the interpreter variant's tile: XLA's tiles are often a few elements ([1,1,8]), and the interpreter
    #: pays per program, so the variant covers more of the output per tile (same values per element).
    INTERPRET_LANES = INTERPRET_TILE_LANES

    def __init__(self, analysis: Any, sizes: list[int] | None = None, interpret_variant: bool = True,
                 variant_of: frozenset = frozenset()):
        super().__init__(analysis)
        self.sizes_override = sizes
        self.build_interpret_variant = interpret_variant
        self.variant_of = variant_of  # building the variant: the reduces the compiled program does as one row

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
        comp = self.computation
        roots = fusion_roots(comp)
        if len(roots) != 1 or roots[0].shape.is_tuple:
            raise EmitterUnsupported("fusion", fusion.name, "multi-output __triton fusions are not supported")
        root = roots[0]
        dims = tuple(root.shape.dimensions)
        sizes, warps, stages = self._config()
        if self.sizes_override is not None:
            sizes = list(self.sizes_override)
        if len(sizes) != len(dims):
            raise EmitterUnsupported("fusion", fusion.name, f"output tile rank {len(sizes)} != root rank {len(dims)}")
        tile = tuple(next_pow2(max(1, s)) for s in sizes)
        counts = [-(-d // max(1, s)) for d, s in zip(dims, sizes)]
        ntiles = 1
        for c in counts:
            ntiles *= c
        lanes = 1
        for t in tile:
            lanes *= t
        if ntiles == 0:
            return EmittedFusion(emitter=self.name)
        if lanes > MAX_TENSOR_NUMEL:
            # XLA rejects such a tiling too (triton fusion emitter's tile-size constraint).
            raise EmitterUnsupported("fusion", fusion.name, f"tile of {lanes} elements exceeds the maximum allowed "
                                                            f"tensor size of {MAX_TENSOR_NUMEL} elements")
        op_shapes = [o.shape for o in fusion.operands]
        idx_t = choose_index_dtype(op_shapes + [fusion.shape], lanes)
        ctx = KernelContext(idx_t, op_shapes)
        ctx.native_loops = False  # XLA's Triton pipeline has no xla-gpu-optimize-loops
        for n in ("tile", "valid", "lane", "BLOCK", "N") + tuple(f"{c}{d}" for d in range(len(dims)) for c in "gl"):
            ctx.names.reserve(n)
        ctx.mask = "valid"  # lanes past the array have unclamped indices: every load is masked
        body = ts.SourceBuilder()
        body.level = 1
        ctx.body = body
        gen = _TileGen(ctx, comp)
        gen.tile, gen.dims, gen.block, gen.sizes, gen.counts = tile, dims, lanes, sizes, counts
        gen.lane_idx = tuple(f"g{d}" for d in range(len(dims)))
        gen.one_rows, gen.variant_of, gen.wide = set(), self.variant_of, [0]
        pre = [f"zero = tl.full([BLOCK], 0, {idx_t})", "mask = zero == 0",
               f"lane = tl.arange(0, BLOCK).to({idx_t})"]
        # tile origin per dim (tiles in row-major order of the tile grid), lane coordinates row-major in the tile
        pre += tile_coordinates(dims, sizes, tile, counts, row_major_strides(counts), row_major_strides(tile))
        gen.coordinate_lines = tuple(pre)
        with deep_recursion():
            v = gen.value(root, gen.lane_idx)
        out_shape = fusion.shape
        ptr = ctx.param("output", 0, out_shape, "out")
        off = gen.linearize(gen.lane_idx, out_shape.dimensions, out_shape.minor_to_major())
        store_line(gen, ptr, off, v, out_shape.element_type, "valid")
        params = list(ctx.param_names)
        src = ts.module_header()
        src.insert(4, "from fusegen_plugins.backends.triton_devfn import device_jit")
        src += _COMBINE_FNS
        call_params = "".join(p + ", " for p in params)
        for fn, formals, lines, ret in gen.subfns:
            src += ["", "@device_jit", f"def {fn}({', '.join(params + formals + ['BLOCK: tl.constexpr'])}):"]
            src += [ln.replace(PARAMS_TOKEN, call_params) for ln in lines] + [f"    return {ret}"]
        src += ["", "@device_jit", f"def tile_fn({', '.join(params + ['tile', 'BLOCK: tl.constexpr'])}):"]
        src += ["    " + p for p in pre]
        src += [ln.replace(PARAMS_TOKEN, call_params) for ln in body.lines]
        src += ["", "@triton.jit", f"def block_level({', '.join(params + ['BLOCK: tl.constexpr', 'N: tl.constexpr'])}):",
                "    pid = tl.program_id(0)", "    for t in range(0, BLOCK):", "        tile = pid * BLOCK + t",
                "        if tile < N:", f"            tile_fn({', '.join(params)}, tile, {lanes})"]
        name = ts.sanitize_identifier(f"block_{fusion.name}", "k")
        variant = None
        if self.build_interpret_variant and len(sizes) == len(dims):
            # a reduce over dimensions the output lacks extends its tile by their extent (_extended_tile_reduce):
            # the variant's output tile shrinks by that factor so the extended tile stays a tensor Triton allows
            factor = max([next_pow2(max(1, i.operands[0].shape.numel // max(1, i.shape.numel))) for i in comp.instructions
                          if i.opcode == "reduce" and not i.shape.is_tuple and i.shape.numel == root.shape.numel]
                         + [1])
            # a row the compiled program reduces once is a [lanes, R] sub-tile in the variant (the same tree)
            factor = max([factor] + [next_pow2(reduced_count(i)) for i in comp.instructions
                                     if i.name in gen.one_rows and i.opcode == "reduce"])
            big = interpret_tile_sizes(dims, sizes, max(lanes, min(self.INTERPRET_LANES, MAX_TENSOR_NUMEL // factor)))
            if big != sizes:
                emitted = TritonBlockLevelFusion(self.analysis, big, interpret_variant=False,
                                                 variant_of=frozenset(gen.one_rows)).emit()
                variant = emitted.kernels[0] if emitted.kernels else None
        ks = KernelSource(name=name, source="\n".join(src) + "\n", entry="block_level", params=tuple(ctx.params),
                          constexprs={"BLOCK": 1, "N": ntiles},
                          launch=LaunchDimensions(grid=(ntiles,), num_warps=warps), num_stages=stages,
                          interpret_variant=variant)
        return EmittedFusion(emitter=self.name, kernels=(ks,))


def create(analysis: Any, context: Any = None) -> TritonBlockLevelFusion | None:
    """Factory: ``__triton`` fusions with a ``block_level_fusion_config``; ``None`` (decline) otherwise."""
    f = analysis.fusion
    if f.fusion_backend_kind != "__triton":
        return None
    fbc = f.backend_config.get("fusion_backend_config") or {}
    if not isinstance(fbc.get("block_level_fusion_config"), dict):
        return None
    return TritonBlockLevelFusion(analysis)
