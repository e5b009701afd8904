"""The multi-launch sort's step kernels hold what XLA's hold (issue 43): a global step one pair a thread at a
time (XLA's unrolled compare bodies), a tiled step its keys and nothing per element beside them (the tile's
addresses a 64-bit scalar plus the lanes, the lane packed into the key's last bits where they fit, an operand
whose key is a bijection of it read back from its key). Every kernel is judged against the reference
evaluator, bit for bit, as the interpreter variants and as the launched kernels (run in the interpreter too);
registers against XLA's own kernels for the same launches are ``tests/corpus/test_sass_goals.py``'s (set ``s``)."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime
from fusegen.device import get_device
from fusegen.dispatch import get_fusion_emitter
from fusegen.evaluator.evaluator import CALLS, evaluate_instruction
from fusegen.evaluator.vectorized_sort import lexicographic_plan
from fusegen.hlo.parser import parse_module
from fusegen.runtime.inputs import leaves
from fusegen_plugins.emitters.sort_keys import key_inverse

H200 = get_device("h200")

def _total_order(a: str, b: str) -> str:
    """``ComparisonExpander``'s total order of f32 scalars ``a`` and ``b`` as keys ``k0`` / ``k1``."""
    return """  m = s32[] constant(2147483647)
  z = s32[] constant(0)
""" + "\n".join(f"""  b{i} = s32[] bitcast-convert({x})
  x{i} = s32[] xor(m, b{i})
  l{i} = pred[] compare(b{i}, z), direction=LT
  k{i} = s32[] select(l{i}, x{i}, b{i})""" for i, x in enumerate((a, b)))


_TOTAL = _total_order("p0", "p1")
#: ``jnp.sort``'s: NaN and -0.0 canonicalised first
_CANON = """  nan = f32[] constant(nan)
  fz = f32[] constant(0)
""" + "\n".join(f"""  n{i} = pred[] compare({x}, {x}), direction=NE
  e{i} = pred[] compare({x}, fz), direction=EQ
  s{i} = f32[] select(e{i}, fz, {x})
  c{i} = f32[] select(n{i}, nan, s{i})""" for i, x in enumerate(("p0", "p1"))) + "\n" + _total_order("c0", "c1")
#: comparator bodies over (p0, p1) = the first operand's lhs / rhs, then the position operand's (p2, p3):
#: ``lax.top_k``'s, ``jnp.sort``'s and variants, with the inverse ``key_inverse`` must find
COMPARATORS = {  # name -> (key type, body, the key atom's direction, inverse)
    "top_k": ("f32", _TOTAL, "GT", "total_order"),
    "jnp_sort": ("f32", _CANON, "LT", None),
    "totalorder": ("f32", "", "LT", "identity"),
    "f32_abs": ("f32", "  k0 = f32[] abs(p0)\n  k1 = f32[] abs(p1)", "LT", None),
    "s32_abs": ("s32", "  k0 = s32[] abs(p0)\n  k1 = s32[] abs(p1)", "GT", None),
    "s32_param": ("s32", "", "LT", "identity"),
    "bits": ("f32", "  k0 = s32[] bitcast-convert(p0)\n  k1 = s32[] bitcast-convert(p1)", "LT", "bitcast"),
}


def _module(name: str, rows: int, n: int) -> str:
    """A kSort fusion sorting ``[rows, n]`` keys (comparator ``name``) with their positions (an ``iota``)."""
    t, body, direction, _ = COMPARATORS[name]
    keys = ("p0", "p1") if not body else ("k0", "k1")
    total = ", type=TOTALORDER" if name == "totalorder" else ""
    return f"""HloModule m
cmp {{
  p0 = {t}[] parameter(0)
  p1 = {t}[] parameter(1)
  p2 = s32[] parameter(2)
  p3 = s32[] parameter(3)
{body}
  gt = pred[] compare({keys[0]}, {keys[1]}), direction={direction}{total}
  rt = pred[] compare({keys[1]}, {keys[0]}), direction={direction}{total}
  eq = pred[] compare(gt, rt), direction=EQ
  tie = pred[] compare(p2, p3), direction=LT
  ROOT r = pred[] select(eq, tie, gt)
}}
fused {{
  x = {t}[{rows},{n}] parameter(0)
  i = s32[{rows},{n}] iota(), iota_dimension=1
  ROOT s = ({t}[{rows},{n}], s32[{rows},{n}]) sort(x, i), dimensions={{1}}, is_stable=true, to_apply=cmp
}}
ENTRY e {{
  x = {t}[{rows},{n}] parameter(0)
  ROOT f = ({t}[{rows},{n}], s32[{rows},{n}]) fusion(x), kind=kSort, calls=fused
}}
"""


def _edge_values(t: str, shape: tuple[int, ...], rng) -> np.ndarray:
    """Values with ties, both zeros, infinities and NaNs of several payloads and signs (as bits)."""
    if t == "s32":
        pool = np.array([0, 1, -1, 7, -7, 2**31 - 1, -2**31, 12345], dtype=np.int32)
        return np.where(rng.random(shape) < 0.5, pool[rng.integers(0, len(pool), shape)],
                        rng.integers(-2**31, 2**31, shape, dtype=np.int64).astype(np.int32))
    bits = np.array([0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7fc00001,
                     0xff800123, 0x3f800000, 0xbf800000, 0x00000001], dtype=np.uint32).view(np.float32)
    return np.where(rng.random(shape) < 0.5, bits[rng.integers(0, len(bits), shape)],
                    rng.standard_normal(shape).astype(np.float32))


