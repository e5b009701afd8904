"""The :class:`ElementalGenerator`: scopes, index arithmetic, value cache and op dispatch; the op families
live in the mixins beside it."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence

from fusegen.codegen import triton_source as ts
from fusegen.codegen.emitter_unsupported import EmitterUnsupported
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Computation, Instruction, Shape
from fusegen.codegen.elemental import narrow_float
from fusegen.codegen.elemental.narrow_float import BIT_FLOATS
from fusegen.codegen.elemental.common import (COMPLEX_PARTS, Cx, Index, _COMPLEX_OK, _LIBDEVICE_UNARY, _LOW_FLOATS,
                                              _check_type, _nest)
from fusegen.codegen.elemental.complex_ops import ComplexOpsMixin
from fusegen.codegen.elemental.context import KernelContext
from fusegen.codegen.elemental.convert import ConvertMixin
from fusegen.codegen.elemental.elementwise import ElementwiseMixin
from fusegen.codegen.elemental.index_maps import IndexMapMixin
from fusegen.codegen.elemental.reduce_dot import ReduceDotMixin
from fusegen.codegen.elemental.shape_ops import ShapeOpsMixin
from fusegen.codegen.elemental.step_offsets import StepOffsetsMixin
from fusegen.codegen.elemental.uniform_runs import UniformRunsMixin
from fusegen.codegen.elemental.vector_reads import VectorReadsMixin


class ElementalGenerator(ShapeOpsMixin, IndexMapMixin, ReduceDotMixin, ElementwiseMixin, ConvertMixin,
                         ComplexOpsMixin, UniformRunsMixin, StepOffsetsMixin, VectorReadsMixin):
    """Generates values of one computation's instructions at given indices.

    Args:
        ctx: the kernel being written.
        comp: the computation (fused body, or a reducer / map computation).
        bindings: for nested computations, parameter number -> bound value (variable or list of them);
            ``None`` for the fused computation (parameters load from the operand buffers).
    """

    #: values are being read inside a window the kernel masks at its top level (a pad there may mask too)
    masked_window: bool = False

    def __init__(self, ctx: KernelContext, comp: Computation, bindings: dict[int, Any] | None = None,
                 parent: "ElementalGenerator | None" = None):
        self.ctx = ctx
        self.comp = comp
        self.bindings = bindings
        self.root_gen = parent.root_gen if parent is not None else self
        if parent is None:
            self._op_maps: dict[tuple[int, int], Any] = {}  # (id(inst), operand) -> (inst, output-to-input map)
            self._scopes: list[dict[Any, Any]] = [{}]
            self._lin_of: list[dict[Any, Any]] = [{}]
            self._delin: list[dict[Any, Any]] = [{}]
            self._coarse: dict[str, int | str] = {}  # index variable -> its twin on the coarse block (UniformRuns)
            self._steps: dict[str, Any] = {}  # index variable -> (base, coefficient) of a loop step (LoopSteps)
            self._lanes: dict[str, Any] = {}  # index variable -> (start, stride, start mod width) over a run
        else:  # index caches are shared with the enclosing generator (same kernel, same scopes)
            self._scopes = [{}]
            self._lin_of = parent._lin_of
            self._delin = parent._delin
        self.idx_scopes = parent.idx_scopes if parent is not None else [{}]

    # ---------------------------------------------------------------------------------------- scopes
    def push_scope(self) -> None:
        self._scopes.append({})
        self.idx_scopes.append({})
        self._lin_of.append({})
        self._delin.append({})

    def pop_scope(self) -> None:
        self._scopes.pop()
        self.idx_scopes.pop()
        self._lin_of.pop()
        self._delin.pop()

    @contextlib.contextmanager
    def masked_by(self, cond: str, hint: str) -> Iterator[None]:
        """Emit under the block's mask and ``cond`` (a pad's or window's test of its padding), the values in a
        scope of their own: the cache keys a value by (instruction, index) alone, so a copy loaded with lanes
        masked off must not stand for the value where the wider mask needs it (a broadcast operand read inside
        the pad and beside it)."""
        self._scopes.append({})
        try:
            with self.ctx.block(self.ctx.block_shape, mask=self.ctx.emit(f"{self.ctx.mask} & {cond}", hint)):
                yield
        finally:
            self._scopes.pop()

    @staticmethod
    def _lookup(scopes: list[dict], key: Any) -> Any:
        for s in reversed(scopes):
            if key in s:
                return s[key]
        return None

    # --------------------------------------------------------------------------------- index algebra
    def iexpr(self, expr: str, hint: str = "i") -> str:
        """A (de-duplicated) index variable holding ``expr``."""
        hit = self._lookup(self.idx_scopes, expr)
        if hit is not None:
            return hit
        name = self.ctx.emit(expr, hint)
        self.idx_scopes[-1][expr] = name
        return name

    def itensor(self, c: int | str) -> str:
        if isinstance(c, str):
            return c
        if c == 0:
            return self.ctx.zero
        return self.iexpr(f"{self.ctx.zero} + {int(c)}", "c")

    def iadd(self, a: int | str, b: int | str) -> int | str:
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if b == 0:
            return a
        if a == 0:
            return b
        r = self._twin(self.iexpr(f"{a} + {b}" if isinstance(a, str) else f"{b} + {a}"), self.iadd, a, b)
        return self._lane(self._step(r, "add", (a, b)), "add", (a, b))

    def isub(self, a: int | str, b: int | str) -> int | str:
        if isinstance(a, int) and isinstance(b, int):
            return a - b
        if b == 0:
            return a
        if isinstance(b, int) and b < 0:
            return self.iadd(a, -b)
        r = self._twin(self.iexpr(f"{self.itensor(a)} - {b}"),
                       lambda x, y: x - y if isinstance(x, int) and isinstance(y, int) else self.iexpr(f"{x} - {y}"),
                       a, b)
        return self._lane(self._step(r, "sub", (a, b)), "sub", (a, b))

    def imul(self, a: int | str, k: int) -> int | str:
        if isinstance(a, int):
            return a * k
        if k == 1:
            return a
        if k == 0:
            return 0
        r = self._step(self._twin(self.iexpr(f"{a} * {k}"), lambda x: self.imul(x, k), a), "mul", (a,), k)
        return self._lane(r, "mul", (a,), k)

    def idiv(self, a: int | str, k: int) -> int | str:
        if isinstance(a, int):
            return a // k
        return a if k == 1 else self._step(self._twin_div(self.iexpr(f"{a} // {k}"), a, k), "div", (a,))

    def imod(self, a: int | str, k: int) -> int | str:
        if isinstance(a, int):
            return a % k
        if k == 1:
            return 0
        r = self._step(self._twin(self.iexpr(f"{a} % {k}"), lambda x: self.imod(x, k), a), "mod", (a,))
        return self._lane(r, "mod", (a,), k)

    def iclamp(self, a: int | str, lo: int, hi: int) -> int | str:
        if isinstance(a, int):
            return min(max(a, lo), hi)
        if lo == hi:
            return lo
        r = self._twin(self.iexpr(f"tl.minimum(tl.maximum({a}, {lo}), {hi})"), lambda x: self.iclamp(x, lo, hi), a)
        return self._step(r, "clamp", (a,))

    def delinearize(self, lin: int | str, dims: Sequence[int], m2m: Sequence[int]) -> Index:
        """Index of linear position ``lin`` in a shape whose elements are laid out minor-to-major ``m2m``."""
        return self.delinearize_by_parts(((lin, 1, None),), lin, dims, m2m)

    def delinearize_by_parts(self, parts: Sequence[tuple[int | str, int, int | None]], lin: int | str,
                             dims: Sequence[int], m2m: Sequence[int]) -> Index:
        """:meth:`delinearize` of ``lin = sum(coord * stride)`` over ``parts`` (``(coord, stride, extent)``, each
        coordinate below its extent, ``None`` unbounded; the strides row-major over the extents), each dimension
        read from the one coordinate whose stride range holds it: ``(coord // (dim stride / stride)) % size``, no
        division of the whole linear index. XLA's indexing maps index a tiled transpose's operands from its normalized
        dimensions the same way (``emitters/transpose.cc``, the thread-to-input maps composed with the
        normalized shape's bitcast). Falls back to :meth:`delinearize` of ``lin`` when a dimension straddles two
        parts (the shape is not a refinement of the parts)."""
        dims = tuple(dims)
        m2m = tuple(m2m)
        key = (lin, dims, m2m)
        hit = self._lookup(self._delin, key)
        if hit is not None:
            return hit
        idx: list[int | str] = [0] * len(dims)
        stride = 1
        nontrivial = [d for d in m2m if dims[d] != 1]
        for d in m2m:
            size = dims[d]
            if size == 1:
                continue
            part = next(((c, s) for c, s, e in parts if stride % s == 0 and (e is None or stride * size <= s * e)),
                        None)
            if part is None:
                return self.delinearize(lin, dims, m2m)
            c, s = part
            q = self.idiv(c, stride // s)
            idx[d] = q if d == nontrivial[-1] else self.imod(q, size)
            stride *= size
        out = tuple(idx)
        self._delin[-1][key] = out
        self._lin_of[-1][(out, dims, m2m)] = lin
        return out

    def linearize(self, idx: Index, dims: Sequence[int], m2m: Sequence[int]) -> int | str:
        """Linear position of ``idx`` in a shape laid out minor-to-major ``m2m``."""
        dims = tuple(dims)
        m2m = tuple(m2m)
        hit = self._lookup(self._lin_of, (tuple(idx), dims, m2m))
        if hit is not None:
            return hit
        total: int | str = 0
        stride = 1
        const = 0
        terms: list[str] = []
        for d in m2m:
            c = idx[d]
            if isinstance(c, int):
                const += c * stride
            elif dims[d] != 1:
                terms.append(c if stride == 1 else f"{c} * {stride}")
            stride *= dims[d]
        if not terms:
            total = const
        else:
            expr = " + ".join(terms) + (f" + {const}" if const else "")
            total = self.iexpr(expr, "off")
            live = [0 if dims[d] == 1 else idx[d] for d in range(len(dims))]
            if self.ctx.runs is not None:
                self._twin(total, lambda *q: self.linearize(q, dims, m2m), *live)
            self._step(total, "lin", tuple(live), shape=(dims, m2m))
            self._lane(total, "lin", tuple(live), shape=(dims, m2m))
        self._lin_of[-1][(tuple(idx), dims, m2m)] = total
        return total

    # ------------------------------------------------------------------------------------- values
    def value(self, inst: Instruction, idx: Index) -> Any:
        """Variable(s) holding ``inst`` at ``idx``: a name for arrays, a (nested) list for tuples."""
        key = (id(inst), tuple(idx))
        hit = self._lookup(self._scopes, key)
        if hit is not None:
            return hit
        if len(idx) != inst.shape.rank and not inst.shape.is_tuple:
            raise EmitterUnsupported(inst.opcode, inst.name, f"index of rank {len(idx)} for rank {inst.shape.rank}")
        res = self._emit(inst, tuple(idx))
        self._scopes[-1][key] = res
        return res

    def bind_value(self, inst: Instruction, idx: Index, value: Any) -> None:
        """Make :meth:`value` of ``inst`` at ``idx`` return ``value`` (a variable, or a list for tuples).

        For emitters that compute a hero themselves and hand its value to the elemental epilogue
        (XLA's "injected values"). The binding lives in the innermost scope (:meth:`push_scope`), so a
        value bound inside a loop body is forgotten when the loop's scope is popped. ``idx`` must be
        the canonical index the epilogue will ask for (as returned by :meth:`delinearize` etc.).
        """
        self._scopes[-1][(id(inst), tuple(idx))] = value

    def emit(self, expr: str, inst: Instruction) -> str:
        return self.ctx.emit(expr, inst.name)

    def _emit(self, inst: Instruction, idx: Index) -> Any:
        op = inst.opcode
        _check_type(inst)
        if self.ctx.complex_values and (op in ("complex", "real", "imag") or (
                op in ("add", "subtract", "multiply", "divide", "negate", "power")
                and inst.shape.element_type in COMPLEX_PARTS)
                or (op in ("abs", "tanh", "tan") and inst.operands
                    and inst.operands[0].shape.element_type in COMPLEX_PARTS)):
            return self._complex_op(inst, idx)
        has_complex = any(leaf.element_type in COMPLEX_PARTS for x in [inst] + list(inst.operands)
                          for leaf in x.shape.leaves())
        if has_complex and not self.ctx.complex_values:
            et = next(leaf.element_type for x in [inst] + list(inst.operands) for leaf in x.shape.leaves()
                      if leaf.element_type in COMPLEX_PARTS)
            raise EmitterUnsupported(op, inst.name, f"element type {et} has no Triton type")
        if has_complex and op not in _COMPLEX_OK:
            raise EmitterUnsupported(op, inst.name, "complex operands are only supported by elementwise "
                                     "add/subtract/multiply/divide/negate/power/abs/tanh/tan, compare EQ/NE, convert and "
                                     "data movement")
        handler = _HANDLERS.get(op)
        if handler is not None:
            return handler(self, inst, idx)
        if op in _LIBDEVICE_UNARY:
            return self._unary_math(inst, idx, _LIBDEVICE_UNARY[op])
        raise EmitterUnsupported(op, inst.name, f"opcode {op!r} is not supported by the elemental emitter")

    # ------------------------------------------------------------------------------------- helpers
    def where(self, cond: str, a: Any, b: Any, hint: str) -> Any:
        """``tl.where(cond, a, b)`` on values: per part for complex values, per leaf for tuples."""
        if isinstance(a, Cx):
            return Cx((self.ctx.emit(f"tl.where({cond}, {a.re}, {b.re})", hint),
                       self.ctx.emit(f"tl.where({cond}, {a.im}, {b.im})", hint)))
        if isinstance(a, list):
            return [self.where(cond, x, y, hint) for x, y in zip(a, b)]
        return self.ctx.emit(f"tl.where({cond}, {a}, {b})", hint)

    def tl(self, et: str) -> str:
        return ts.tl_dtype(et)

    def up(self, v: str, et: str) -> str:
        """``v`` in its compute type (f16/bf16/fp8 -> f32; the types Triton lacks decoded from their bits)."""
        if et in BIT_FLOATS:
            key = ("up", v)
            hit = self._lookup(self._scopes, key)
            if hit is None:
                hit = narrow_float.decode(self.ctx.emit, v, et)
                self._scopes[-1][key] = hit
            return hit
        if et in _LOW_FLOATS:
            key = ("up", v)
            hit = self._lookup(self._scopes, key)
            if hit is None:
                hit = self.ctx.emit(f"{v}.to(tl.float32)", "up")
                self._scopes[-1][key] = hit
            return hit
        return v

    def down(self, v: str, et: str, hint: str) -> str:
        if et in BIT_FLOATS:  # v is f32 (the compute type)
            return narrow_float.encode(self.ctx.emit, v, "f32", et)
        if et in _LOW_FLOATS:
            return self.ctx.emit(f"{v}.to({self.tl(et)})", hint)
        return v

    def compute_type(self, et: str) -> str:
        return "f32" if et in _LOW_FLOATS or et in BIT_FLOATS else et

    def fconst(self, value: float, et: str) -> str:
        return self.ctx.emit(ts.float_constant(value, et, self.ctx.block_shape), "k")

    def iconst(self, value: int, et: str) -> str:
        return self.ctx.emit(ts.int_constant(value, et, self.ctx.block_shape), "k")

    def wrap_subbyte(self, v: str, et: str, hint: str) -> str:
        if et in ("s4", "s2"):
            sh = 8 - dtypes.bit_width(et)
            return self.ctx.emit(f"(({v} << {sh}) >> {sh})", hint)
        if et in ("u4", "u2"):
            return self.ctx.emit(f"({v} & {(1 << dtypes.bit_width(et)) - 1})", hint)
        return v

    def scalar_index(self, inst: Instruction, lo: int | None = None, hi: int | None = None) -> str:
        """A scalar integer operand (start index) as an index tensor, clamped to ``[lo, hi]`` if given.

        The clamp is done in the operand's own type when that type does not fit the index type
        (``s64``/``u64``, or ``u32`` with 32-bit indices): narrowing first would wrap, e.g. an ``s64``
        start of ``-10**12`` would become a positive 32-bit value (XLA clamps in the start's type).

        Raises:
            EmitterUnsupported: the operand is not an integer.
        """
        v = self.value(inst, ())
        et = inst.shape.element_type
        if not dtypes.is_integral(et):
            raise EmitterUnsupported(inst.opcode, inst.name, "start index must be an integer")
        return self.to_index(v, et, lo, hi)

    def to_index(self, v: str, et: str, lo: int | None = None, hi: int | None = None) -> str:
        """Integer value ``v`` of element type ``et`` converted to the index type, clamped to
        ``[lo, hi]`` (when given) before narrowing so out-of-range values saturate instead of wrapping."""
        idx_bits = 64 if self.ctx.idx_t == "tl.int64" else 32
        bits = dtypes.bit_width(et)
        fits = bits < idx_bits or (bits == idx_bits and dtypes.is_signed_int(et))
        if not fits and (lo is not None or hi is not None):
            t = self.tl(et)
            if lo is not None and dtypes.is_signed_int(et):
                v = self.ctx.emit(f"tl.maximum({v}, {self.ctx.full(int(lo), t)})", "sclamp")
            if hi is not None:
                v = self.ctx.emit(f"tl.minimum({v}, {self.ctx.full(max(int(hi), 0), t)})", "sclamp")
        clamped = not fits and lo is not None and hi is not None and (dtypes.is_signed_int(et) or lo <= 0)
        r = self.ctx.emit(f"{v}.to({self.ctx.idx_t})", "start")
        if lo is not None and hi is not None and not clamped:
            r = self.iclamp(r, int(lo), int(hi))
        return r

    def call_computation(self, comp: Computation, args: list[Any]) -> Any:
        """Emit ``comp`` (a scalar reducer / map body) on bound argument variables at the current point."""
        gen = ElementalGenerator(self.ctx, comp, {i: a for i, a in enumerate(args)}, parent=self)
        if comp.root is None:
            raise EmitterUnsupported("call", comp.name, "computation has no root")
        for inst in comp.instructions:
            if inst.shape.is_array and inst.shape.rank != 0:
                raise EmitterUnsupported(inst.opcode, inst.name, "non-scalar instruction in a reducer computation")
        return gen.value(comp.root, ())

    # ---------------------------------------------------------------------------- leaf instructions
    def _parameter(self, inst: Instruction, idx: Index) -> Any:
        n = inst.parameter_number
        if self.bindings is not None:
            if n not in self.bindings:
                raise EmitterUnsupported("parameter", inst.name, f"unbound parameter {n}")
            return self.bindings[n]
        if inst.shape.is_tuple:
            # read whole: only when every leaf has the shape of the index (else use get-tuple-element)
            leaves = inst.shape.leaves()
            if any(leaf.dimensions != leaves[0].dimensions or not leaf.is_array for leaf in leaves):
                raise EmitterUnsupported("parameter", inst.name, "tuple-shaped fusion parameter read other than "
                                         "through get-tuple-element, with leaves of different shapes")
            flat = [self.tuple_parameter_leaf(inst, k, idx) for k in range(len(leaves))]
            return _nest(inst.shape, iter(flat))
        ptr, shape = self.parameter_buffer(inst)
        return self._load(ptr, shape, idx, inst)

    def tuple_parameter_leaf(self, inst: Instruction, leaf: int, idx: Index) -> str:
        """Leaf number ``leaf`` (flat, in :meth:`Shape.leaves` order) of the tuple-shaped fusion parameter
        ``inst``, loaded at ``idx``.

        A tuple-shaped fusion operand is passed to the kernel as one buffer per leaf: a
        :class:`~fusegen.codegen.kernel.KernelParam` of kind ``"operand_leaf"`` whose ``index`` is the
        operand number and whose ``value`` is the flat leaf number (as XLA passes each leaf's buffer).
        """
        n = inst.parameter_number
        leaves = inst.shape.leaves()
        op_shape = self.ctx.operand_shapes[n] if n < len(self.ctx.operand_shapes) else inst.shape
        op_leaves = op_shape.leaves() if op_shape.is_tuple else []
        shape = op_leaves[leaf] if len(op_leaves) == len(leaves) else leaves[leaf]
        if shape.dimensions != leaves[leaf].dimensions:
            shape = leaves[leaf]
        if not shape.is_array:
            raise EmitterUnsupported("parameter", inst.name, f"tuple parameter leaf {leaf} is not an array")
        _check_type(inst, shape)
        ptr = self.ctx.param("operand_leaf", n, shape, f"{inst.name}_{leaf}", value=leaf,
                             key=("operand_leaf", n, leaf))
        return self._load(ptr, shape, idx, inst)

    def _load(self, ptr: str, shape: Shape, idx: Index, inst: Instruction) -> Any:
        lin = self.linearize(idx, shape.dimensions, shape.minor_to_major())
        if isinstance(lin, int) and self.ctx.block_shape != "[]":
            return self._load_uniform(ptr, shape, lin, inst)
        v = None
        if self.ctx.runs is not None:
            v = self._load_runs(ptr, shape, lin, inst)
            if v is None:
                v = self._load_reversed_runs(ptr, shape, lin, inst)
        if v is None and self.ctx.steps is not None:
            v = self._load_steps(ptr, shape, lin, inst)
        if v is not None:
            return v
        off = self.itensor(lin)
        if shape.element_type in COMPLEX_PARTS:
            o2 = self.ctx.emit(f"{off} * 2", "off")
            re = self.ctx.emit(f"tl.load({ptr} + {o2}, mask={self.ctx.mask}, other=0)", f"{inst.name}_re")
            im = self.ctx.emit(f"tl.load({ptr} + {o2} + 1, mask={self.ctx.mask}, other=0)", f"{inst.name}_im")
            return Cx((re, im))
        # fp8: no `other` (the interpreter cannot cast it to fp8); every index is in range anyway
        other = "" if shape.element_type.startswith("f8") else ", other=0"
        v = self.ctx.emit(f"tl.load({ptr} + {off}, mask={self.ctx.mask}{other})", inst.name)
        if shape.element_type == "pred":
            v = self.ctx.emit(f"{v} != 0", inst.name)
        return v

    def _load_uniform(self, ptr: str, shape: Shape, offset: int, inst: Instruction) -> Any:
        """The element at constant ``offset`` (a scalar parameter, a broadcast scale): one unmasked scalar load
        per thread, broadcast to the block, as XLA's emitter loads a uniform value once (a ``[BLOCK]`` load at a
        constant offset is one load per element a thread holds: Triton does not merge equal addresses).
        ``offset`` is in range by the generator's invariant, so no mask is needed."""
        em, bs = self.ctx.emit, self.ctx.block_shape
        if shape.element_type in COMPLEX_PARTS:
            re = em(f"tl.broadcast_to(tl.load({ptr} + {2 * offset}), {bs})", f"{inst.name}_re")
            im = em(f"tl.broadcast_to(tl.load({ptr} + {2 * offset + 1}), {bs})", f"{inst.name}_im")
            return Cx((re, im))
        v = em(f"tl.broadcast_to(tl.load({ptr} + {offset}), {bs})", inst.name)
        if shape.element_type == "pred":
            v = em(f"{v} != 0", inst.name)
        return v


_HANDLERS: dict[str, Callable[[ElementalGenerator, Instruction, Index], Any]] = {
    "parameter": ElementalGenerator._parameter,
    "constant": ElementalGenerator._constant,
    "iota": ElementalGenerator._iota,
    "broadcast": ElementalGenerator._broadcast,
    "reshape": ElementalGenerator._reshape,
    "bitcast": ElementalGenerator._bitcast,
    "copy": ElementalGenerator._copy,
    "transpose": ElementalGenerator._transpose,
    "slice": ElementalGenerator._slice,
    "reverse": ElementalGenerator._reverse,
    "pad": ElementalGenerator._pad,
    "concatenate": ElementalGenerator._concatenate,
    "dynamic-slice": ElementalGenerator._dynamic_slice,
    "dynamic-update-slice": ElementalGenerator._dynamic_update_slice,
    "gather": ElementalGenerator._gather,
    "tuple": ElementalGenerator._tuple,
    "get-tuple-element": ElementalGenerator._gte,
    "map": ElementalGenerator._map,
    "reduce": ElementalGenerator._reduce,
    "reduce-window": ElementalGenerator._reduce_window,
    "dot": ElementalGenerator._dot,
    "compare": ElementalGenerator._compare,
    "select": ElementalGenerator._select,
    "clamp": ElementalGenerator._clamp,
    "convert": ElementalGenerator._convert,
    "bitcast-convert": ElementalGenerator._bitcast_convert,
    "reduce-precision": ElementalGenerator._reduce_precision,
    "shift-left": ElementalGenerator._shift,
    "complex": ElementalGenerator._complex_op,
    "real": ElementalGenerator._complex_op,
    "imag": ElementalGenerator._complex_op,
    "shift-right-logical": ElementalGenerator._shift,
    "shift-right-arithmetic": ElementalGenerator._shift,
}
for _op in ("add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2",
            "and", "or", "xor"):
    _HANDLERS[_op] = ElementalGenerator._arith
for _op in ("not", "negate", "abs", "sign", "is-finite", "logistic", "popcnt", "count-leading-zeros"):
    _HANDLERS[_op] = ElementalGenerator._unary
