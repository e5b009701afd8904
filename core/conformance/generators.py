"""Hypothesis strategies that build small one-fusion HLO modules of a given kind.

Each generator draws a module text whose entry root is one fusion meant to dispatch to its kind; the
suite parses it, dispatches it with every installed plugin, and checks the plugin's emitter against the
reference evaluator. A drawn fusion that dispatches elsewhere is rejected with ``hypothesis.assume``.

Generators (name: default for kind):

============================ ================ ==================================================
name                         kind             fusion
============================ ================ ==================================================
``elementwise``              kLoop            a chain of 1-4 unary/binary elementwise ops
``copy``                     kLoop            ``copy(parameter)`` roots (memcpy fusions)
``dynamic-update-slice``     kLoop            root ``dynamic-update-slice`` of a parameter
``reduction``                kReduction       ``reduce`` (add/max) over the minor or major dims
``transpose``                kTranspose       a 2-D/3-D tiled ``transpose`` (+ an elementwise op)
``concatenate``              kConcatenate     2-4 operands concatenated along one dimension
``input-slices``             kInputSlices     several unit-stride ``slice`` roots of one shape
``scatter``                  kScatter         ``scatter`` with an add combiner
``sort``                     kSort            ``sort`` of one operand along its minor dimension
============================ ================ ==================================================
"""

from __future__ import annotations

from typing import Callable

from hypothesis import strategies as st

FLOATS = ("f32", "f16", "bf16", "f64")
INTS = ("s32", "s8", "s16", "s64", "u8", "u32")

DEFAULT_FOR_KIND = {
    "kLoop": "elementwise", "kReduction": "reduction", "kTranspose": "transpose",
    "kConcatenate": "concatenate", "kInputSlices": "input-slices", "kScatter": "scatter", "kSort": "sort",
}


def _shape(et: str, dims) -> str:
    """``f32[2,3]``: an HLO shape text."""
    return f"{et}[{','.join(map(str, dims))}]"


def fusion_module(body: str, params: list[str], root_shape: str, kind: str = "kLoop", extra: str = "") -> str:
    """HLO text of a module whose entry root is one fusion: ``params`` are the parameter shapes (``p0``,
    ``p1``, ... in the fused computation and the entry), ``body`` the fused computation's lines after the
    parameters (one of them ``ROOT``), ``root_shape`` the fusion's shape, ``kind`` its ``kind=`` attribute,
    ``extra`` computations placed before it (reducers, comparators). For plugin generators
    (``fusegen_conformance_generators``)."""
    ps = "\n".join(f"  p{k} = {s} parameter({k})" for k, s in enumerate(params))
    args = ", ".join(f"p{k}" for k in range(len(params)))
    return (f"HloModule generated\n{extra}\nfused {{\n{ps}\n{body}\n}}\n"
            f"ENTRY e {{\n{ps}\n  ROOT f = {root_shape} fusion({args}), kind={kind}, calls=fused\n}}\n")


_module = fusion_module


def _pick_dtype(draw, dtypes: tuple[str, ...], allowed: tuple[str, ...]) -> str:
    usable = [d for d in dtypes if d in allowed]
    if not usable:
        from hypothesis import assume

        assume(False)
    return draw(st.sampled_from(usable))


@st.composite
def elementwise(draw, dtypes: tuple[str, ...]) -> str:
    et = _pick_dtype(draw, dtypes, FLOATS + INTS + ("pred",))
    dims = draw(st.lists(st.integers(1, 9), min_size=1, max_size=3))
    s = _shape(et, dims)
    n_params = draw(st.integers(1, 3))
    pool = [f"p{k}" for k in range(n_params)]
    lines = []
    if et == "pred":
        unary, binary = ["not"], ["and", "or", "xor"]
    elif et in FLOATS:
        unary, binary = ["negate", "abs", "tanh", "exponential", "floor"], ["add", "multiply", "subtract", "maximum", "minimum"]
    else:
        unary, binary = ["negate", "abs", "not"], ["add", "multiply", "subtract", "maximum", "minimum", "and", "xor"]
    for k in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            op, args = draw(st.sampled_from(unary)), [draw(st.sampled_from(pool))]
        else:
            op, args = draw(st.sampled_from(binary)), [draw(st.sampled_from(pool)) for _ in range(2)]
        lines.append(f"  v{k} = {s} {op}({', '.join(args)})")
        pool.append(f"v{k}")
    lines[-1] = "  ROOT" + lines[-1][1:]
    return _module("\n".join(lines), [s] * n_params, s)