def _emitted(text: str):
    m = parse_module(text, "sort")
    inst = m.entry.root
    em, factory = get_fusion_emitter(FusionAnalysis.create(inst, H200))
    assert factory is not None and factory.name == "sort"
    return inst, em, em.emit()


def _launched(emitted):
    return attrs.evolve(emitted, kernels=tuple(attrs.evolve(k, interpret_variant=None) for k in emitted.kernels))


def _bits_equal(emitted, inst, ops) -> None:
    ref = leaves(evaluate_instruction(inst, ops))
    for run in (emitted, _launched(emitted)):
        for o, r in zip(triton_runtime.run_fusion(run, ops, inst), ref):
            np.testing.assert_array_equal(np.asarray(o).view(np.uint8), np.asarray(r).view(np.uint8))


@pytest.mark.parametrize("name", sorted(COMPARATORS))
def test_keys_read_back_only_where_a_bijection(name):
    """``lax.top_k``'s key (XLA's total order of the bits), a parameter (an integer, a float under
    ``TOTALORDER``), its bits: read back from the key; ``jnp.sort``'s (NaN and -0.0 canonicalised: several
    values share a key) and an ``abs``: not."""
    inst, em, _ = _emitted(_module(name, 2, 300))
    (lv, _), = [(lv, None) for lv in lexicographic_plan(em.comparator, 2, CALLS) if lv.operand == 0]
    assert key_inverse(lv) == COMPARATORS[name][3]


@pytest.mark.parametrize("name,rows,n", [("top_k", 3, 5000), ("jnp_sort", 2, 6000), ("s32_param", 2, 4500),
                                         ("bits", 1, 9000), ("totalorder", 2, 4700)])
def test_step_kernels_keep_every_bit(name, rows, n):
    """Rows longer than one tile (tiled and global launches): the sorted keys (NaN payloads and signed zeros
    included) and positions bit for bit the evaluator's; an operand read back from its key is neither held
    through the network nor gathered."""
    inst, em, emitted = _emitted(_module(name, rows, n))
    assert len(emitted.kernels) > 2
    later = next(k for k in emitted.kernels[1:] if "TILE" in k.constexprs)
    assert ("tl.gather(v" not in later.source) == (COMPARATORS[name][3] is not None)
    rng = np.random.default_rng(rows * n)
    _bits_equal(emitted, inst, [_edge_values(COMPARATORS[name][0], (rows, n), rng)])


def _two_key_module(n: int) -> str:
    """Keys f32 (XLA's total order) then s8, both descending, with four f32 payloads (24 bytes an element:
    a 2048-element tile): 32 + 8 key bits, 13 position bits and 11 lane bits fill the 64-bit key."""
    types = ["f32", "s8", "f32", "f32", "f32", "f32"]
    cmp_params = "\n".join(f"  q{i} = {t}[] parameter({i})" for i, t in enumerate(t for t in types for _ in (0, 1)))
    params = "\n".join(f"  x{i} = {t}[{n}] parameter({i})" for i, t in enumerate(types))
    xs = ", ".join(f"x{i}" for i in range(len(types)))
    out = ", ".join(f"{t}[{n}]" for t in types)
    return f"""HloModule m
cmp {{
{cmp_params}
{_total_order("q0", "q1")}
  g = pred[] compare(k0, k1), direction=GT
  e = pred[] compare(k0, k1), direction=EQ
  g2 = pred[] compare(q2, q3), direction=GT
  a = pred[] and(e, g2)
  ROOT r = pred[] or(g, a)
}}
fused {{
{params}
  ROOT s = ({out}) sort({xs}), dimensions={{0}}, is_stable=true, to_apply=cmp
}}
ENTRY e {{
{params}
  ROOT f = ({out}) fusion({xs}), kind=kSort, calls=fused
}}
"""


@pytest.mark.parametrize("n", [5000, 8192])
def test_lane_fills_the_last_bits_of_the_key(n):
    """The lane takes the key's last two bits (64 bits: top bit flipped for ``int64`` order), so no second
    tensor carries it through the network; ties (duplicate keys) keep the stable order. 8192 elements: a
    power of two, whose tiles hold no padding lane (a full key may equal the pad's bits)."""
    inst, em, emitted = _emitted(_two_key_module(n))
    later = next(k for k in emitted.kernels[1:] if "TILE" in k.constexprs)
    assert later.constexprs["TILE"] == 2048 and "ln = " not in later.source
    assert "-9223372036854775808" in later.source
    rng = np.random.default_rng(n)
    x = _edge_values("f32", (n,), rng)
    x[rng.random(n) < 0.3] = 1.0  # many ties on the first key
    y = rng.integers(-3, 3, n).astype(np.int8)
    pay = [rng.standard_normal(n).astype(np.float32) for _ in range(4)]
    _bits_equal(emitted, inst, [x, y, *pay])


def test_global_step_is_xla_unrolled_loop():
    """A global step program: XLA's block of threads, each doing ``U = 4`` pairs one after another (the
    sub-steps), its buffers addressed from 64-bit scalars (one base register a buffer, partners at an
    immediate) and stored only where the pair exchanges, as XLA's kernel does."""
    _, em, emitted = _emitted(_module("top_k", 8, 50257))
    steps = [k for k in emitted.kernels if "M" in k.constexprs]
    assert steps and all(k.constexprs["BLOCK"] == k.launch.threads3[0] == 128 and k.constexprs["U"] == 4
                         for k in steps)
    src = steps[0].source
    assert "for u in tl.static_range(U):" in src and "mask=swap)" in src and "iu.to(tl.int64)" in src
