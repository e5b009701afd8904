"""Sorts for the sort tests of several folders: JAX's ``jnp.sort`` / ``jnp.argsort`` HLO and its comparator,
kSort fusion modules built from shapes and comparators, f32 keys with NaNs of both signs, signed zeros and ties,
and a Hypothesis strategy of random comparators (:func:`comparators`) with value pools per type."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

# jax.jit(lambda x: (jnp.sort(x), jnp.argsort(x))).lower(x).as_text("hlo") with jax 0.10
JAX_SORT = """HloModule jit_sort_argsort

region_0.1 {{
  sort.2 = f32[] parameter(0)
  ne.2 = pred[] compare(sort.2, sort.2), direction=NE
  constant.2 = f32[] constant(nan)
  constant.3 = f32[] constant(0)
  eq.2 = pred[] compare(sort.2, constant.3), direction=EQ
  select_n.4 = f32[] select(eq.2, constant.3, sort.2)
  select_n.5 = f32[] select(ne.2, constant.2, select_n.4)
  sort.3 = f32[] parameter(1)
  ne.3 = pred[] compare(sort.3, sort.3), direction=NE
  eq.3 = pred[] compare(sort.3, constant.3), direction=EQ
  select_n.6 = f32[] select(eq.3, constant.3, sort.3)
  select_n.7 = f32[] select(ne.3, constant.2, select_n.6)
  ROOT lt_to.1 = pred[] compare(select_n.5, select_n.7), direction=LT, type=TOTALORDER
}}

sort.2 {{
  Arg_0.1 = f32[{N}]{{0}} parameter(0)
  ROOT sort.5 = f32[{N}]{{0}} sort(Arg_0.1), dimensions={{0}}, is_stable=true, to_apply=region_0.1
}}

region_1.3 {{
  sort.12 = s32[] parameter(2)
  sort.13 = s32[] parameter(3)
  sort.10 = f32[] parameter(0)
  ne.6 = pred[] compare(sort.10, sort.10), direction=NE
  constant.6 = f32[] constant(nan)
  constant.7 = f32[] constant(0)
  eq.6 = pred[] compare(sort.10, constant.7), direction=EQ
  select_n.12 = f32[] select(eq.6, constant.7, sort.10)
  select_n.13 = f32[] select(ne.6, constant.6, select_n.12)
  sort.11 = f32[] parameter(1)
  ne.7 = pred[] compare(sort.11, sort.11), direction=NE
  eq.7 = pred[] compare(sort.11, constant.7), direction=EQ
  select_n.14 = f32[] select(eq.7, constant.7, sort.11)
  select_n.15 = f32[] select(ne.7, constant.6, select_n.14)
  ROOT lt_to.3 = pred[] compare(select_n.13, select_n.15), direction=LT, type=TOTALORDER
}}

argsort.4 {{
  Arg_0.3 = f32[{N}]{{0}} parameter(0)
  iota.1 = s32[{N}]{{0}} iota(), iota_dimension=0
  sort.17 = (f32[{N}]{{0}}, s32[{N}]{{0}}) sort(Arg_0.3, iota.1), dimensions={{0}}, is_stable=true, to_apply=region_1.3
  sort.18 = f32[{N}]{{0}} get-tuple-element(sort.17), index=0
  ROOT sort.19 = s32[{N}]{{0}} get-tuple-element(sort.17), index=1
}}

