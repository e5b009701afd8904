"""Reads of a parameter's contiguous vectors as one wide load, split into columns in registers: the loads XLA's
vectoriser merges, which Triton gives one thread only as one ``[block, V]`` tensor."""

from __future__ import annotations

from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction, Shape
from fusegen.codegen.elemental.common import COMPLEX_PARTS, Index


def plain_vector_type(et: str) -> bool:
    """A type read as vectors plainly: 8-64 bit, not pred (stored as bytes, compared), complex or fp8 (whose
    loads take no ``other``)."""
    return et != "pred" and et not in COMPLEX_PARTS and not et.startswith("f8") and \
        dtypes.bit_width(et) in (8, 16, 32, 64)


def linear_block(block_shape: str) -> str | None:
    """The extent text of a one-dimensional block shape (``"[BLOCK]"`` -> ``"BLOCK"``), else ``None``: a scalar
    block (``"[]"``), a tile of several dimensions (``"[16, 32]"``) or a shape known only at run time (a GEMM
    tile's ``"zero.shape"``). A vector read adds its vector axis after this one axis."""
    if not (block_shape.startswith("[") and block_shape.endswith("]")):
        return None
    inner = block_shape[1:-1].strip()
    return inner if inner and "," not in inner and "[" not in inner else None


class VectorReadsMixin:
    """Column splitting and parameter-vector binding of :class:`ElementalGenerator` (a mixin). Vector reads are
    written for a one-dimensional block (:func:`linear_block`); on any other block (a GEMM's operand tile) the
    elements are read through their index maps, one load each."""

    def parameter_buffer(self, par: Instruction) -> tuple[str, Shape]:
        """``(pointer, shape)`` of fusion parameter ``par``'s buffer: the fusion operand's shape (its physical
        layout) where its dimensions are the parameter's, else the parameter's own."""
        n, ops = par.parameter_number, self.ctx.operand_shapes
        shape = ops[n] if n < len(ops) and ops[n].dimensions == par.shape.dimensions else par.shape
        return self.ctx.param("operand", n, shape, par.name), shape

    def vector_reads_apply(self) -> bool:
        """Whether a parameter may be read as vectors here: a one-dimensional block, no other index scheme."""
        ctx = self.ctx
        return (self.bindings is None and ctx.runs is None and ctx.steps is None
                and linear_block(ctx.block_shape) is not None)

    def vector_load(self, ptr: str, base: str, n: int, hint: str) -> list[str]:
        """The ``n`` elements at ``ptr + base + k`` (``base`` a ``[block]`` offset, ``k < n``, a power of two) as
        one ``[block, n]`` masked load, returned as its ``n`` ``[block]`` columns (:meth:`vector_columns`).

        Raises:
            ValueError: the current block is not one-dimensional (:func:`linear_block`).
        """
        block = linear_block(self.ctx.block_shape)
        if block is None:
            raise ValueError(f"vector_load needs a one-dimensional block, not {self.ctx.block_shape!r}")
        t = self.ctx.emit(f"tl.load({ptr} + ({base}[:, None] + tl.arange(0, {n})[None, :]), "
                          f"mask={self.ctx.mask}[:, None], other=0)", hint)
        return self.vector_columns(t, n, block)

    def vector_columns(self, t: str, v: int, block: str) -> list[str]:
        """The ``v`` columns of the ``[block, v]`` tensor ``t`` as ``[block]`` tensors, in order (``tl.split``
        halves the last dimension of size 2: even then odd columns)."""
        x = self.ctx.emit(f"tl.reshape({t}, [{block}" + ", 2" * (v.bit_length() - 1) + "])", "col" if v == 1 else "vec")

        def columns(x: str, k: int) -> list[str]:
            if k == 0:
                return [x]
            a, b = self.ctx.names.fresh("col"), self.ctx.names.fresh("col")
            self.ctx.body.line(f"{a}, {b} = tl.split({x})")
            ca, cb = columns(a, k - 1), columns(b, k - 1)
            return [ca[i // 2] if i % 2 == 0 else cb[i // 2] for i in range(2 ** k)]

        return columns(x, v.bit_length() - 1)

    def joined_columns(self, cols: list[str], block: str) -> str:
        """``cols`` (a power-of-two count of ``[block]`` tensors) as one ``[block, len(cols)]`` tensor, column ``k``
        = ``cols[k]``: the inverse of :meth:`vector_columns` (``tl.join`` adds a last dimension of 2)."""
        def joined(c: list[str]) -> str:
            return c[0] if len(c) == 1 else self.ctx.emit(f"tl.join({joined(c[0::2])}, {joined(c[1::2])})", "stk")

        return self.ctx.emit(f"tl.reshape({joined(cols)}, [{block}, {len(cols)}])", "stk")

    def bind_parameter_vectors(self, inst: Instruction, idx: Index, dim: int) -> bool:
        """Load, for every fusion parameter of ``inst``'s shape, its elements along ``dim`` at ``idx``
        (``idx[dim]`` ignored) as one ``[block, n]`` load, and bind them (:meth:`bind_value`) so that
        ``value(parameter, idx with dim = k)`` is column ``k``: a scatter's index vector (``s32[N, 2]``, read
        through slices and a concatenate as jax writes it) is one 8-byte load a thread, as XLA's. The binding is
        right whoever reads it; a vector nobody reads is a dead load Triton drops. ``dim`` must be the
        parameters' minor physical dimension, ``n`` its extent a power of two of at most 16 bytes; returns
        whether it bound anything."""
        ctx = self.ctx
        if not self.vector_reads_apply():
            return False
        n = inst.shape.dimensions[dim]
        if n < 2 or n & (n - 1):
            return False
        params = [p for p in self.comp.instructions if p.opcode == "parameter" and not p.shape.is_tuple
                  and p.shape.dimensions == inst.shape.dimensions and plain_vector_type(p.shape.element_type)
                  and n * dtypes.bit_width(p.shape.element_type) <= 128]
        bound = False
        for p in params:
            ptr, pshape = self.parameter_buffer(p)
            if pshape.minor_to_major()[0] != dim:
                continue
            at0 = tuple(idx[:dim]) + (0,) + tuple(idx[dim + 1:])
            base = self.itensor(self.linearize(at0, pshape.dimensions, pshape.minor_to_major()))
            for k, col in enumerate(self.vector_load(ptr, base, n, p.name)):
                self.bind_value(p, tuple(idx[:dim]) + (k,) + tuple(idx[dim + 1:]), col)
            bound = True
        return bound

    def bind_strided_group(self, inst: Instruction, idx: Index, src_idx: Index) -> None:
        """For a ``slice`` of a fusion parameter with stride ``s`` (2-16, at most 16 bytes) along the parameter's
        minor physical dimension: load the ``s`` neighbours of each element read (its group, starting at a
        multiple of ``s``) as one ``[block, s]`` vector and bind them all (:meth:`bind_value`) at the indices
        sibling slices (other starts, same stride) compute, ``imul(j, s) + start``: ``x[..., ::2]`` and
        ``x[..., 1::2]`` read together, as XLA's vectoriser merges the two loads. Nothing when the group may
        pass the dimension's end, or another index scheme is in force."""
        ctx, src = self.ctx, inst.operands[0]
        if not self.vector_reads_apply():
            return
        if src.opcode != "parameter" or src.shape.is_tuple or not plain_vector_type(src.shape.element_type):
            return
        et = src.shape.element_type
        ptr, pshape = self.parameter_buffer(src)
        d = pshape.minor_to_major()[0]
        start, _, stride = (inst.attrs.get("slice") or [])[d]  # (start, limit, stride), as the slice's map read it
        if stride < 2 or stride & (stride - 1) or stride * dtypes.bit_width(et) > 128 or isinstance(idx[d], int):
            return
        first = start - start % stride
        if first + stride * inst.shape.dimensions[d] > pshape.dimensions[d]:
            return
        if self._lookup(self._scopes, (id(src), tuple(src_idx))) is not None:
            return  # bound already (a sibling slice's group) or loaded
        keys = []
        for k in range(stride):
            at = list(src_idx)
            at[d] = self.iadd(self.imul(idx[d], stride), first + k)
            keys.append(tuple(at))
        if tuple(src_idx) not in keys:  # the slice's own map is written otherwise: leave it alone
            return
        base_at = list(src_idx)
        base_at[d] = self.iadd(self.imul(idx[d], stride), first)
        base = self.itensor(self.linearize(tuple(base_at), pshape.dimensions, pshape.minor_to_major()))
        for key, col in zip(keys, self.vector_load(ptr, base, stride, src.name)):
            if self._lookup(self._scopes, (id(src), key)) is None:
                self.bind_value(src, key, col)