@st.composite
def copy(draw, dtypes: tuple[str, ...]) -> str:
    et = _pick_dtype(draw, dtypes, FLOATS + INTS + ("pred",))
    n = draw(st.integers(1, 2))
    shapes = [_shape(et, draw(st.lists(st.integers(1, 17), min_size=1, max_size=3))) for _ in range(n)]
    lines = [f"  c{k} = {s} copy(p{k})" for k, s in enumerate(shapes)]
    if n == 1:
        lines[0] = "  ROOT" + lines[0][1:]
        return _module("\n".join(lines), shapes, shapes[0])
    tup = "(" + ", ".join(shapes) + ")"
    lines.append(f"  ROOT t = {tup} tuple({', '.join(f'c{k}' for k in range(n))})")
    return _module("\n".join(lines), shapes, tup)


@st.composite
def dynamic_update_slice(draw, dtypes: tuple[str, ...]) -> str:
    et = _pick_dtype(draw, dtypes, FLOATS + INTS)
    dims = draw(st.lists(st.integers(2, 12), min_size=1, max_size=3))
    upd = [draw(st.integers(1, d)) for d in dims]
    params = [_shape(et, dims), _shape(et, upd)] + ["s32[]"] * len(dims)
    idx = ", ".join(f"p{2 + k}" for k in range(len(dims)))
    body = f"  ROOT d = {params[0]} dynamic-update-slice(p0, p1, {idx})"
    return _module(body, params, params[0])


@st.composite
def reduction(draw, dtypes: tuple[str, ...]) -> str:
    et = _pick_dtype(draw, dtypes, ("f32", "f64", "s32"))
    rank = draw(st.integers(2, 3))
    dims = [draw(st.sampled_from([3, 8, 32, 67, 128])) for _ in range(rank)]
    row = draw(st.booleans())
    red = [rank - 1] if row else [0]
    keep = [d for i, d in enumerate(dims) if i not in red]
    op = draw(st.sampled_from(["add", "maximum"]))
    init = "0" if op == "add" else ("-inf" if et.startswith("f") else "-2147483648")
    extra = f"red {{\n  a = {et}[] parameter(0)\n  b = {et}[] parameter(1)\n  ROOT r = {et}[] {op}(a, b)\n}}"
    body = (f"  c = {et}[] constant({init})\n"
            f"  ROOT r = {_shape(et, keep)} reduce(p0, c), dimensions={{{','.join(map(str, red))}}}, to_apply=red")
    return _module(body, [_shape(et, dims)], _shape(et, keep), kind="kInput", extra=extra)


@st.composite
def transpose(draw, dtypes: tuple[str, ...]) -> str:
    et = _pick_dtype(draw, dtypes, FLOATS + INTS)
    if draw(st.booleans()):
        dims, perm = [draw(st.sampled_from([32, 48, 64, 96])) for _ in range(2)], [1, 0]
    else:
        dims = [draw(st.integers(1, 3))] + [draw(st.sampled_from([32, 64])) for _ in range(2)]
        perm = [0, 2, 1]
    out = [dims[p] for p in perm]
    lines = [f"  t = {_shape(et, out)} transpose(p0), dimensions={{{','.join(map(str, perm))}}}"]
    if draw(st.booleans()) and et != "pred":
        lines.append(f"  ROOT n = {_shape(et, out)} negate(t)")
    else:
        lines[0] = "  ROOT" + lines[0][1:]
    return _module("\n".join(lines), [_shape(et, dims)], _shape(et, out), kind="kInput")