ENTRY main.5 {{
  x.1 = f32[{N}]{{0}} parameter(0)
  jit_sort_.1 = f32[{N}]{{0}} call(x.1), to_apply=sort.2
  jit_argsort_.1 = s32[{N}]{{0}} call(x.1), to_apply=argsort.4
  ROOT tuple.1 = (f32[{N}]{{0}}, s32[{N}]{{0}}) tuple(jit_sort_.1, jit_argsort_.1)
}}
"""


def _input(n: int) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    x[::1000] = np.nan
    x[5::1000] = -np.float32(np.nan)  # a NaN with the sign bit set: JAX's comparator makes it +NaN
    x[7::997] = -0.0
    x[9::991] = 0.0
    return x


#: JAX's comparator for f32 keys (``jnp.sort`` / ``jnp.argsort``): NaNs canonicalised, -0 == +0, total order.
JAX_CMP = """  l0 = f32[] parameter(0)
  r0 = f32[] parameter(1)
{extra}
  nl = pred[] compare(l0, l0), direction=NE
  nan = f32[] constant(nan)
  z = f32[] constant(0)
  el = pred[] compare(l0, z), direction=EQ
  sl = f32[] select(el, z, l0)
  cl = f32[] select(nl, nan, sl)
  nr = pred[] compare(r0, r0), direction=NE
  er = pred[] compare(r0, z), direction=EQ
  sr = f32[] select(er, z, r0)
  cr = f32[] select(nr, nan, sr)
  ROOT lt = pred[] compare(cl, cr), direction=LT, type=TOTALORDER"""


def _argsort_module(dims: list[int], dim: int, outputs: str = "both", stable: bool = True) -> str:
    """A kSort fusion sorting f32 keys with an iota payload (JAX's argsort) along ``dim``."""
    d = ",".join(map(str, dims))
    extra = "  l1 = s32[] parameter(2)\n  r1 = s32[] parameter(3)"
    sort = f"(f32[{d}], s32[{d}]) sort(p0, io), dimensions={{{dim}}}, is_stable={'true' if stable else 'false'}, to_apply=cmp"
    if outputs == "both":
        body, out = f"  ROOT s = {sort}", f"(f32[{d}], s32[{d}])"
    else:  # only the indices: the keys are sorted in a scratch buffer
        body, out = f"  s = {sort}\n  ROOT g = s32[{d}] get-tuple-element(s), index=1", f"s32[{d}]"
    return f"""HloModule t
cmp {{
{JAX_CMP.format(extra=extra)}
}}
fused {{
  p0 = f32[{d}] parameter(0)
  io = s32[{d}] iota(), iota_dimension={dim}
{body}
}}
ENTRY e {{
  p0 = f32[{d}] parameter(0)
  ROOT f = {out} fusion(p0), kind=kSort, calls=fused
}}
"""


def _keys(shape, seed: int = 0) -> np.ndarray:
    """Normal f32 with repeated values (ties), NaNs of both signs and signed zeros."""
    rng = np.random.default_rng(seed)
    x = np.round(rng.standard_normal(shape) * 8).astype(np.float32)
    flat = x.reshape(-1)
    flat[::97] = np.nan
    flat[5::89] = -np.float32(np.nan)
    flat[7::101] = -0.0
    return x


def _sort_module(shapes: list[str], dim: int, comparator: str, stable: bool = True, params: list[str] | None = None) -> str:
    """A kSort fusion sorting operands ``shapes`` (HLO shape strings) along ``dim``."""
    out_shape = shapes[0] if len(shapes) == 1 else "(" + ", ".join(shapes) + ")"
    ps = "\n".join(f"  p{k} = {s} parameter({k})" for k, s in enumerate(shapes))
    args = ", ".join(f"p{k}" for k in range(len(shapes)))
    return f"""
HloModule t
cmp {{
{comparator}
}}
fused {{
{ps}
  ROOT s = {out_shape} sort({args}), dimensions={{{dim}}}, is_stable={'true' if stable else 'false'}, to_apply=cmp
}}
ENTRY e {{
{ps}
  ROOT f = {out_shape} fusion({args}), kind=kSort, calls=fused
}}
"""


def _cmp(ets: list[str], body: str) -> str:
    lines = []
    for k, et in enumerate(ets):
        lines.append(f"  l{k} = {et}[] parameter({2 * k})")
        lines.append(f"  r{k} = {et}[] parameter({2 * k + 1})")
    return "\n".join(lines) + "\n" + body


TYPES = ("f32", "s32", "pred")
POOLS = {
    "f32": np.array([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan, -np.nan, 1e-30], dtype=np.float32),
    "s32": np.array([0, 1, -1, 2, -7, 2**31 - 1, -2**31], dtype=np.int32),
    "pred": np.array([False, True]),
}
# key transforms of one parameter, per type: HLO lines with {p} the parameter and {o} the result name
KEYS = {
    "f32": {
        "id": [],
        "abs": ["{o} = f32[] abs({p})"],
        "neg": ["{o} = f32[] negate({p})"],
        "canon": ["{o}.ne = pred[] compare({p}, {p}), direction=NE", "{o}.nan = f32[] constant(nan)",
                  "{o}.z = f32[] constant(0)", "{o}.eq = pred[] compare({p}, {o}.z), direction=EQ",
                  "{o}.s = f32[] select({o}.eq, {o}.z, {p})", "{o} = f32[] select({o}.ne, {o}.nan, {o}.s)"],
        "bits": ["{o}.b = s32[] bitcast({p})", "{o}.m = s32[] constant(2147483647)",
                 "{o}.x = s32[] xor({o}.m, {o}.b)", "{o}.z = s32[] constant(0)",
                 "{o}.lt = pred[] compare({o}.b, {o}.z), direction=LT", "{o} = s32[] select({o}.lt, {o}.x, {o}.b)"],
    },
    "s32": {
        "id": [],
        "neg": ["{o} = s32[] negate({p})"],
        "xor": ["{o}.c = s32[] constant(5)", "{o} = s32[] xor({p}, {o}.c)"],
    },
    "pred": {"id": [], "not": ["{o} = pred[] not({p})"]},
}


class _Comparator:
    """HLO text of a comparator computation, built from random choices."""

    def __init__(self, types: list[str]):
        self.types, self.lines, self.n = types, [], 0
        for i, t in enumerate(types):
            self.lines += [f"p{2 * i} = {t}[] parameter({2 * i})", f"p{2 * i + 1} = {t}[] parameter({2 * i + 1})"]

    def name(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def key(self, operand: int, side: int, transform: str) -> tuple[str, str]:
        """(name, type) of ``transform(p[2 * operand + side])``."""
        t = self.types[operand]
        body = KEYS[t][transform]
        p = f"p{2 * operand + side}"
        if not body:
            return p, t
        o = self.name()
        self.lines += [line.format(p=p, o=o) for line in body]
        kt = body[-1].split(" = ")[1].split("[")[0]
        return o, kt

    def atom(self, operand: int, transform: str, direction: str, total: bool, swap: bool) -> str:
        a, kt = self.key(operand, 1 if swap else 0, transform)
        b, _ = self.key(operand, 0 if swap else 1, transform)
        o = self.name()
        typ = ", type=TOTALORDER" if total and kt == "f32" else ""
        self.lines.append(f"{o} = pred[] compare({a}, {b}), direction={direction}{typ}")
        return o

    def op(self, opcode: str, *args: str, direction: str = "") -> str:
        o = self.name()
        extra = f", direction={direction}" if direction else ""
        self.lines.append(f"{o} = pred[] {opcode}({', '.join(args)}){extra}")
        return o

    def module(self, root: str, dims: tuple[int, ...], stable: bool) -> str:
        body = "\n  ".join(self.lines[:-1] + ["ROOT " + self.lines[-1]]) if self.lines[-1].startswith(root + " ") \
            else "\n  ".join(self.lines + [f"ROOT {self.name()} = pred[] copy({root})"])
        shp = ",".join(map(str, dims))
        params = "\n  ".join(f"x{i} = {t}[{shp}] parameter({i})" for i, t in enumerate(self.types))
        outs = ", ".join(f"{t}[{shp}]" for t in self.types)
        xs = ", ".join(f"x{i}" for i in range(len(self.types)))
        return (f"HloModule m\ncmp {{\n  {body}\n}}\nENTRY e {{\n  {params}\n  ROOT s = ({outs}) sort({xs}), "
                f"dimensions={{{len(dims) - 1}}}, is_stable={'true' if stable else 'false'}, to_apply=cmp\n}}\n")


@st.composite
def comparators(draw):
    """``(hlo text, types, dims, stable)``: a lexicographic comparator in one of several spellings, or (about a
    third of the time) a random boolean expression over random atoms."""
    types = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=3))
    c = _Comparator(types)

    def random_atom() -> str:
        i = draw(st.integers(0, len(types) - 1))
        return c.atom(i, draw(st.sampled_from(sorted(KEYS[types[i]]))),
                      draw(st.sampled_from(["LT", "GT", "LE", "GE", "EQ", "NE"])), draw(st.booleans()),
                      draw(st.booleans()))

    if draw(st.integers(0, 2)) == 0:
        def expr(depth: int) -> str:
            if depth == 0 or draw(st.booleans()):
                return random_atom()
            kind = draw(st.sampled_from(["and", "or", "not", "select", "eq"]))
            if kind == "not":
                return c.op("not", expr(depth - 1))
            if kind == "select":
                return c.op("select", expr(depth - 1), expr(depth - 1), expr(depth - 1))
            if kind == "eq":
                return c.op("compare", expr(depth - 1), expr(depth - 1), direction=draw(st.sampled_from(["EQ", "NE"])))
            return c.op(kind, expr(depth - 1), expr(depth - 1))

        root = expr(3)
    else:
        levels = draw(st.lists(st.integers(0, len(types) - 1), min_size=1, max_size=3))
        root = None
        for i in reversed(levels):
            transform = draw(st.sampled_from(sorted(KEYS[types[i]])))
            direction, total = draw(st.sampled_from(["LT", "GT"])), draw(st.booleans())
            lt = c.atom(i, transform, direction, total, draw(st.booleans()))
            if root is None:
                root = lt
                continue
            spelling = draw(st.sampled_from(["or-and", "select-eq", "select-ne", "stable-expander"]))
            if spelling == "or-and":
                eq = c.atom(i, transform, "EQ", total, draw(st.booleans()))
                root = c.op("or", lt, c.op("and", eq, root))
            elif spelling == "select-eq":
                root = c.op("select", c.atom(i, transform, "EQ", total, False), root, lt)
            elif spelling == "select-ne":
                root = c.op("select", c.atom(i, transform, "NE", total, True), lt, root)
            else:  # XLA's StableSortExpander: select(lt(a,b) == lt(b,a), rest, lt(a,b))
                back = c.atom(i, transform, direction, total, True)
                root = c.op("select", c.op("compare", lt, back, direction="EQ"), root, lt)
    dims = (draw(st.integers(1, 3)), draw(st.integers(1, 12)))
    return c.module(root, dims, draw(st.booleans())), types, dims
