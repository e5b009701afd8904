"""Elemental emission of a fused computation as Triton expressions, through indexing maps.

Mirrors XLA's ``elemental_hlo_to_mlir.cc`` (``ProvideParameter`` / ``EmitElementalHloInstruction``) and
the indexing maps of ``indexing_analysis.cc``: to produce one element of an instruction at an index
(one Triton ``[BLOCK]`` int tensor per logical dimension) the generator maps the index to its operands'
indices and recurses; parameters are loaded at their physical offset ``sum(idx[d] * stride[d])``.

Every value is a ``[BLOCK]`` tensor variable of the instruction's element type. A value read at the same
indices is computed once (cache keyed by ``(instruction, index tuple)``), which is the partitioner's point
in XLA: no exponential recomputation when an instruction has several users. Index tuples are canonical
(variables are themselves de-duplicated by expression, and linear-index round trips such as
``bitcast(bitcast(x))`` are recognised), so equal indices hit the cache.

Invariant: every index the generator produces lies inside its shape (tail lanes are clamped by the
caller; pad/concatenate/dynamic-update-slice/gather clamp their operand indices and select), so no load
can leave its buffer.

Numerics follow XLA:GPU: f16/bf16/fp8 arithmetic is done in f32 and rounded back; transcendental functions
call libdevice; integer division by zero gives -1 (all ones), ``INT_MIN / -1`` gives ``INT_MIN``;
float->int conversion saturates and maps NaN to 0; shifts by >= bit width give 0 (or the sign fill);
``maximum``/``minimum`` propagate NaN; integer ``power`` is exponentiation by squaring (negative exponents
give 1 for base 1, ±1 for base -1 by the exponent's parity, and 0 otherwise); start indices wider than the index type saturate before they are narrowed.
``reduce`` and ``reduce-window`` are runtime loops over the reduced elements / window positions (f16/bf16
add/multiply reducers accumulate in f32 and round once, as the reference evaluator does).

Tuple-shaped fusion parameters are read leaf by leaf (one kernel buffer per leaf, parameter kind
``"operand_leaf"``) through their ``get-tuple-element`` users.

Emitters that compute part of a fusion themselves (a hero) hand its values to the generator with
:meth:`ElementalGenerator.bind_value`, and emit on another block shape (a reduction's epilogue, scalar
combine functions) with :meth:`KernelContext.block`.

Anything else raises :class:`~fusegen.codegen.emitter.EmitterUnsupported` naming the op and instruction.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Callable, Sequence

import numpy as np

from fusegen.codegen import triton_source as ts
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.codegen.kernel import KernelParam
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Computation, Instruction, Shape

Index = tuple  # of int | str (a variable holding an index tensor)

#: Opcodes XLA treats as elementwise (``HloInstruction::IsElementwise``) that fusegen emits.
ELEMENTWISE = frozenset({
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "convert", "copy", "cosine",
    "count-leading-zeros", "divide", "erf", "exponential", "exponential-minus-one", "floor", "is-finite",
    "log", "log-plus-one", "logistic", "maximum", "minimum", "multiply", "negate", "not", "or", "popcnt",
    "power", "reduce-precision", "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt", "select",
    "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sine", "sqrt", "subtract",
    "tan", "tanh", "xor", "bitcast-convert", "acos", "acosh", "asin", "asinh", "atanh", "cosh", "sinh",
    "atan", "map",
})

_LOW_FLOATS = ("f16", "bf16", "f8e4m3fn", "f8e5m2")

_LIBDEVICE_UNARY = {
    "exponential": "exp", "log": "log", "log-plus-one": "log1p", "exponential-minus-one": "expm1",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "cbrt": "cbrt", "tanh": "tanh", "sine": "sin", "cosine": "cos",
    "tan": "tan", "erf": "erf", "floor": "floor", "ceil": "ceil", "round-nearest-afz": "round",
    "round-nearest-even": "rint", "acos": "acos", "asin": "asin", "atan": "atan", "acosh": "acosh",
    "asinh": "asinh", "atanh": "atanh", "cosh": "cosh", "sinh": "sinh",
}

_CMP = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def int_list(v: Any) -> tuple[int, ...]:
    """An attribute that is a tuple of ints, or raw text like ``{1,2}`` (parser keeps unknown keys raw)."""
    if v is None:
        return ()
    if isinstance(v, (list, tuple)):
        return tuple(int(x) for x in v)
    if isinstance(v, int):
        return (v,)
    s = str(v).strip().strip("{}").strip()
    return tuple(int(x) for x in s.split(",") if x.strip()) if s else ()


def is_float(et: str) -> bool:
    return dtypes.is_floating(et)


def _int_range(et: str) -> tuple[int, int]:
    bits = dtypes.bit_width(et)
    if dtypes.is_unsigned_int(et):
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


#: Complex element types and the float type of their parts.
COMPLEX_PARTS = {"c64": "f32", "c128": "f64"}
#: Opcodes that accept complex operands / results (besides the complex arithmetic of ``_complex_op``).
_COMPLEX_OK = frozenset({
    "parameter", "constant", "broadcast", "reshape", "copy", "transpose", "slice", "reverse", "pad",
    "concatenate", "dynamic-slice", "dynamic-update-slice", "gather", "tuple", "get-tuple-element", "select",
    "compare", "convert", "bitcast",
})


class Cx(tuple):
    """A complex value: the pair ``(re, im)`` of variables of the part type (``c64`` -> f32 parts).

    Buffers of complex type are stored as interleaved parts (numpy's layout), read and written by the
    part type at offsets ``2 * off`` and ``2 * off + 1``.
    """

    __slots__ = ()

    @property
    def re(self) -> str:
        return self[0]

    @property
    def im(self) -> str:
        return self[1]


def _check_type(inst: Instruction, shape: Shape | None = None) -> None:
    shape = shape or inst.shape
    for leaf in shape.leaves():
        et = leaf.element_type
        if et in COMPLEX_PARTS:
            continue
        try:
            ts.tl_dtype(et)
        except dtypes.UnsupportedTypeError:
            raise EmitterUnsupported(inst.opcode, inst.name, f"element type {et} has no Triton type") from None
        if leaf.dynamic and any(leaf.dynamic):
            raise EmitterUnsupported(inst.opcode, inst.name, "dynamic shapes are not supported")


def parse_constant(inst: Instruction) -> np.ndarray:
    """The logical value of a ``constant`` instruction.

    Raises:
        EmitterUnsupported: the literal is elided (``{...}``) or cannot be parsed.
    """
    text = inst.attrs.get("literal")
    if text is None:
        raise EmitterUnsupported("constant", inst.name, "literal is elided ({...})")
    try:
        from fusegen.hlo.literal import parse_literal

        val = parse_literal(text, inst.shape)
    except ImportError:
        val = _parse_scalar_literal(str(text), inst.shape)
    except Exception as e:  # a literal the parser rejects: decline, the host backend reports it
        raise EmitterUnsupported("constant", inst.name, f"cannot parse literal: {e}") from None
    return np.asarray(val).reshape(inst.shape.dimensions)


def _parse_scalar_literal(text: str, shape: Shape) -> np.ndarray:
    t = text.strip().strip("{}").strip()
    et = shape.element_type
    if shape.numel != 1 or "," in t:
        raise EmitterUnsupported("constant", "", "array literals need fusegen.hlo.literal")
    if et == "pred":
        v: Any = t.lower() in ("true", "1")
    elif is_float(et):
        v = float(t.replace("inf", "inf"))
    else:
        v = int(t, 0)
    return np.asarray(v).astype(dtypes.numpy_dtype(et)).reshape(shape.dimensions)


class KernelContext:
    """State of one kernel being written: names, body lines, buffer parameters, index dtype.

    Args:
        index_dtype: ``"tl.int32"`` or ``"tl.int64"`` for index arithmetic.
        operand_shapes: shapes of the fusion operands (their layouts give parameter strides; a
            tuple-shaped operand is passed as one buffer per leaf, see :meth:`ElementalGenerator._parameter`).

    Attributes an emitter may set while generating (each names a variable / constexpr of the kernel):
        mask: the ``[block]`` boolean tensor every ``tl.load`` is masked with (``"mask"``). An emitter
            whose indices are all clamped into range may set a variable that is all true.
        zero: the ``[block]`` index tensor of zeros (``"zero"``), in :attr:`idx_t`; index constants are
            ``zero + k`` so they have the block's shape.
        block_shape: the shape text of the current block (``"[BLOCK]"``); constants the generator
            builds are ``tl.full(<block_shape>, ...)``. Set it to e.g. ``"[OBLOCK]"`` while emitting on a
            smaller block, or ``"[]"`` for scalar code (combine functions); :meth:`block` does this for a
            ``with`` block.
        complex_values: whether the emitter handles complex values (:class:`Cx` pairs, stored with
            :func:`fusegen.codegen.emitter.store_line`); when false (the default) complex types are
            declined as before. The loop emitter sets it.
    """

    def __init__(self, index_dtype: str, operand_shapes: Sequence[Shape]):
        self.names = ts.NameAllocator()
        self.body = ts.SourceBuilder()
        self.body.level = 1
        self.idx_t = index_dtype
        self.operand_shapes = list(operand_shapes)
        self.params: list[KernelParam] = []
        self.param_names: list[str] = []
        self._param_keys: dict[Any, str] = {}
        self.mask = "mask"
        self.zero = "zero"
        self.block_shape = "[BLOCK]"
        self.complex_values = False
        for n in ("lin_c", "off", "t"):
            self.names.reserve(n)

    def full(self, value: Any, tl_type: str) -> str:
        """``tl.full(<block_shape>, value, tl_type)`` text (``value`` is already a safe literal)."""
        return f"tl.full({self.block_shape}, {value}, {tl_type})"

    def block(self, shape: str, mask: str | None = None, zero: str | None = None) -> "_BlockSetting":
        """Context manager emitting on another block: sets :attr:`block_shape` (and optionally
        :attr:`mask`, :attr:`zero`) and restores the previous values on exit."""
        return _BlockSetting(self, shape, mask, zero)

    def emit(self, expr: str, hint: str = "t") -> str:
        name = self.names.fresh(hint)
        self.body.line(f"{name} = {expr}")
        return name

    def param(self, kind: str, index: int, shape: Shape, hint: str, value: Any = None, key: Any = None) -> str:
        k = key if key is not None else (kind, index)
        if k in self._param_keys:
            return self._param_keys[k]
        name = self.names.fresh(f"{kind[:3]}_{hint}")
        self.params.append(KernelParam(kind=kind, index=index, shape=shape, value=value))
        self.param_names.append(name)
        self._param_keys[k] = name
        return name

    def constant_param(self, inst: Instruction, value: np.ndarray) -> str:
        key = ("constant", id(inst))
        if key in self._param_keys:
            return self._param_keys[key]
        k = sum(1 for p in self.params if p.kind == "constant")
        return self.param("constant", k, inst.shape, inst.name, value=value, key=key)

    def render(self, entry: str, constexprs: Sequence[str], prologue: Sequence[str] = ()) -> str:
        args = list(self.param_names) + [f"{c}: tl.constexpr" for c in constexprs]
        out = ts.module_header()
        out.append("")
        out.append("@triton.jit")
        out.append(f"def {entry}({', '.join(args)}):")
        out.extend("    " + p for p in prologue)
        out.extend(self.body.lines)
        return "\n".join(out) + "\n"


class _BlockSetting:
    def __init__(self, ctx: "KernelContext", shape: str, mask: str | None, zero: str | None):
        self.ctx, self.new = ctx, (shape, mask, zero)

    def __enter__(self) -> "KernelContext":
        c = self.ctx
        self.old = (c.block_shape, c.mask, c.zero)
        shape, mask, zero = self.new
        c.block_shape = shape
        c.mask = mask if mask is not None else c.mask
        c.zero = zero if zero is not None else c.zero
        return c

    def __exit__(self, *a: Any) -> None:
        self.ctx.block_shape, self.ctx.mask, self.ctx.zero = self.old


class ElementalGenerator:
    """Generates values of one computation's instructions at given indices.

    Args:
        ctx: the kernel being written.
        comp: the computation (fused body, or a reducer / map computation).
        bindings: for nested computations, parameter number -> bound value (variable or list of them);
            ``None`` for the fused computation (parameters load from the operand buffers).
    """

    def __init__(self, ctx: KernelContext, comp: Computation, bindings: dict[int, Any] | None = None,
                 parent: "ElementalGenerator | None" = None):
        self.ctx = ctx
        self.comp = comp
        self.bindings = bindings
        self.root_gen = parent.root_gen if parent is not None else self
        if parent is None:
            self._scopes: list[dict[Any, Any]] = [{}]
            self._lin_of: list[dict[Any, Any]] = [{}]
            self._delin: list[dict[Any, Any]] = [{}]
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
        return self.iexpr(f"{a} + {b}" if isinstance(a, str) else f"{b} + {a}")

    def isub(self, a: int | str, b: int | str) -> int | str:
        if isinstance(a, int) and isinstance(b, int):
            return a - b
        if b == 0:
            return a
        if isinstance(b, int) and b < 0:
            return self.iadd(a, -b)
        return self.iexpr(f"{self.itensor(a)} - {b}")

    def imul(self, a: int | str, k: int) -> int | str:
        if isinstance(a, int):
            return a * k
        if k == 1:
            return a
        if k == 0:
            return 0
        return self.iexpr(f"{a} * {k}")

    def idiv(self, a: int | str, k: int) -> int | str:
        if isinstance(a, int):
            return a // k
        return a if k == 1 else self.iexpr(f"{a} // {k}")

    def imod(self, a: int | str, k: int) -> int | str:
        if isinstance(a, int):
            return a % k
        return 0 if k == 1 else self.iexpr(f"{a} % {k}")

    def iclamp(self, a: int | str, lo: int, hi: int) -> int | str:
        if isinstance(a, int):
            return min(max(a, lo), hi)
        if lo == hi:
            return lo
        return self.iexpr(f"tl.minimum(tl.maximum({a}, {lo}), {hi})")

    def delinearize(self, lin: int | str, dims: Sequence[int], m2m: Sequence[int]) -> Index:
        """Index of linear position ``lin`` in a shape whose elements are laid out minor-to-major ``m2m``."""
        dims = tuple(dims)
        m2m = tuple(m2m)
        key = (lin, dims, m2m)
        hit = self._lookup(self._delin, key)
        if hit is not None:
            return hit
        idx: list[int | str] = [0] * len(dims)
        stride = 1
        nontrivial = [d for d in m2m if dims[d] != 1]
        for k, d in enumerate(m2m):
            size = dims[d]
            if size == 1:
                continue
            q = self.idiv(lin, stride)
            is_most_major = d == nontrivial[-1]
            idx[d] = q if is_most_major else self.imod(q, size)
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
                op in ("add", "subtract", "multiply", "divide", "negate") and inst.shape.element_type in COMPLEX_PARTS)):
            return self._complex_op(inst, idx)
        has_complex = any(leaf.element_type in COMPLEX_PARTS for x in [inst] + list(inst.operands)
                          for leaf in x.shape.leaves())
        if has_complex and not self.ctx.complex_values:
            et = next(leaf.element_type for x in [inst] + list(inst.operands) for leaf in x.shape.leaves()
                      if leaf.element_type in COMPLEX_PARTS)
            raise EmitterUnsupported(op, inst.name, f"element type {et} has no Triton type")
        if has_complex and op not in _COMPLEX_OK:
            raise EmitterUnsupported(op, inst.name, "complex operands are only supported by elementwise "
                                     "add/subtract/multiply/divide/negate, compare EQ/NE, convert and data movement")
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

    def _complex_op(self, inst: Instruction, idx: Index) -> Any:
        """Complex arithmetic (``c64`` / ``c128``) on ``(re, im)`` pairs: add, subtract, multiply, divide
        (Smith's algorithm, as numpy), negate, compare EQ/NE, select; ``complex``/``real``/``imag``."""
        op = inst.opcode
        name = inst.name
        em = self.ctx.emit
        if op == "complex":
            a, b = self._operands(inst, idx)
            return Cx((a, b))
        if op in ("real", "imag"):
            (x,) = self._operands(inst, idx)
            if not isinstance(x, Cx):  # real(x) = x, imag(x) = 0 for a real x
                et = inst.shape.element_type
                return x if op == "real" else self.ctx.emit(ts.float_constant(0.0, et, self.ctx.block_shape), name)
            return x.re if op == "real" else x.im
        vals = self._operands(inst, idx)
        if op == "negate":
            (x,) = vals
            return Cx((em(f"-{x.re}", name), em(f"-{x.im}", name)))
        a, b = vals
        if op in ("add", "subtract"):
            sym = "+" if op == "add" else "-"
            return Cx((em(f"{a.re} {sym} {b.re}", name), em(f"{a.im} {sym} {b.im}", name)))
        if op == "multiply":
            return Cx((em(f"{a.re} * {b.re} - {a.im} * {b.im}", name), em(f"{a.re} * {b.im} + {a.im} * {b.re}", name)))
        if op == "divide":
            big = em(f"tl.abs({b.re}) >= tl.abs({b.im})", "cdv")
            r1 = em(f"{b.im} / {b.re}", "cdv")
            d1 = em(f"{b.re} + {b.im} * {r1}", "cdv")
            r2 = em(f"{b.re} / {b.im}", "cdv")
            d2 = em(f"{b.re} * {r2} + {b.im}", "cdv")
            re = em(f"tl.where({big}, ({a.re} + {a.im} * {r1}) / {d1}, ({a.re} * {r2} + {a.im}) / {d2})", name)
            im = em(f"tl.where({big}, ({a.im} - {a.re} * {r1}) / {d1}, ({a.im} * {r2} - {a.re}) / {d2})", name)
            return Cx((re, im))
        raise EmitterUnsupported(op, name, f"{op} on {inst.operands[0].shape.element_type}")

    def tl(self, et: str) -> str:
        return ts.tl_dtype(et)

    def up(self, v: str, et: str) -> str:
        """``v`` in its compute type (f16/bf16/fp8 -> f32)."""
        if et in _LOW_FLOATS:
            key = ("up", v)
            hit = self._lookup(self._scopes, key)
            if hit is None:
                hit = self.ctx.emit(f"{v}.to(tl.float32)", "up")
                self._scopes[-1][key] = hit
            return hit
        return v

    def down(self, v: str, et: str, hint: str) -> str:
        if et in _LOW_FLOATS:
            return self.ctx.emit(f"{v}.to({self.tl(et)})", hint)
        return v

    def compute_type(self, et: str) -> str:
        return "f32" if et in _LOW_FLOATS else et

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
        shape = self.ctx.operand_shapes[n] if n < len(self.ctx.operand_shapes) else inst.shape
        if shape.dimensions != inst.shape.dimensions:
            shape = inst.shape
        ptr = self.ctx.param("operand", n, shape, inst.name)
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
        off = self.itensor(self.linearize(idx, shape.dimensions, shape.minor_to_major()))
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

    def _constant(self, inst: Instruction, idx: Index) -> Any:
        et = inst.shape.element_type
        val = parse_constant(inst)
        if val.size == 1 and et in COMPLEX_PARTS:
            x = complex(val.reshape(-1)[0])
            pt = COMPLEX_PARTS[et]
            return Cx((self.ctx.emit(ts.float_constant(x.real, pt, self.ctx.block_shape), f"{inst.name}_re"),
                       self.ctx.emit(ts.float_constant(x.imag, pt, self.ctx.block_shape), f"{inst.name}_im")))
        if val.size == 1:
            x = val.reshape(-1)[0]
            if et == "pred":
                return self.ctx.emit(ts.int_constant(bool(x), "pred", self.ctx.block_shape), inst.name)
            if is_float(et):
                return self.ctx.emit(ts.float_constant(float(np.asarray(x).astype(np.float64)), et, self.ctx.block_shape), inst.name)
            return self.ctx.emit(ts.int_constant(int(x), et, self.ctx.block_shape), inst.name)
        ptr = self.ctx.constant_param(inst, val)
        return self._load(ptr, inst.shape, idx, inst)

    def _iota(self, inst: Instruction, idx: Index) -> str:
        d = int(inst.attrs.get("iota_dimension", 0))
        c = self.itensor(idx[d])
        et = inst.shape.element_type
        if et == "pred":
            return self.ctx.emit(f"{c} != 0", inst.name)
        if et in _LOW_FLOATS:
            return self.ctx.emit(f"{c}.to(tl.float32).to({self.tl(et)})", inst.name)
        return self.ctx.emit(f"{c}.to({self.tl(et)})", inst.name)

    # --------------------------------------------------------------------------- index transforms
    def _broadcast(self, inst: Instruction, idx: Index) -> Any:
        dims = int_list(inst.attrs.get("dimensions"))
        return self.value(inst.operands[0], tuple(idx[d] for d in dims))

    def _reshape(self, inst: Instruction, idx: Index) -> Any:
        src = inst.operands[0]
        if src.shape.element_type != inst.shape.element_type:
            raise EmitterUnsupported(inst.opcode, inst.name, "reshape changes the element type")
        out_rm = tuple(range(inst.shape.rank - 1, -1, -1))
        in_rm = tuple(range(src.shape.rank - 1, -1, -1))
        lin = self.linearize(idx, inst.shape.dimensions, out_rm)
        return self.value(src, self.delinearize(lin, src.shape.dimensions, in_rm))

    def _bitcast(self, inst: Instruction, idx: Index) -> Any:
        src = inst.operands[0]
        if src.shape.numel != inst.shape.numel:
            raise EmitterUnsupported(inst.opcode, inst.name, "bitcast changes the element count")
        s_et, d_et = src.shape.element_type, inst.shape.element_type
        if dtypes.bit_width(s_et) != dtypes.bit_width(d_et):
            raise EmitterUnsupported(inst.opcode, inst.name, "bitcast between element types of different widths")
        lin = self.linearize(idx, inst.shape.dimensions, inst.shape.minor_to_major())
        v = self.value(src, self.delinearize(lin, src.shape.dimensions, src.shape.minor_to_major()))
        if s_et != d_et:
            return self._reinterpret(v, s_et, d_et, inst)
        return v

    def _reinterpret(self, v: str, s_et: str, d_et: str, inst: Instruction) -> str:
        if "pred" in (s_et, d_et) or dtypes.bit_width(s_et) < 8 or s_et in COMPLEX_PARTS or d_et in COMPLEX_PARTS:
            raise EmitterUnsupported(inst.opcode, inst.name, f"bit reinterpretation {s_et} -> {d_et}")
        return self.ctx.emit(f"{v}.to({self.tl(d_et)}, bitcast=True)", inst.name)

    def _copy(self, inst: Instruction, idx: Index) -> Any:
        return self.value(inst.operands[0], idx)

    def _transpose(self, inst: Instruction, idx: Index) -> Any:
        perm = int_list(inst.attrs.get("dimensions"))
        src_idx: list[Any] = [0] * len(perm)
        for i, p in enumerate(perm):
            src_idx[p] = idx[i]
        return self.value(inst.operands[0], tuple(src_idx))

    def _slice(self, inst: Instruction, idx: Index) -> Any:
        sl = inst.attrs.get("slice") or []
        src_idx = tuple(self.iadd(self.imul(idx[d], int(st)), int(s)) for d, (s, _lim, st) in enumerate(sl))
        return self.value(inst.operands[0], src_idx)

    def _reverse(self, inst: Instruction, idx: Index) -> Any:
        dims = set(int_list(inst.attrs.get("dimensions")))
        shp = inst.shape.dimensions
        src_idx = tuple(self.isub(shp[d] - 1, idx[d]) if d in dims else idx[d] for d in range(len(idx)))
        return self.value(inst.operands[0], src_idx)

    def _pad(self, inst: Instruction, idx: Index) -> Any:
        src, pv = inst.operands
        pads = inst.attrs.get("padding") or []
        conds: list[str] = []
        src_idx: list[Any] = []
        for d, (lo, _hi, interior) in enumerate(pads):
            size = src.shape.dimensions[d]
            t = self.isub(idx[d], int(lo))
            step = int(interior) + 1
            if isinstance(t, int):
                ok = t >= 0 and t % step == 0 and t // step < size
                if not ok:
                    conds.append("False")
                src_idx.append(min(max(t // step, 0), size - 1) if t >= 0 else 0)
                continue
            parts = [f"({t} >= 0)", f"({t} < {(size - 1) * step + 1})"]
            if step > 1:
                parts.append(f"(({t} % {step}) == 0)")
            conds.append(self.ctx.emit(" & ".join(parts), "inpad"))
            q = self.idiv(self.iclamp(t, 0, (size - 1) * step), step) if step > 1 else self.iclamp(t, 0, size - 1)
            src_idx.append(q)
        if src.shape.numel == 0:
            return self.value(pv, ())
        inner = self.value(src, tuple(src_idx))
        padv = self.value(pv, ())
        if not conds:
            return inner
        if "False" in conds:
            return padv
        cond = conds[0] if len(conds) == 1 else self.ctx.emit(" & ".join(conds), "inpad")
        return self.where(cond, inner, padv, inst.name)

    def _concatenate(self, inst: Instruction, idx: Index) -> Any:
        k = int_list(inst.attrs.get("dimensions"))[0]
        offsets = []
        off = 0
        for o in inst.operands:
            offsets.append(off)
            off += o.shape.dimensions[k]
        ck = idx[k]
        if isinstance(ck, int):
            for o, start in zip(inst.operands, offsets):
                if start <= ck < start + o.shape.dimensions[k]:
                    return self.value(o, idx[:k] + (ck - start,) + idx[k + 1:])
        result = None
        for o, start in reversed(list(zip(inst.operands, offsets))):
            size = o.shape.dimensions[k]
            if size == 0:
                continue
            local = self.iclamp(self.isub(ck, start), 0, size - 1)
            v = self.value(o, idx[:k] + (local,) + idx[k + 1:])
            if result is None:
                result = v
            else:
                result = self.where(f"{ck} < {start + size}", v, result, inst.name)
        if result is None:
            raise EmitterUnsupported(inst.opcode, inst.name, "empty concatenate")
        return result

    def _dynamic_slice(self, inst: Instruction, idx: Index) -> Any:
        src = inst.operands[0]
        starts = inst.operands[1:]
        if len(starts) != src.shape.rank:
            raise EmitterUnsupported(inst.opcode, inst.name, "dynamic-slice needs one scalar start per dimension")
        src_idx = []
        for d, s in enumerate(starts):
            hi = src.shape.dimensions[d] - inst.shape.dimensions[d]
            st = self.scalar_index(s, 0, hi)
            src_idx.append(self.iadd(idx[d], st))
        return self.value(src, tuple(src_idx))

    def dus_starts(self, inst: Instruction) -> list[int | str]:
        """Clamped start indices of a dynamic-update-slice (``[0, dim - update_dim]``, as XLA)."""
        src, upd = inst.operands[0], inst.operands[1]
        starts = inst.operands[2:]
        if len(starts) != src.shape.rank:
            raise EmitterUnsupported(inst.opcode, inst.name, "dynamic-update-slice needs one scalar start per dimension")
        out = []
        for d, s in enumerate(starts):
            hi = src.shape.dimensions[d] - upd.shape.dimensions[d]
            out.append(self.scalar_index(s, 0, hi))
        return out

    def _dynamic_update_slice(self, inst: Instruction, idx: Index) -> Any:
        src, upd = inst.operands[0], inst.operands[1]
        if upd.shape.numel == 0:
            return self.value(src, idx)
        starts = self.dus_starts(inst)
        conds = []
        upd_idx = []
        for d, st in enumerate(starts):
            size = upd.shape.dimensions[d]
            rel = self.isub(idx[d], st)
            if isinstance(rel, int):
                if not (0 <= rel < size):
                    return self.value(src, idx)
                upd_idx.append(rel)
                continue
            conds.append(f"({rel} >= 0) & ({rel} < {size})")
            upd_idx.append(self.iclamp(rel, 0, size - 1))
        u = self.value(upd, tuple(upd_idx))
        base = self.value(src, idx)
        if not conds:
            return u
        cond = self.ctx.emit(" & ".join(conds), "inupd")
        return self.where(cond, u, base, inst.name)

    def _gather(self, inst: Instruction, idx: Index) -> Any:
        a = inst.attrs
        operand, indices = inst.operands
        # batching dims (StableHLO, what JAX emits for take_along_axis): operand dim operand_batching_dims[k]
        # is read at the output's batch coordinate of indices dim start_indices_batching_dims[k]
        op_batch = int_list(a.get("operand_batching_dims"))
        idx_batch = int_list(a.get("start_indices_batching_dims"))
        if len(op_batch) != len(idx_batch):
            raise EmitterUnsupported(inst.opcode, inst.name, "operand and start-indices batching dims differ in number")
        offset_dims = int_list(a.get("offset_dims"))
        collapsed = int_list(a.get("collapsed_slice_dims"))
        start_map = int_list(a.get("start_index_map"))
        ivd = int(a.get("index_vector_dim", indices.shape.rank)) if not isinstance(a.get("index_vector_dim"), str) \
            else int(a.get("index_vector_dim"))
        sizes = int_list(a.get("slice_sizes"))
        out_rank = inst.shape.rank
        batch_dims = [d for d in range(out_rank) if d not in offset_dims]
        batch_idx = [idx[d] for d in batch_dims]
        starts: dict[int, Any] = {}
        for k, od in enumerate(start_map):
            if ivd < indices.shape.rank:
                ii = batch_idx[:ivd] + [k] + batch_idx[ivd:]
            else:
                ii = list(batch_idx)
            if len(ii) != indices.shape.rank:
                raise EmitterUnsupported(inst.opcode, inst.name, "unexpected gather index rank")
            v = self.value(indices, tuple(ii))
            if not dtypes.is_integral(indices.shape.element_type):
                raise EmitterUnsupported(inst.opcode, inst.name, "gather indices must be integers")
            starts[od] = self.to_index(v, indices.shape.element_type, 0, operand.shape.dimensions[od] - sizes[od])
        # indices dim -> position among the batch coordinates (the indices dims other than index_vector_dim)
        batch_of = {sd: sd - (1 if sd > ivd else 0) for sd in idx_batch}
        src_idx = []
        j = 0
        for d in range(operand.shape.rank):
            base = starts.get(d, 0)
            if d in op_batch:
                pos = batch_of[idx_batch[op_batch.index(d)]]
                if pos >= len(batch_idx):
                    raise EmitterUnsupported(inst.opcode, inst.name, "gather batching dim out of range")
                src_idx.append(batch_idx[pos])
            elif d in collapsed:
                src_idx.append(base)
            else:
                if j >= len(offset_dims):
                    raise EmitterUnsupported(inst.opcode, inst.name, "gather offset dims do not match")
                src_idx.append(self.iadd(base, idx[offset_dims[j]]))
                j += 1
        return self.value(operand, tuple(src_idx))

    # ---------------------------------------------------------------------------- tuples & calls
    def _tuple(self, inst: Instruction, idx: Index) -> Any:
        return [self.value(o, idx) if not o.shape.is_tuple else self.value(o, idx) for o in inst.operands]

    def _gte(self, inst: Instruction, idx: Index) -> Any:
        # Follow get-tuple-element / tuple chains to the element itself, so only that element is read
        # (tuple elements may have other shapes than the one indexed here).
        path = [int(inst.attrs.get("index", 0))]
        src = inst.operands[0]
        while True:
            if src.opcode == "get-tuple-element":
                path.insert(0, int(src.attrs.get("index", 0)))
                src = src.operands[0]
            elif src.opcode == "tuple" and path:
                src = src.operands[path.pop(0)]
                if not path:
                    return self.value(src, idx)
            else:
                break
        if src.opcode == "parameter" and self.bindings is None and src.shape.is_tuple:
            shape, leaf = src.shape, 0
            for k in path:
                subs = shape.tuple_shapes or ()
                leaf += sum(len(t.leaves()) for t in subs[:k])
                shape = subs[k]
            if shape.is_tuple:
                n = len(shape.leaves())
                return _nest(shape, iter([self.tuple_parameter_leaf(src, leaf + j, idx) for j in range(n)]))
            return self.tuple_parameter_leaf(src, leaf, idx)
        v = self.value(inst.operands[0], idx)
        if not isinstance(v, list):
            raise EmitterUnsupported(inst.opcode, inst.name, "get-tuple-element of a non-tuple value")
        return v[int(inst.attrs.get("index", 0))]

    def _map(self, inst: Instruction, idx: Index) -> Any:
        comp = inst.attrs.get("to_apply")
        if not isinstance(comp, Computation):
            raise EmitterUnsupported(inst.opcode, inst.name, "map without to_apply computation")
        args = [self.value(o, idx) for o in inst.operands]
        return self.call_computation(comp, args)

    def _reduce(self, inst: Instruction, idx: Index) -> Any:
        comp = inst.attrs.get("to_apply")
        if not isinstance(comp, Computation):
            raise EmitterUnsupported(inst.opcode, inst.name, "reduce without to_apply computation")
        n = len(inst.operands) // 2
        inputs, inits = inst.operands[:n], inst.operands[n:]
        rdims = sorted(int_list(inst.attrs.get("dimensions")))
        in_shape = inputs[0].shape
        kept = [d for d in range(in_shape.rank) if d not in rdims]
        out_idx = list(idx) if not inst.shape.is_tuple else list(idx)
        if inst.shape.is_tuple:
            out_rank = inst.shape.tuple_shapes[0].rank
        else:
            out_rank = inst.shape.rank
        if len(out_idx) != out_rank or len(kept) != out_rank:
            raise EmitterUnsupported(inst.opcode, inst.name, "reduce index rank mismatch")
        comp, promoted = self._accumulating_reducer(comp, n, inputs[0].shape.element_type)
        init_vals = [self.value(i, ()) for i in inits]
        if promoted:
            init_vals = [self.up(init_vals[0], inputs[0].shape.element_type)]
        accs = []
        for k, v in enumerate(init_vals):
            accs.append(self.ctx.emit(v, f"acc_{inst.name}"))
        rsizes = [in_shape.dimensions[d] for d in rdims]
        total = 1
        for s in rsizes:
            total *= s
        if total == 0:
            accs = self._round_accumulators(accs, promoted, inputs[0].shape.element_type, inst)
            return accs if inst.shape.is_tuple else accs[0]
        loop = total > 1
        r = None
        if loop:
            r = self.ctx.names.fresh("r")
            self.ctx.body.line(f"for {r} in range(0, {total}):")
            self.ctx.body.indent()
            self.push_scope()
        try:
            if loop:
                rv = self.iexpr(f"{self.ctx.zero} + {r}", "rr")
                comps: dict[int, Any] = {}
                stride = 1
                for d, size in reversed(list(zip(rdims, rsizes))):  # row-major over the reduced dims
                    comps[d] = self.imod(self.idiv(rv, stride), size) if size > 1 else 0
                    stride *= size
            else:
                comps = {d: 0 for d in rdims}
            src_idx = []
            j = 0
            for d in range(in_shape.rank):
                if d in comps:
                    src_idx.append(comps[d])
                else:
                    src_idx.append(out_idx[j])
                    j += 1
            xs = [self.value(i, tuple(src_idx)) for i in inputs]
            if promoted:
                xs = [self.up(xs[0], inputs[0].shape.element_type)]
            res = self.call_computation(comp, list(accs) + list(xs))
            res_list = res if isinstance(res, list) else [res]
            if len(res_list) != len(accs):
                raise EmitterUnsupported(inst.opcode, inst.name, "reducer returns the wrong number of values")
            for a, v in zip(accs, res_list):
                self.ctx.body.line(f"{a} = {v}")
        finally:
            if loop:
                self.pop_scope()
                self.ctx.body.dedent()
        accs = self._round_accumulators(accs, promoted, inputs[0].shape.element_type, inst)
        return accs if inst.shape.is_tuple else accs[0]

    def _accumulating_reducer(self, comp: Computation, n: int, et: str) -> tuple[Computation, bool]:
        """The reducer to fold with, and whether it is an f32 copy of an f16/bf16 add/multiply (then
        the fold accumulates in f32 and rounds once, as the reference evaluator does)."""
        if n != 1:
            return comp, False
        from fusegen.codegen.reduction_codegen import promoted_reducer

        p = promoted_reducer(comp)
        return (p, True) if p is not None else (comp, False)

    def _round_accumulators(self, accs: list[str], promoted: bool, et: str, inst: Instruction) -> list[str]:
        if not promoted:
            return accs
        return [self.ctx.emit(f"{accs[0]}.to({self.tl(et)})", inst.name)]

    def _dot(self, inst: Instruction, idx: Index) -> str:
        """``dot`` as a runtime loop over the contracting elements (XLA's elemental dot,
        ``EmitElementalDot`` in ``elemental_ir_emitter.cc``): output index = batch, lhs free, rhs free.

        Floats narrower than f32 are multiplied and accumulated in f32 (f64 when an operand or the result
        is f64) and rounded once, as the reference evaluator does; integer dots accumulate in 64 bits and
        wrap to the result width.
        """
        lhs, rhs = inst.operands
        lb, rb = int_list(inst.attrs.get("lhs_batch_dims")), int_list(inst.attrs.get("rhs_batch_dims"))
        lc, rc = int_list(inst.attrs.get("lhs_contracting_dims")), int_list(inst.attrs.get("rhs_contracting_dims"))
        if len(lb) != len(rb) or len(lc) != len(rc):
            raise EmitterUnsupported(inst.opcode, inst.name, "dot with unmatched batch / contracting dims")
        if inst.attrs.get("sparsity") or len(inst.operands) != 2:
            raise EmitterUnsupported(inst.opcode, inst.name, "sparse dot")
        lf = [d for d in range(lhs.shape.rank) if d not in lb and d not in lc]
        rf = [d for d in range(rhs.shape.rank) if d not in rb and d not in rc]
        if len(idx) != len(lb) + len(lf) + len(rf):
            raise EmitterUnsupported(inst.opcode, inst.name, "dot index rank mismatch")
        et_l, et_r, et_o = lhs.shape.element_type, rhs.shape.element_type, inst.shape.element_type
        ints = [dtypes.is_integral(t) or t == "pred" for t in (et_l, et_r, et_o)]
        if all(ints):
            if "u64" in (et_l, et_r, et_o) or et_o == "pred":
                raise EmitterUnsupported(inst.opcode, inst.name, f"integer dot {et_l} x {et_r} -> {et_o}")
            acc_et = "s64"
        elif not any(ints):
            acc_et = "f64" if "f64" in (et_l, et_r, et_o) else "f32"
        else:
            raise EmitterUnsupported(inst.opcode, inst.name, f"mixed integer / float dot {et_l} x {et_r} -> {et_o}")
        at = self.tl(acc_et)
        nb = len(lb)
        lidx: list[Any] = [0] * lhs.shape.rank
        ridx: list[Any] = [0] * rhs.shape.rank
        for k, (dl, dr) in enumerate(zip(lb, rb)):
            lidx[dl] = ridx[dr] = idx[k]
        for k, d in enumerate(lf):
            lidx[d] = idx[nb + k]
        for k, d in enumerate(rf):
            ridx[d] = idx[nb + len(lf) + k]
        csizes = [lhs.shape.dimensions[d] for d in lc]
        if csizes != [rhs.shape.dimensions[d] for d in rc]:
            raise EmitterUnsupported(inst.opcode, inst.name, "contracting dimensions differ in size")
        total = 1
        for c in csizes:
            total *= c
        acc = self.ctx.emit(self.ctx.full(0.0 if acc_et != "s64" else 0, at), f"acc_{inst.name}")
        loop = total > 1
        if total > 0:
            if loop:
                r = self.ctx.names.fresh("kk")
                self.ctx.body.line(f"for {r} in range(0, {total}):")
                self.ctx.body.indent()
                self.push_scope()
            try:
                comps: list[Any] = [0] * len(lc)
                if loop:
                    rv = self.iexpr(f"{self.ctx.zero} + {r}", "kk")
                    stride = 1
                    for j in reversed(range(len(lc))):  # row-major over the contracting dims
                        if csizes[j] > 1:
                            q = self.idiv(rv, stride)
                            comps[j] = q if stride * csizes[j] == total else self.imod(q, csizes[j])
                        stride *= csizes[j]
                for j, (dl, dr) in enumerate(zip(lc, rc)):
                    lidx[dl] = ridx[dr] = comps[j]
                a = self.value(lhs, tuple(lidx))
                b = self.value(rhs, tuple(ridx))
                xs = []
                for v, t in ((a, et_l), (b, et_r)):
                    if self.compute_type(t) != acc_et:
                        v = self.ctx.emit(f"{self.up(v, t)}.to({at})", "dv")
                    else:
                        v = self.up(v, t)
                    xs.append(v)
                self.ctx.body.line(f"{acc} = {acc} + {xs[0]} * {xs[1]}")
            finally:
                if loop:
                    self.pop_scope()
                    self.ctx.body.dedent()
        if et_o == acc_et:
            return acc
        return self.wrap_subbyte(self.emit(f"{acc}.to({self.tl(et_o)})", inst), et_o, inst.name)

    def _reduce_window(self, inst: Instruction, idx: Index) -> Any:
        """``reduce-window``: a runtime loop over the window positions (row-major, as
        ``HloEvaluator::HandleReduceWindow``) folding ``to_apply`` into accumulators started at the init
        values. Window element ``w`` of output ``o`` reads padded position ``o*stride + w*window_dilation``;
        positions in the (low/high or base-dilation) padding read the init value."""
        from fusegen.evaluator.reduce import parse_window

        comp = inst.attrs.get("to_apply")
        if not isinstance(comp, Computation):
            raise EmitterUnsupported(inst.opcode, inst.name, "reduce-window without to_apply computation")
        n = len(inst.operands) // 2
        inputs, inits = inst.operands[:n], inst.operands[n:]
        in_shape = inputs[0].shape
        rank = in_shape.rank
        out_shape = inst.shape.tuple_shapes[0] if inst.shape.is_tuple else inst.shape
        if len(idx) != rank or out_shape.rank != rank:
            raise EmitterUnsupported(inst.opcode, inst.name, "reduce-window index rank mismatch")
        try:
            w = parse_window(inst, rank)
        except Exception as e:  # malformed window: decline, the host backend reports it
            raise EmitterUnsupported(inst.opcode, inst.name, f"bad window: {e}") from None
        et = in_shape.element_type
        comp, promoted = self._accumulating_reducer(comp, n, et)
        init_vals = [self.value(i, ()) for i in inits]
        if promoted:
            init_vals = [self.up(init_vals[0], et)]
        accs = [self.ctx.emit(v, f"acc_{inst.name}") for v in init_vals]
        sizes = list(w["size"])
        total = 1
        for sz in sizes:
            total *= sz
        if total == 0 or out_shape.numel == 0:
            accs = self._round_accumulators(accs, promoted, et, inst)
            return accs if inst.shape.is_tuple else accs[0]
        loop = total > 1
        if loop:
            r = self.ctx.names.fresh("rw")
            self.ctx.body.line(f"for {r} in range(0, {total}):")
            self.ctx.body.indent()
            self.push_scope()
        try:
            pos: list[int | str] = [0] * rank
            if loop:
                rv = self.iexpr(f"{self.ctx.zero} + {r}", "rw")
                stride = 1
                for d in reversed(range(rank)):  # row-major over the window dims
                    if sizes[d] > 1:
                        q = self.idiv(rv, stride)
                        pos[d] = q if stride * sizes[d] == total else self.imod(q, sizes[d])
                    stride *= sizes[d]
            conds: list[str] = []
            src_idx: list[int | str] = []
            for d in range(rank):
                lo = int(w["pad"][d][0])
                st, wd, bd = int(w["stride"][d]), int(w["rhs_dilate"][d]), int(w["lhs_dilate"][d])
                size_d = in_shape.dimensions[d]
                span = (size_d - 1) * bd  # last padded position holding an element
                p = self.isub(self.iadd(self.imul(idx[d], st), self.imul(pos[d], wd)), lo)
                # static range of p: decides which conditions can fail
                pmin = -lo
                pmax = (out_shape.dimensions[d] - 1) * st + (sizes[d] - 1) * wd - lo
                if isinstance(p, int):
                    if p < 0 or p > span or p % bd:
                        conds.append("False")
                    src_idx.append(min(max(p, 0), span) // bd)
                    continue
                parts = []
                if pmin < 0:
                    parts.append(f"({p} >= 0)")
                if pmax > span:
                    parts.append(f"({p} <= {span})")
                if bd > 1:
                    parts.append(f"(({self.iclamp(p, 0, span)} % {bd}) == 0)")
                if parts:
                    conds.append(self.ctx.emit(" & ".join(parts), "inwin"))
                q = self.iclamp(p, 0, span) if parts else p
                src_idx.append(self.idiv(q, bd) if bd > 1 else q)
            if "False" in conds:
                xs = list(init_vals)
            else:
                xs = [self.value(i, tuple(src_idx)) for i in inputs]
                if promoted:
                    xs = [self.up(xs[0], et)]
                if conds:
                    cond = conds[0] if len(conds) == 1 else self.ctx.emit(" & ".join(conds), "inwin")
                    xs = [self.ctx.emit(f"tl.where({cond}, {x}, {iv})", "xw") for x, iv in zip(xs, init_vals)]
            res = self.call_computation(comp, list(accs) + list(xs))
            res_list = res if isinstance(res, list) else [res]
            if len(res_list) != len(accs):
                raise EmitterUnsupported(inst.opcode, inst.name, "reducer returns the wrong number of values")
            for a, v in zip(accs, res_list):
                self.ctx.body.line(f"{a} = {v}")
        finally:
            if loop:
                self.pop_scope()
                self.ctx.body.dedent()
        accs = self._round_accumulators(accs, promoted, et, inst)
        return accs if inst.shape.is_tuple else accs[0]

    # ------------------------------------------------------------------------------- elementwise
    def _operands(self, inst: Instruction, idx: Index) -> list[str]:
        vals = [self.value(o, idx) for o in inst.operands]
        for v, o in zip(vals, inst.operands):
            if isinstance(v, list):
                raise EmitterUnsupported(inst.opcode, inst.name, "tuple operand to an elementwise op")
        return vals

    def _unary_math(self, inst: Instruction, idx: Index, fn: str) -> str:
        et = inst.shape.element_type
        if not is_float(et):
            raise EmitterUnsupported(inst.opcode, inst.name, f"{inst.opcode} on {et}")
        (x,) = self._operands(inst, idx)
        xc = self.up(x, et)
        r = self.ctx.emit(f"libdevice.{fn}({xc})", inst.name)
        return self.down(r, et, inst.name)

    def _float_binary(self, inst: Instruction, a: str, b: str, expr: Callable[[str, str], str]) -> str:
        et = inst.shape.element_type
        ac, bc = self.up(a, et), self.up(b, et)
        r = self.ctx.emit(expr(ac, bc), inst.name)
        return self.down(r, et, inst.name)

    def _arith(self, inst: Instruction, idx: Index) -> str:
        op = inst.opcode
        et = inst.shape.element_type
        a, b = self._operands(inst, idx)
        if et == "pred":
            sym = {"add": "|", "multiply": "&", "subtract": "^", "maximum": "|", "minimum": "&",
                   "and": "&", "or": "|", "xor": "^"}.get(op)
            if sym is None:
                raise EmitterUnsupported(op, inst.name, f"{op} on pred")
            return self.emit(f"{a} {sym} {b}", inst)
        if is_float(et):
            if op in ("and", "or", "xor"):
                raise EmitterUnsupported(op, inst.name, f"{op} on {et}")
            if op in ("maximum", "minimum"):
                return self._float_binary(inst, a, b, lambda x, y: self._minmax_expr(op, x, y))
            if op == "power":
                return self._float_binary(inst, a, b, lambda x, y: f"libdevice.pow({x}, {y})")
            if op == "atan2":
                return self._float_binary(inst, a, b, lambda x, y: f"libdevice.atan2({x}, {y})")
            sym = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "remainder": "%"}[op]
            return self._float_binary(inst, a, b, lambda x, y: f"{x} {sym} {y}")
        # integers
        if op in ("maximum", "minimum"):
            return self.emit(f"tl.{op}({a}, {b})", inst)
        if op in ("divide", "remainder"):
            return self._int_divrem(inst, a, b)
        if op == "power":
            return self._int_pow(inst, a, b)
        if op == "atan2":
            raise EmitterUnsupported(op, inst.name, f"{op} on integers")
        sym = {"add": "+", "subtract": "-", "multiply": "*", "and": "&", "or": "|", "xor": "^"}[op]
        r = self.emit(f"{a} {sym} {b}", inst)
        return self.wrap_subbyte(r, et, inst.name)

    def _int_pow(self, inst: Instruction, a: str, b: str) -> str:
        """Integer ``power``: exponentiation by squaring with wrap-around; a negative exponent gives
        ``1`` for base ``1``, ``±1`` for base ``-1`` by the exponent's parity, and ``0`` otherwise (XLA's
        ``EmitIntegerPow`` in ``elemental_ir_emitter.cc``, and the reference evaluator's ``_int_pow``)."""
        et = inst.shape.element_type
        t = self.tl(et)
        signed = dtypes.is_signed_int(et)
        bits = dtypes.bit_width(et)
        steps = bits - 1 if signed else bits  # bits of the largest exponent
        body = self.ctx.body
        acc = self.ctx.names.fresh("pw_acc")
        base = self.ctx.names.fresh("pw_base")
        e = self.ctx.names.fresh("pw_e")
        k = self.ctx.names.fresh("pw_k")
        neg = self.ctx.emit(f"{b} < 0", "pw_neg") if signed else None
        body.line(f"{acc} = {self.ctx.full(1, t)}")
        body.line(f"{base} = {a} + {self.ctx.full(0, t)}")
        body.line(f"{e} = tl.where({neg}, {self.ctx.full(0, t)}, {b})" if signed else f"{e} = {b} + {self.ctx.full(0, t)}")
        body.line(f"for {k} in range(0, {steps}):")
        body.indent()
        body.line(f"{acc} = tl.where(({e} & {self.ctx.full(1, t)}) != 0, {acc} * {base}, {acc})")
        body.line(f"{base} = {base} * {base}")
        body.line(f"{e} = {e} >> {self.ctx.full(1, t)}")
        body.dedent()
        r = acc
        if signed:
            one, zero, m_one = self.ctx.full(1, t), self.ctx.full(0, t), self.ctx.full(-1, t)
            sign = self.ctx.emit(f"tl.where(({b} & {one}) != 0, {m_one}, {one})", "pw_sign")
            unit = self.ctx.emit(f"tl.where({a} == {one}, {one}, tl.where({a} == {m_one}, {sign}, {zero}))", "pw_unit")
            r = self.emit(f"tl.where({neg}, {unit}, {acc})", inst)
        return self.wrap_subbyte(r, et, inst.name)

    def _minmax_expr(self, op: str, x: str, y: str) -> str:
        # NaN-propagating like XLA's GPU min/max.
        return f"tl.where({x} != {x}, {x}, tl.where({y} != {y}, {y}, tl.{op}({x}, {y})))"

    def _int_divrem(self, inst: Instruction, a: str, b: str) -> str:
        et = inst.shape.element_type
        t = self.tl(et)
        lo, hi = _int_range(et)
        one = f"tl.full({self.ctx.block_shape}, 1, {t})"
        bad0 = self.ctx.emit(f"{b} == 0", "divz")
        if dtypes.is_signed_int(et):
            ovf = self.ctx.emit(f"({a} == {lo}) & ({b} == -1)", "ovf")
            safe = self.ctx.emit(f"tl.where({bad0} | {ovf}, {one}, {b})", "den")
            if inst.opcode == "divide":
                q = self.ctx.emit(f"{a} // {safe}", "q")
                r = self.emit(f"tl.where({bad0}, tl.full({self.ctx.block_shape}, -1, {t}), "
                              f"tl.where({ovf}, tl.full({self.ctx.block_shape}, {lo}, {t}), {q}))", inst)
            else:
                m = self.ctx.emit(f"{a} % {safe}", "m")
                r = self.emit(f"tl.where({bad0}, {a}, tl.where({ovf}, tl.full({self.ctx.block_shape}, 0, {t}), {m}))", inst)
        else:
            safe = self.ctx.emit(f"tl.where({bad0}, {one}, {b})", "den")
            if inst.opcode == "divide":
                q = self.ctx.emit(f"{a} // {safe}", "q")
                r = self.emit(f"tl.where({bad0}, tl.full({self.ctx.block_shape}, {hi}, {t}), {q})", inst)
            else:
                m = self.ctx.emit(f"{a} % {safe}", "m")
                r = self.emit(f"tl.where({bad0}, {a}, {m})", inst)
        return self.wrap_subbyte(r, et, inst.name)

    def _shift(self, inst: Instruction, idx: Index) -> str:
        et = inst.shape.element_type
        if not dtypes.is_integral(et) or dtypes.bit_width(et) < 8:
            raise EmitterUnsupported(inst.opcode, inst.name, f"{inst.opcode} on {et}")
        a, b = self._operands(inst, idx)
        bits = dtypes.bit_width(et)
        t = self.tl(et)
        signed = dtypes.is_signed_int(et)
        st = f"tl.int{bits}"
        ut = f"tl.uint{bits}"
        oob = self.ctx.emit(f"({b} < 0) | ({b} >= {bits})" if signed else f"{b} >= {bits}", "oob")
        s = self.ctx.emit(f"tl.where({oob}, tl.full({self.ctx.block_shape}, 0, {t}), {b})", "sh")
        zero = f"tl.full({self.ctx.block_shape}, 0, {t})"
        if inst.opcode == "shift-left":
            return self.emit(f"tl.where({oob}, {zero}, {a} << {s})", inst)
        if inst.opcode == "shift-right-logical":
            if signed:
                r = self.ctx.emit(f"({a}.to({ut}, bitcast=True) >> {s}.to({ut}, bitcast=True)).to({t}, bitcast=True)", "shr")
            else:
                r = self.ctx.emit(f"{a} >> {s}", "shr")
            return self.emit(f"tl.where({oob}, {zero}, {r})", inst)
        # arithmetic
        if signed:
            xs, ss = a, s
        else:
            xs = self.ctx.emit(f"{a}.to({st}, bitcast=True)", "sx")
            ss = self.ctx.emit(f"{s}.to({st}, bitcast=True)", "ss")
        r = self.ctx.emit(f"{xs} >> {ss}", "sar")
        fill = self.ctx.emit(f"tl.where({xs} < 0, tl.full({self.ctx.block_shape}, -1, {st}), tl.full({self.ctx.block_shape}, 0, {st}))", "fill")
        r = self.ctx.emit(f"tl.where({oob}, {fill}, {r})", "sar")
        return r if signed else self.emit(f"{r}.to({t}, bitcast=True)", inst)

    def _unary(self, inst: Instruction, idx: Index) -> str:
        op = inst.opcode
        et = inst.shape.element_type
        (x,) = self._operands(inst, idx)
        if op == "not":
            if et == "pred":
                return self.emit(f"{x} ^ True", inst)
            if not dtypes.is_integral(et):
                raise EmitterUnsupported(op, inst.name, f"not on {et}")
            return self.wrap_subbyte(self.emit(f"~{x}", inst), et, inst.name)
        if op == "negate":
            if et == "pred":
                return x
            if is_float(et):
                xc = self.up(x, et)
                return self.down(self.emit(f"-{xc}", inst), et, inst.name)
            return self.wrap_subbyte(self.emit(f"-{x}", inst), et, inst.name)
        if op == "abs":
            if dtypes.is_unsigned_int(et) or et == "pred":
                return x
            xc = self.up(x, et) if is_float(et) else x
            r = self.emit(f"tl.abs({xc})", inst)
            return self.down(r, et, inst.name) if is_float(et) else self.wrap_subbyte(r, et, inst.name)
        if op == "sign":
            if is_float(et):
                xc = self.up(x, et)
                ct = self.tl(self.compute_type(et))
                r = self.emit(f"tl.where({xc} != {xc}, {xc}, tl.where({xc} > 0, tl.full({self.ctx.block_shape}, 1.0, {ct}), "
                              f"tl.where({xc} < 0, tl.full({self.ctx.block_shape}, -1.0, {ct}), {xc})))", inst)
                return self.down(r, et, inst.name)
            if et == "pred":
                return x
            t = self.tl(et)
            if dtypes.is_unsigned_int(et):
                return self.emit(f"({x} != 0).to({t})", inst)
            return self.emit(f"({x} > 0).to({t}) - ({x} < 0).to({t})", inst)
        if op == "is-finite":
            src_et = inst.operands[0].shape.element_type
            if not is_float(src_et):
                raise EmitterUnsupported(op, inst.name, f"is-finite on {src_et}")
            xc = self.up(x, src_et)
            inf = self.fconst(math.inf, self.compute_type(src_et))
            return self.emit(f"tl.abs({xc}) < {inf}", inst)
        if op == "logistic":
            if not is_float(et):
                raise EmitterUnsupported(op, inst.name, f"logistic on {et}")
            xc = self.up(x, et)
            ct = self.tl(self.compute_type(et))
            r = self.emit(f"tl.full({self.ctx.block_shape}, 1.0, {ct}) / (tl.full({self.ctx.block_shape}, 1.0, {ct}) + libdevice.exp(-{xc}))", inst)
            return self.down(r, et, inst.name)
        if op in ("popcnt", "count-leading-zeros"):
            if not dtypes.is_integral(et) or dtypes.bit_width(et) < 8:
                raise EmitterUnsupported(op, inst.name, f"{op} on {et}")
            bits = dtypes.bit_width(et)
            t = self.tl(et)
            if bits == 64:
                xi = self.ctx.emit(f"{x}.to(tl.int64, bitcast=True)", "xi")
            elif bits == 32:
                xi = self.ctx.emit(f"{x}.to(tl.int32, bitcast=True)", "xi")
            else:
                xi = self.ctx.emit(f"{x}.to(tl.uint{bits}, bitcast=True).to(tl.uint32).to(tl.int32, bitcast=True)", "xi")
            if op == "popcnt":
                r = self.ctx.emit(f"libdevice.popc({xi})", "pc")
            else:
                r = self.ctx.emit(f"libdevice.clz({xi})", "lz")
                if bits < 32:
                    r = self.ctx.emit(f"{r} - {32 - bits}", "lz")
            return self.emit(f"{r}.to({t})", inst)
        raise EmitterUnsupported(op, inst.name, "unsupported unary op")

    def _compare(self, inst: Instruction, idx: Index) -> str:
        a, b = self._operands(inst, idx)
        et = inst.operands[0].shape.element_type
        direction = str(inst.attrs.get("direction", "")).upper()
        sym = _CMP.get(direction)
        if sym is None:
            raise EmitterUnsupported("compare", inst.name, f"unknown direction {direction!r}")
        ctype = str(inst.attrs.get("type", "")).upper()
        if et in COMPLEX_PARTS:
            if direction not in ("EQ", "NE"):
                raise EmitterUnsupported("compare", inst.name, f"compare {direction} on {et}")
            if direction == "EQ":
                return self.emit(f"({a.re} == {b.re}) & ({a.im} == {b.im})", inst)
            return self.emit(f"({a.re} != {b.re}) | ({a.im} != {b.im})", inst)
        if is_float(et):
            ac, bc = self.up(a, et), self.up(b, et)
            if ctype == "TOTALORDER":
                ce = self.compute_type(et)
                bits = dtypes.bit_width(ce)
                it = f"tl.int{bits}"
                mx = (1 << (bits - 1)) - 1
                keys = []
                for v in (ac, bc):
                    iv = self.ctx.emit(f"{v}.to({it}, bitcast=True)", "tok")
                    keys.append(self.ctx.emit(f"tl.where({iv} < 0, {iv} ^ {mx}, {iv})", "tok"))
                ac, bc = keys
            return self.emit(f"{ac} {sym} {bc}", inst)
        if et == "pred":
            a = self.ctx.emit(f"{a}.to(tl.int8)", "pi")
            b = self.ctx.emit(f"{b}.to(tl.int8)", "pi")
        return self.emit(f"{a} {sym} {b}", inst)

    def _select(self, inst: Instruction, idx: Index) -> Any:
        p = self.value(inst.operands[0], idx if inst.operands[0].shape.rank else ())
        a = self.value(inst.operands[1], idx)
        b = self.value(inst.operands[2], idx)
        if isinstance(a, (list, Cx)):
            return self.where(p, a, b, inst.name)
        return self.emit(f"tl.where({p}, {a}, {b})", inst)

    def _clamp(self, inst: Instruction, idx: Index) -> str:
        lo_i, x_i, hi_i = inst.operands
        et = inst.shape.element_type
        lo = self.value(lo_i, idx if lo_i.shape.rank else ())
        x = self.value(x_i, idx)
        hi = self.value(hi_i, idx if hi_i.shape.rank else ())
        if is_float(et):
            loc, xc, hic = self.up(lo, et), self.up(x, et), self.up(hi, et)
            m = self.ctx.emit(self._minmax_expr("maximum", xc, loc), "clo")
            r = self.emit(self._minmax_expr("minimum", m, hic), inst)
            return self.down(r, et, inst.name)
        if et == "pred":
            return self.emit(f"({x} | {lo}) & {hi}", inst)
        return self.emit(f"tl.minimum(tl.maximum({x}, {lo}), {hi})", inst)

    def _convert(self, inst: Instruction, idx: Index) -> str:
        (x,) = self._operands(inst, idx)
        src = inst.operands[0].shape.element_type
        dst = inst.shape.element_type
        return self.convert(x, src, dst, inst)

    def convert(self, x: Any, src: str, dst: str, inst: Instruction) -> Any:
        """``convert`` with XLA semantics (saturating float->int, NaN->0, !=0 to pred); to a complex type
        the value becomes the real part, between complex types each part converts."""
        if src == dst:
            return x
        if dst in COMPLEX_PARTS:
            part = COMPLEX_PARTS[dst]
            if src in COMPLEX_PARTS:
                return Cx((self.convert(x.re, COMPLEX_PARTS[src], part, inst),
                           self.convert(x.im, COMPLEX_PARTS[src], part, inst)))
            return Cx((self.convert(x, src, part, inst), self.ctx.emit(ts.float_constant(0.0, part, self.ctx.block_shape), "k")))
        if src in COMPLEX_PARTS:
            raise EmitterUnsupported(inst.opcode, inst.name, f"convert {src} -> {dst}")
        if dst == "pred":
            if is_float(src):
                xc = self.up(x, src)
                return self.emit(f"{xc} != 0", inst)
            return self.emit(f"{x} != 0", inst)
        td = self.tl(dst)
        if src == "pred":
            if dst in _LOW_FLOATS:
                return self.emit(f"{x}.to(tl.float32).to({td})", inst)
            return self.emit(f"{x}.to({td})", inst)
        if is_float(src) and is_float(dst):
            if src in _LOW_FLOATS and dst in _LOW_FLOATS:
                xc = self.up(x, src)
                return self.emit(f"{xc}.to({td})", inst)
            return self.emit(f"{x}.to({td})", inst)
        if is_float(src):  # float -> int: saturate, NaN -> 0
            xc = self.up(x, src)
            ce = self.compute_type(src)
            fdt = np.float64 if ce == "f64" else np.float32
            lo, hi = _int_range(dst)
            hi_f = float(fdt(hi))
            if hi_f > hi:
                hi_f = float(np.nextafter(fdt(hi_f), fdt(0)))
            lo_f = float(fdt(lo))
            ct = self.tl(ce)
            xn = self.ctx.emit(f"tl.where({xc} != {xc}, tl.full({self.ctx.block_shape}, 0.0, {ct}), {xc})", "cvn")
            xcl = self.ctx.emit(f"tl.minimum(tl.maximum({xn}, {ts.float_literal(lo_f)}), {ts.float_literal(hi_f)})", "cvc")
            store_t = self.tl(dst) if dst not in ("s4", "s2", "u4", "u2") else self.tl(dst)
            r = self.ctx.emit(f"{xcl}.to({store_t})", "cvi")
            top = ts.float_literal(float(hi) + 1.0)
            return self.emit(f"tl.where({xn} >= {top}, tl.full({self.ctx.block_shape}, {hi}, {td}), {r})", inst)
        if is_float(dst):  # int -> float
            if dst in _LOW_FLOATS:
                return self.emit(f"{x}.to(tl.float32).to({td})", inst)
            return self.emit(f"{x}.to({td})", inst)
        r = self.emit(f"{x}.to({td})", inst)  # int -> int: truncate / extend by the source's signedness
        return self.wrap_subbyte(r, dst, inst.name)

    def _bitcast_convert(self, inst: Instruction, idx: Index) -> str:
        (x,) = self._operands(inst, idx)
        src = inst.operands[0].shape.element_type
        dst = inst.shape.element_type
        if inst.operands[0].shape.dimensions != inst.shape.dimensions or dtypes.bit_width(src) != dtypes.bit_width(dst):
            raise EmitterUnsupported(inst.opcode, inst.name, "bitcast-convert between different widths")
        if src == dst:
            return x
        return self._reinterpret(x, src, dst, inst)

    def _reduce_precision(self, inst: Instruction, idx: Index) -> str:
        (x,) = self._operands(inst, idx)
        et = inst.shape.element_type
        if not is_float(et):
            raise EmitterUnsupported(inst.opcode, inst.name, f"reduce-precision on {et}")
        eb = int(inst.attrs.get("exponent_bits", 8))
        mb = int(inst.attrs.get("mantissa_bits", 23))
        ce = "f64" if et == "f64" else "f32"
        xc = self.up(x, et)
        nbits, nexp, nman = (64, 11, 52) if ce == "f64" else (32, 8, 23)
        ut = f"tl.uint{nbits}"
        v = self.ctx.emit(f"{xc}.to({ut}, bitcast=True)", "rp")
        if mb < nman:
            last = 1 << (nman - mb)
            bias = (last >> 1) - 1
            trunc_mask = ((1 << nbits) - 1) & ~(last - 1)
            lastbit = self.ctx.emit(f"({v} & {last}) >> {nman - mb}", "rp")
            v = self.ctx.emit(f"({v} + ({lastbit} + {bias})) & {trunc_mask}", "rp")
        if eb < nexp:
            sign_mask = 1 << (nbits - 1)
            exp_mask = ((1 << nexp) - 1) << nman
            ebias = (1 << (nexp - 1)) - 1
            rbias = (1 << (eb - 1)) - 1
            max_e = (ebias + rbias) << nman
            min_e = (ebias - rbias) << nman
            e = self.ctx.emit(f"{v} & {exp_mask}", "rpe")
            sz = self.ctx.emit(f"{v} & {sign_mask}", "rps")
            v = self.ctx.emit(f"tl.where({e} > {max_e}, {sz} | {exp_mask}, tl.where({e} <= {min_e}, {sz}, {v}))", "rp")
        r = self.ctx.emit(f"{v}.to({self.tl(ce)}, bitcast=True)", "rp")
        r = self.emit(f"tl.where({xc} != {xc}, {xc}, {r})", inst)
        return self.down(r, et, inst.name)


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


def _nest(shape: Shape, flat: Any) -> Any:
    """Leaf values from the iterator ``flat`` arranged as the (nested) tuple ``shape``."""
    if not shape.is_tuple:
        return next(flat)
    return [_nest(t, flat) for t in shape.tuple_shapes or ()]


def choose_index_dtype(shapes: Sequence[Shape], block: int) -> str:
    """``tl.int64`` when some buffer (or the launch) reaches 2**31 elements, else ``tl.int32``."""
    biggest = 0
    for s in shapes:
        for leaf in s.leaves():
            if leaf.is_array:  # complex buffers hold two parts per element
                biggest = max(biggest, leaf.numel * (2 if leaf.element_type in COMPLEX_PARTS else 1))
    return "tl.int64" if biggest + block >= 2**31 - 1 else "tl.int32"


class deep_recursion:
    """Context manager raising the recursion limit while walking long fused chains."""

    def __init__(self, limit: int = 20000):
        self.limit = limit

    def __enter__(self) -> None:
        self.old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(self.old, self.limit))

    def __exit__(self, *a: Any) -> None:
        sys.setrecursionlimit(self.old)
