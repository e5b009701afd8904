"""Fast paths of Triton's semantic layer for the tensor operators fusegen's kernels use most, in the interpreter.

In Triton 3.9's interpreter ``a + b`` on two tensors goes through two builtin wrappers, the semantic layer's type
checks, promotion, broadcasting and casts, and a new ``tl.tensor`` (a constexpr per dimension): about 0.1 ms on the
shared 2-core machine, where numpy's add of two 128-lane tiles takes microseconds. When both operands are tensors
of one type none of that changes anything: ``semantic.add`` (``sub``, ``mul``, ``floordiv``, ``mod``,
``truediv``, the compares, ``and_`` / ``or_`` / ``xor_``) then calls one builder method on the two handles and
gives the operands' type (``tl.int1`` of their shape for a compare), and ``semantic.cast`` to the same element type
returns the tensor itself. :func:`tensor_methods` gives ``tl.tensor`` methods that do exactly that in those cases
and hand every other case (a Python number, types that differ, pointers, division of narrow floats, the overflow
sanitizer on) to the method they replace. Installed by :mod:`fusegen.codegen.interpreter_batch`'s executor for
fusegen's own grids, in the scope Triton's interpreter patches ``tl.tensor`` in, and removed with it.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["tensor_methods"]

#: operator -> (builder method for floats, signed ints, unsigned ints); None: that kind takes Triton's path.
#: ``add``/``sub``/``mul`` of ints also check the overflow sanitizer (off in fusegen's builder).
_BINARY = {
    "__add__": ("create_fadd", "create_add", "create_add"),
    "__sub__": ("create_fsub", "create_sub", "create_sub"),
    "__mul__": ("create_fmul", "create_mul", "create_mul"),
    "__floordiv__": (None, "create_sdiv", "create_udiv"),
    "__mod__": ("create_frem", "create_srem", "create_urem"),
    "__truediv__": ("create_fdiv", None, None),
    "__and__": (None, "create_and", "create_and"),
    "__or__": (None, "create_or", "create_or"),
    "__xor__": (None, "create_xor", "create_xor"),
}
_COMPARE = {
    "__lt__": ("create_fcmpOLT", "create_icmpSLT", "create_icmpULT"),
    "__le__": ("create_fcmpOLE", "create_icmpSLE", "create_icmpULE"),
    "__gt__": ("create_fcmpOGT", "create_icmpSGT", "create_icmpUGT"),
    "__ge__": ("create_fcmpOGE", "create_icmpSGE", "create_icmpUGE"),
    "__eq__": ("create_fcmpOEQ", "create_icmpEQ", "create_icmpEQ"),
    "__ne__": ("create_fcmpUNE", "create_icmpNE", "create_icmpNE"),
}
_SANITIZED = frozenset({"__add__", "__sub__", "__mul__", "__radd__", "__rsub__", "__rmul__"})
#: div and mod promote floats narrower than 32 bits to f32 (semantic.computation_type_impl, div_or_mod)
_WIDE_FLOAT_ONLY = frozenset({"__mod__", "__truediv__"})


def tensor_methods(slow: Callable[[str], Callable[..., Any]]) -> dict[str, Any]:
    """``tl.tensor`` methods (name -> function) taking the fast path where it gives what Triton's does; ``slow(name)``
    is the method each replaces (Triton's interpreter's, already installed), called in every other case.

    Fast cases: two tensors of one type; a tensor of ``int32``/``int64`` with a Python int in its range, or of
    ``fp32``/``fp64`` with a Python int or float (the scalar does not take part in the promotion then, and is
    made with the builder's ``get_<type>`` and splat to the tensor's shape, as the semantic layer does), in
    either order for ``+``, ``-`` and ``*``.
    """
    from triton.runtime import interpreter as interp

    tl = interp.tl
    tensor = tl.tensor
    new = object.__new__
    bool_types: dict[Any, Any] = {}

    def kind(op: str, ty: Any) -> int | None:
        """0 float, 1 signed int, 2 unsigned int: which builder method ``op`` takes for scalar type ``ty``."""
        if ty.is_floating():
            if op in _WIDE_FLOAT_ONLY and not (ty.is_fp32() or ty.is_fp64()):
                return None
            return 0
        if ty.is_int():
            if op in _SANITIZED and ty.int_bitwidth < 64 and interp.interpreter_builder.options.sanitize_overflow:
                return None
            return 1 if ty.is_int_signed() else 2
        return None

    def operand(t: Any, other: Any) -> tuple[Any, Any] | None:
        """(scalar type, handle of ``other`` as the semantic layer makes it) when ``t`` and ``other`` take a fast
        path, else None."""
        if type(other) is tensor:
            ta, tb = t.type, other.type
            return (ta.scalar, other.handle) if ta is tb or bool(ta == tb) else None
        v = other.value if isinstance(other, tl.constexpr) else other
        sca = t.type.scalar
        if type(v) is int and sca.is_int_signed() and sca.int_bitwidth >= 32:
            if not sca.get_int_min_value() <= v <= sca.get_int_max_value():
                return None  # the semantic layer raises: let it
        elif not (type(v) in (int, float) and (sca.is_fp32() or sca.is_fp64())):
            return None
        b = interp.interpreter_builder
        h = getattr(b, f"get_{sca.name}")(v)
        return sca, (b.create_splat(t.type, h) if t.type.is_block() else h)

    def result(t: Any, handle: Any, ty: Any = None) -> Any:
        out = new(tensor)
        out.__dict__.update(t.__dict__)  # shape, numel, type, dtype: the operand's
        out.handle = handle
        if ty is not None:
            out.type, out.dtype = ty, ty.scalar
        return out

    def binary(op: str, methods: tuple[str | None, ...], reflected: bool = False) -> Callable[..., Any]:
        fallback = slow(op)

        def method(self: Any, other: Any) -> Any:
            got = operand(self, other)
            k = None if got is None else kind(op, got[0])
            name = None if k is None else methods[k]
            if name is None:
                return fallback(self, other)
            fn = getattr(interp.interpreter_builder, name)
            return result(self, fn(got[1], self.handle) if reflected else fn(self.handle, got[1]))

        return method

    def compare(op: str, methods: tuple[str, ...]) -> Callable[..., Any]:
        fallback = slow(op)

        def method(self: Any, other: Any) -> Any:
            got = operand(self, other)
            k = None if got is None else kind(op, got[0])
            if k is None:
                return fallback(self, other)
            ty = self.type
            shape = tuple(ty.shape) if ty.is_block() else None
            bty = bool_types.get(shape)
            if bty is None:
                bty = bool_types[shape] = ty.with_element_ty(tl.int1)  # semantic._bool_like
            return result(self, getattr(interp.interpreter_builder, methods[k])(self.handle, got[1]), bty)

        return method

    to_fallback = slow("to")

    def to(self: Any, dtype: Any, fp_downcast_rounding: Any = None, bitcast: Any = False) -> Any:
        d, b = (x.value if isinstance(x, tl.constexpr) else x for x in (dtype, bitcast))
        if not b and isinstance(d, tl.dtype) and d.scalar == self.type.scalar:
            return self  # semantic.cast returns its input when the element types agree
        return to_fallback(self, dtype, fp_downcast_rounding, bitcast)

    out: dict[str, Any] = {op: binary(op, m) for op, m in _BINARY.items()}
    out.update({"__r" + op[2:]: binary("__r" + op[2:], _BINARY[op], reflected=True)
                for op in ("__add__", "__sub__", "__mul__")})
    out.update({op: compare(op, m) for op, m in _COMPARE.items()})
    out["to"] = to
    return out