@st.composite
def concatenate(draw, dtypes: tuple[str, ...]) -> str:
    et = _pick_dtype(draw, dtypes, FLOATS + INTS)
    rank = draw(st.integers(1, 3))
    dims = [draw(st.integers(1, 9)) for _ in range(rank)]
    k = draw(st.integers(0, rank - 1))
    n = draw(st.integers(2, 4))
    sizes = [draw(st.integers(1, 40)) for _ in range(n)]
    shapes = [_shape(et, [s if i == k else d for i, d in enumerate(dims)]) for s in sizes]
    out = _shape(et, [sum(sizes) if i == k else d for i, d in enumerate(dims)])
    body = f"  ROOT c = {out} concatenate({', '.join(f'p{i}' for i in range(n))}), dimensions={{{k}}}"
    return _module(body, shapes, out)


@st.composite
def input_slices(draw, dtypes: tuple[str, ...]) -> str:
    et = _pick_dtype(draw, dtypes, FLOATS + INTS + ("pred",))
    rank = draw(st.integers(1, 3))
    dims = [draw(st.integers(1, 12)) for _ in range(rank)]
    s = _shape(et, dims)
    lines = []
    src = "p0"
    empty_ok = draw(st.integers(0, 4)) == 0  # mostly non-empty slices; empty ones now and then
    if draw(st.booleans()):
        op = "not" if et == "pred" else "negate"
        lines.append(f"  x = {s} {op}(p0)")
        src = "x"
    n = draw(st.integers(2, 3))
    outs = []
    for j in range(n):
        bounds = []
        for d in dims:
            a = draw(st.integers(0, d if empty_ok else d - 1))
            b = draw(st.integers(a if empty_ok else a + 1, d))
            bounds.append((a, b))
        out = _shape(et, [b - a for a, b in bounds])
        spec = ",".join(f"[{a}:{b}]" for a, b in bounds)
        lines.append(f"  s{j} = {out} slice({src}), slice={{{spec}}}")
        outs.append(out)
    tup = "(" + ", ".join(outs) + ")"
    lines.append(f"  ROOT t = {tup} tuple({', '.join(f's{j}' for j in range(n))})")
    return _module("\n".join(lines), [s], tup)


@st.composite
def scatter(draw, dtypes: tuple[str, ...]) -> str:
    et = _pick_dtype(draw, dtypes, ("f32", "s32"))
    rows, cols, n = draw(st.integers(2, 12)), draw(st.integers(1, 8)), draw(st.integers(1, 10))
    extra = f"add {{\n  a = {et}[] parameter(0)\n  b = {et}[] parameter(1)\n  ROOT r = {et}[] add(a, b)\n}}"
    params = [_shape(et, [rows, cols]), f"s32[{n},1]", _shape(et, [n, cols])]
    body = (f"  ROOT s = {params[0]} scatter(p0, p1, p2), update_window_dims={{1}}, inserted_window_dims={{0}}, "
            f"scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add")
    return _module(body, params, params[0], extra=extra)


@st.composite
def sort(draw, dtypes: tuple[str, ...]) -> str:
    et = _pick_dtype(draw, dtypes, ("f32", "s32", "f16"))
    dims = [draw(st.integers(1, 4)), draw(st.integers(1, 64))] if draw(st.booleans()) else [draw(st.integers(1, 100))]
    direction = draw(st.sampled_from(["LT", "GT"]))
    extra = (f"cmp {{\n  l = {et}[] parameter(0)\n  r = {et}[] parameter(1)\n"
             f"  ROOT c = pred[] compare(l, r), direction={direction}\n}}")
    s = _shape(et, dims)
    body = f"  ROOT s = {s} sort(p0), dimensions={{{len(dims) - 1}}}, is_stable=true, to_apply=cmp"
    return _module(body, [s], s, kind="kSort", extra=extra)


GENERATORS: dict[str, Callable] = {
    "elementwise": elementwise, "copy": copy, "dynamic-update-slice": dynamic_update_slice,
    "reduction": reduction, "transpose": transpose, "concatenate": concatenate,
    "input-slices": input_slices, "scatter": scatter, "sort": sort,
}


def generator_for(kind: str, declared: dict[str, str]) -> str | None:  # kept for callers; see Target.generator_for
    """The generator name for ``kind``: the plugin's declaration, else the kind's default, else None."""
    return declared.get(kind) or DEFAULT_FOR_KIND.get(kind)
