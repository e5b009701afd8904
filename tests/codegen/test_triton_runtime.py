"""The Triton runtime: numpy adapter round trips, interpreter rounding, sm_90 compilation without a GPU,
kernel loading from files, and hostile HLO names never reaching generated source raw."""

from __future__ import annotations

import ast

import ml_dtypes
import numpy as np
import pytest

from fusion_harness import load, loop_fusions, operands_and_reference, run_and_compare

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime, triton_source
from fusegen.codegen.kernel import EmittedFusion, KernelParam, KernelSource, LaunchDimensions
from fusegen.hlo.ir import Computation, Instruction, Shape
from fusegen_plugins.emitters.loop import LoopFusion

_COPY_SRC = """\
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x, y, BLOCK: tl.constexpr, N: tl.constexpr):
    lin = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = lin < N
    tl.store(y + lin, tl.load(x + lin, mask=mask), mask=mask)
"""


def _copy_kernel(et: str, n: int, block: int = 64, tag: str = "") -> KernelSource:
    s = Shape(et, (n,))
    return KernelSource(name="copy_kernel", source=_COPY_SRC + f"# {et} {tag}\n", entry="copy_kernel",
                        params=(KernelParam("operand", 0, s), KernelParam("output", 0, s)),
                        constexprs={"BLOCK": block, "N": n},
                        launch=LaunchDimensions(grid=(-(-n // block),), num_warps=2))


@pytest.mark.parametrize("et", ["f32", "f16", "bf16", "f64", "s8", "u16", "s32", "s64", "u64", "pred",
                                "f8e4m3fn", "f8e5m2", "s4"])
def test_adapter_round_trips_every_storage_type(et):
    from fusegen.hlo import dtypes

    n = 100
    rng = np.random.default_rng(0)
    if et == "pred":
        x = rng.random(n) < 0.5
    elif et in ("s4",):
        x = rng.integers(-8, 8, n).astype(ml_dtypes.int4)
    elif dtypes.is_integral(et):
        info = np.iinfo(dtypes.numpy_dtype(et))
        x = rng.integers(info.min, info.max, n, dtype=dtypes.numpy_dtype(et), endpoint=True)
    else:
        x = (rng.standard_normal(n) * 10).astype(dtypes.numpy_dtype(et))
    ks = _copy_kernel(et, n)
    xb = triton_runtime.to_storage(x, et)
    yb = np.zeros_like(xb)
    triton_runtime.run_interpreted(ks, [xb, yb])
    y = triton_runtime.from_storage(yb, et)
    assert y.dtype == np.asarray(x).dtype
    assert np.asarray(x).tobytes() == y.tobytes()
    # through run_fusion too (logical values in, logical values out)
    out = triton_runtime.run_fusion(EmittedFusion("copy", kernels=(ks,)), [x], ([Shape(et, (n,))], Shape(et, (n,))))
    assert out[0].tobytes() == np.asarray(x).tobytes()


def test_interpreter_rounds_f32_to_bf16_to_nearest_even():
    src = """\
import triton
import triton.language as tl


@triton.jit
def round_kernel(x, y, BLOCK: tl.constexpr, N: tl.constexpr):
    lin = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = lin < N
    v = tl.load(x + lin, mask=mask, other=0)
    tl.store(y + lin, v.to(tl.bfloat16), mask=mask)
"""
    vals = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, 1.9999999, 3.0 - 2**-9, -(1 + 3 * 2**-8),
                     65535.0, 1e-40, np.inf, -0.0, 0.04468, 255.5], dtype=np.float32)
    n = vals.size
    ks = KernelSource(name="round_kernel", source=src, entry="round_kernel",
                      params=(KernelParam("operand", 0, Shape("f32", (n,))), KernelParam("output", 0, Shape("bf16", (n,)))),
                      constexprs={"BLOCK": 16, "N": n}, launch=LaunchDimensions((1,)))
    out = np.zeros(n, dtype=ml_dtypes.bfloat16)
    triton_runtime.run_interpreted(ks, [vals, out])
    np.testing.assert_array_equal(out.view(np.uint16), vals.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_scalar_launches_and_shared_scratch_in_run_fusion():
    """The generic facility: one kernel launched with several scalar tuples over one scratch buffer."""
    src = '''import triton
import triton.language as tl

@triton.jit
def k(acc, out, A, B, BLOCK: tl.constexpr):
    lane = tl.arange(0, BLOCK)
    v = tl.load(acc + lane)
    tl.store(acc + lane, v * A + B)
    tl.store(out + lane, v * A + B)
'''
    s32 = Shape("s32", (8,))
    ks = KernelSource(name="k", source=src, entry="k", params=(KernelParam("scratch", 0, s32), KernelParam("output", 0, s32)),
                      constexprs={"BLOCK": 8}, launch=LaunchDimensions((1,)), scalar_types=("i32", "i32"),
                      scalar_launches=((1, 1), (3, 0), (1, 2)))
    # both kernels share scratch 0: ((0 + 1) * 3 + 2) then ((5 * 1 + 1) * 3 + 2)
    out = triton_runtime.run_fusion(EmittedFusion("t", kernels=(ks, ks)), [], ([], s32))
    np.testing.assert_array_equal(out[0], np.full(8, 20, np.int32))
    r = triton_runtime.compile_for_target(ks)
    assert ".target sm_90a" in r.ptx


def test_interpreter_bool_logic_keeps_one_bit_semantics():
    """``&``, ``|``, ``^`` of int1 tensors take numpy's boolean ops in the interpreter; ``+`` still wraps."""
    src = '''import triton
import triton.language as tl

@triton.jit
def k(a, b, o, BLOCK: tl.constexpr):
    lane = tl.arange(0, BLOCK)
    x = tl.load(a + lane) != 0
    y = tl.load(b + lane) != 0
    tl.store(o + lane, (x & y).to(tl.int8) + 2 * (x | y).to(tl.int8) + 4 * (x ^ y).to(tl.int8)
             + 8 * (x + y).to(tl.int8))
'''
    u8 = Shape("u8", (4,))
    ks = KernelSource(name="k", source=src, entry="k", params=(KernelParam("operand", 0, u8), KernelParam("operand", 1, u8),
                      KernelParam("output", 0, Shape("s8", (4,)))), constexprs={"BLOCK": 4})
    a, b = np.array([0, 0, 1, 1], np.uint8), np.array([0, 1, 0, 1], np.uint8)
    out = triton_runtime.run_fusion(EmittedFusion("t", kernels=(ks,)), [a, b], ([u8, u8], Shape("s8", (4,))))
    x, y = a != 0, b != 0
    want = (x & y) + 2 * (x | y) + 4 * (x ^ y) + 8 * ((a + b) % 2)
    np.testing.assert_array_equal(out[0], want.astype(np.int8))


def test_compile_for_sm90_without_gpu():
    ks = _copy_kernel("f32", 1000, block=256, tag="compile")
    r = triton_runtime.compile_for_target(ks, capability=90)
    assert ".target sm_90a" in r.ptx
    assert ".entry copy_kernel" in r.ptx
    assert r.cubin_bytes > 0 and r.num_warps == 2 and r.shared_bytes >= 0 and r.seconds > 0
    again = triton_runtime.compile_for_target(ks, capability=90)
    assert again.seconds == 0.0 and again.ptx == r.ptx
    r80 = triton_runtime.compile_for_target(ks, capability=80)
    assert ".target sm_80" in r80.ptx


def test_load_kernel_imports_from_a_file_named_by_hash():
    ks = _copy_kernel("f32", 10, tag="load")
    fn1 = triton_runtime.load_kernel(ks)
    fn2 = triton_runtime.load_kernel(ks)
    assert fn1 is fn2
    path = triton_runtime.kernel_dir() / f"k_{triton_runtime.source_hash(ks)}.py"
    assert path.read_text() == ks.source
    bad = KernelSource(name="x", source=ks.source, entry="copy_kernel; import os", params=ks.params)
    with pytest.raises(ValueError):
        triton_runtime.load_kernel(bad)


@pytest.mark.parametrize("name", ["%foo.1", 'x"""; import os #', "a\nb", "ü名前", "'q'", "def", "lin", "1abc",
                                  "", "__class__", "tl", "BLOCK", "a b\tc\r", "\\x00"])
def test_sanitize_identifier_always_gives_safe_ascii_identifiers(name):
    s = triton_source.sanitize_identifier(name)
    assert s.isidentifier() and s.isascii()
    assert s not in triton_source.RESERVED
    import keyword

    assert not keyword.iskeyword(s)


def test_name_allocator_keeps_colliding_names_apart():
    na = triton_source.NameAllocator()
    names = [na.fresh(n) for n in ["a.1", "a_1", "a-1", "a.1"]]
    assert len(set(names)) == 4


HOSTILE = ['x"""; import os; os.system("echo pwned") #', "n\nprint('pwned')", "ü名前.1", "'quote'\\",
           "lin", "BLOCK", "a.1", "a_1"]


def _hostile_fusion() -> Instruction:
    s = Shape("f32", (37,))
    p0 = Instruction(name=HOSTILE[0], opcode="parameter", shape=s, attrs={"parameter_number": 0})
    p1 = Instruction(name=HOSTILE[1], opcode="parameter", shape=s, attrs={"parameter_number": 1})
    neg = Instruction(name=HOSTILE[2], opcode="negate", shape=s, operands=[p0])
    add = Instruction(name=HOSTILE[3], opcode="add", shape=s, operands=[neg, p1])
    c = Instruction(name=HOSTILE[4], opcode="constant", shape=Shape("f32", ()), attrs={"literal": "2.5"})
    b = Instruction(name=HOSTILE[5], opcode="broadcast", shape=s, operands=[c], attrs={"dimensions": ()})
    m1 = Instruction(name=HOSTILE[6], opcode="multiply", shape=s, operands=[add, b])
    m2 = Instruction(name=HOSTILE[7], opcode="subtract", shape=s, operands=[m1, p0])
    comp = Computation(name='comp"""\n', instructions=[p0, p1, neg, add, c, b, m1, m2], root=m2)
    e0 = Instruction(name="e0", opcode="parameter", shape=s, attrs={"parameter_number": 0})
    e1 = Instruction(name="e1", opcode="parameter", shape=s, attrs={"parameter_number": 1})
    return Instruction(name='fusion"""\nimport os\n', opcode="fusion", shape=s, operands=[e0, e1],
                       attrs={"kind": "kLoop", "calls": comp})


def test_hostile_names_never_reach_generated_source():
    fusion = _hostile_fusion()
    emitted = LoopFusion(FusionAnalysis.create(fusion)).emit()
    (ks,) = emitted.kernels
    src = ks.source
    assert src.isascii()
    ast.parse(src)
    for bad in ('"""', 'os.system("echo', "print('pwned')", "import os", "'quote'", "名前", "ü"):
        assert bad not in src, bad
    assert "'" not in src and '"' not in src.replace('"""', "")  # no string literals at all
    assert ks.entry.isidentifier() and ks.name.isidentifier()
    x = np.linspace(-3, 3, 37).astype(np.float32)
    y = np.cos(np.arange(37)).astype(np.float32)
    (out,) = triton_runtime.run_fusion(emitted, [x, y], fusion)
    np.testing.assert_allclose(out, (-x + y) * np.float32(2.5) - x, rtol=1e-6)
    r = triton_runtime.compile_for_target(ks)
    assert ".target sm_90a" in r.ptx


def test_special_float_constants_are_exact():
    text = """
HloModule t
fused {
  p = f32[6] parameter(0)
  a = f32[] constant(-inf)
  b = f32[] constant(nan)
  c = f32[] constant(-0.0)
  d = bf16[] constant(0.04468)
  e = f64[] constant(0.1)
  ab = f32[6] broadcast(a), dimensions={}
  bb = f32[6] broadcast(b), dimensions={}
  cb = f32[6] broadcast(c), dimensions={}
  db = bf16[6] broadcast(d), dimensions={}
  eb = f64[6] broadcast(e), dimensions={}
  m = f32[6] maximum(p, ab)
  ROOT t = (f32[6], f32[6], f32[6], bf16[6], f64[6]) tuple(m, bb, cb, db, eb)
}
ENTRY main {
  p = f32[6] parameter(0)
  ROOT f = (f32[6], f32[6], f32[6], bf16[6], f64[6]) fusion(p), kind=kLoop, calls=fused
}
"""
    m = load(text)
    (f,) = loop_fusions(m)
    p = np.array([1, -np.inf, np.nan, 0, -2, 3], dtype=np.float32)
    ops, ref = operands_and_reference(m, f, args=[p])
    _, outs = run_and_compare(f, ops, ref)
    assert np.all(np.isnan(outs[1]))
    assert np.all(np.signbit(outs[2])) and np.all(outs[2] == 0)
    assert outs[3].view(np.uint16)[0] == np.asarray(0.04468, dtype=ml_dtypes.bfloat16).view(np.uint16)
    assert outs[4][0] == 0.1
    src = LoopFusion(FusionAnalysis.create(f)).emit().kernels[0].source
    assert "bitcast=True" in src  # non-finite and -0.0 built from bit patterns


def test_array_constants_are_buffers_not_pasted():
    text = """
HloModule t
fused {
  p = s32[4,3] parameter(0)
  c = s32[4,3] constant({{1,2,3},{4,5,6},{7,8,9},{10,11,123456789}})
  ROOT a = s32[4,3] add(p, c)
}
ENTRY main {
  p = s32[4,3] parameter(0)
  ROOT f = s32[4,3] fusion(p), kind=kLoop, calls=fused
}
"""
    m = load(text)
    (f,) = loop_fusions(m)
    emitted = LoopFusion(FusionAnalysis.create(f)).emit()
    (ks,) = emitted.kernels
    assert "123456789" not in ks.source
    assert [p.kind for p in ks.params].count("constant") == 1
    ops, ref = operands_and_reference(m, f)
    run_and_compare(f, ops, ref, emitted)


def test_interpreter_widening_keeps_results_and_launch():
    ks = _copy_kernel("f32", 5000, block=64, tag="widen")
    grid, cx = triton_runtime._widened(ks, 4)
    assert grid[0] <= 4 and cx["BLOCK"] * grid[0] >= 5000 and cx["N"] == 5000
    x = np.arange(5000, dtype=np.float32)
    y = np.zeros_like(x)
    triton_runtime.run_interpreted(ks, [x, y], max_programs=4)
    np.testing.assert_array_equal(x, y)
    assert ks.launch.grid == (79,)  # the emitted launch is untouched
