"""fusegen.hlo.parser on the shared corpus, checked against jaxlib's C++ HLO parser (xla/hlo/parser/hlo_parser.cc)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fusegen.hlo.errors import HloParseError
from fusegen.hlo.ir import Computation, Layout, Shape
from fusegen.hlo.literal import format_literal, parse_literal
from fusegen.hlo.opcodes import KNOWN_OPCODES, is_known_opcode
from fusegen.hlo.parser import parse_file, parse_module, parse_modules

SHARED = Path(__file__).parents[2].parent / "shared"
CORPUS = SHARED / "corpus"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"shared corpus not found at {CORPUS}")

# Files that are invalid on purpose (bugs/INDEX.md B01, B02); tested in test_hlo_parse_errors.py.
INVALID = {"B01.hlo", "B02.hlo"}


def corpus_files() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    files = sorted(CORPUS.rglob("*.hlo"))
    files += sorted((CORPUS / "jax" / "xla_dump_h200").glob("*optimizations.txt"))
    return [p for p in files if "hostile" not in p.relative_to(CORPUS).parts]  # refused on purpose: test_hostile


def _id(p: Path) -> str:
    return str(p.relative_to(CORPUS)) if CORPUS in p.parents else p.name


VALID = [p for p in corpus_files() if p.name not in INVALID]

# jaxlib's parser segfaults on some inputs (B01 is one), so it runs in a child process that is restarted past a
# crashing file.
_JAXLIB_CHILD = r"""
import json, sys
from jaxlib import _hlo
for path in sys.stdin.read().split("\n"):
    if not path:
        continue
    print(json.dumps({"file": path, "start": True}), flush=True)
    try:
        m = _hlo.hlo_module_from_text(open(path).read())
        counts = [[c.name, len(c.instructions())] for c in m.computations()]
        print(json.dumps({"file": path, "ok": True, "counts": counts}), flush=True)
    except Exception as e:
        print(json.dumps({"file": path, "ok": False, "error": str(e)[:500]}), flush=True)
"""


def jaxlib_parse(paths: list[Path]) -> dict[str, dict] | None:
    """{path: {"ok": bool, "counts": [[computation, n_instructions], ...]}}; None when jaxlib is unusable."""
    try:
        import jaxlib._hlo  # noqa: F401
    except Exception:
        return None
    todo = [str(p) for p in paths]
    out: dict[str, dict] = {}
    while todo:
        r = subprocess.run([sys.executable, "-c", _JAXLIB_CHILD], input="\n".join(todo), capture_output=True,
                           text=True, timeout=600)
        started = None
        for line in r.stdout.splitlines():
            rec = json.loads(line)
            if rec.get("start"):
                started = rec["file"]
            else:
                out[rec["file"]] = rec
                started = None
        if r.returncode != 0:
            if started is None:
                return None
            out[started] = {"ok": False, "crashed": True}
        todo = [p for p in todo if p not in out]
        if r.returncode == 0:
            break
    return out


@pytest.fixture(scope="module")
def jaxlib_results():
    res = jaxlib_parse(VALID)
    if res is None:
        pytest.skip("jaxlib's HLO parser (jaxlib._hlo) is not importable")
    return res


# ------------------------------------------------------------------------------------------ corpus
@needs_corpus
@pytest.mark.parametrize("path", VALID, ids=_id)
def test_corpus_file_parses(path: Path):
    mods = parse_modules(path.read_text(), str(path))
    assert mods
    for m in mods:
        assert m.entry is not None and m.entry.is_entry
        assert m.entry in m.computations
        assert sum(c.is_entry for c in m.computations) == 1
        names = [c.name for c in m.computations]
        assert len(names) == len(set(names))
        for c in m.computations:
            assert c.root is not None and c.root in c.instructions
            inames = [i.name for i in c.instructions]
            assert len(inames) == len(set(inames)), c.name
            ids = {id(i) for i in c.instructions}
            for i in c.instructions:
                assert i.parent is c
                assert is_known_opcode(i.opcode)
                assert i.shape is not None
                assert all(id(o) in ids for o in i.operands), i.name
                for cc in i.called_computations:
                    assert cc in m.computations
                if i.opcode == "parameter":
                    assert isinstance(i.attrs["parameter_number"], int)
                if i.opcode == "constant":
                    assert "literal" in i.attrs


@needs_corpus
def test_corpus_is_complete():
    # 349 .hlo files plus the two after/before-optimization dump pairs
    assert len(corpus_files()) >= 353
    assert len(VALID) == len(corpus_files()) - 2


@needs_corpus
def test_instruction_counts_match_jaxlib(jaxlib_results):
    compared = 0
    for path in VALID:
        rec = jaxlib_results.get(str(path))
        if not rec or not rec.get("ok"):
            continue  # jaxlib rejects split-input lit files
        (m,) = parse_modules(path.read_text(), str(path))
        # XLA's parser wraps an async collective's sugar (`all-to-all-start(...)`) in an `async_wrapped`
        # computation it makes itself; fusegen keeps the op as printed
        theirs = {name: n for name, n in rec["counts"] if not name.startswith("async_wrapped")}
        synthesized = m.attrs.get("fusegen.synthesized_entry") == "true"
        mine = {c.name: len(c.instructions) for c in m.computations if not (synthesized and c is m.entry)}
        # XLA names inline `to_apply={...}` bodies `_`; fusegen names them `<instruction>.<attr>`.
        inline_theirs = sorted(n for name, n in theirs.items() if name not in mine)
        inline_mine = sorted(n for name, n in mine.items() if name not in theirs)
        assert {k: v for k, v in theirs.items() if k in mine} == {k: v for k, v in mine.items() if k in theirs}, path
        assert inline_theirs == inline_mine, path
        compared += 1
    # all but the four split-input module files (and B01/B02) are accepted by jaxlib
    assert compared >= len(VALID) - 4


@needs_corpus
def test_split_input_files():
    path = CORPUS / "xla" / "modules" / "backends__gpu__tests__single_instruction.hlo"
    text = path.read_text()
    mods = parse_modules(text, str(path))
    assert len(mods) == text.count("// -----") + 1 == 9
    assert all(m.name for m in mods)
    with pytest.raises(HloParseError) as ei:
        parse_module(text, str(path))
    assert "parse_modules" in ei.value.message
    assert ei.value.line == text[: text.index("// -----")].count("\n") + 1


@needs_corpus
def test_gpt12_structure_and_speed():
    path = CORPUS / "jax" / "gpt12.h200_opt.hlo"
    text = path.read_text()
    t0 = time.perf_counter()
    m = parse_module(text, str(path))
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.0, f"gpt12 took {elapsed:.3f}s"
    assert m.name == "jit_gpt"
    assert m.attrs["is_scheduled"] == "true"
    assert m.attrs["entry_computation_layout"].startswith("{(s32[4,128]{1,0}")
    assert [s.splitlines()[0] for s in m.extra_sections] == ["FileNames", "FunctionNames", "FileLocations",
                                                             "StackFrames"]
    assert m.extra_sections[0].splitlines()[1] == '1 "gpt.py"'
    assert m.entry.name == "main.78"
    assert len(m.entry.parameters) == 98
    root = m.entry.root
    assert root.name == "triton_softmax.74"
    assert root.shape == Shape("f32", (4, 128, 8192), Layout((2, 1, 0)))
    assert root.attrs["kind"] == "kCustom"
    assert isinstance(root.attrs["calls"], Computation)
    assert root.attrs["calls"].name == "triton_softmax_computation.74"
    assert root.fusion_backend_kind == "__triton"
    assert root.attrs["metadata"] == {"scheduling_name": "triton_softmax.74"}
    gemm = m.entry.instruction("gemm_fusion_dot.72")
    assert gemm.attrs["metadata"]["stack_frame_id"] == 9
    assert gemm.attrs["metadata"]["op_name"] == "jit(gpt)/dot_general"
    assert [o.name for o in gemm.operands] == ["bitcast.810.0", "bitcast.809.0"]
    assert gemm.line == text[: text.index("%gemm_fusion_dot.72 = ")].count("\n") + 1


@needs_corpus
def test_entryless_fused_computation_is_wrapped():
    path = CORPUS / "xla" / "cases" / "lit_gpu__transpose__packed_transpose_side_output.hlo"
    m = parse_file(path)
    assert m.attrs["fusegen.synthesized_entry"] == "true"
    fused = m.computation("fusion")
    assert not fused.is_entry
    entry = m.entry
    assert entry.name == "main" and entry.is_entry and entry is m.computations[-1]
    assert [p.name for p in entry.parameters] == ["p0"]
    assert entry.parameters[0].shape == Shape("f16", (1, 2, 128, 4, 32))
    root = entry.root
    assert root.opcode == "fusion" and root.name == "fusion"
    assert root.attrs["kind"] == "kLoop"
    assert root.fused_computation is fused
    assert root.shape == fused.root.shape
    assert root.shape.tuple_shapes == (Shape("f16", (2, 128, 128)), Shape("f16", (2, 4, 128, 32)))
    t2 = fused.instruction("transpose2")
    assert t2.attrs["dimensions"] == (0, 2, 1, 3)
    assert t2.operands[0].name == "bitcast2"


@needs_corpus
def test_entryless_caller_is_entry():
    path = CORPUS / "xla" / "cases" / "cudnn__DotS4BF16ExecutesCorrectly.hlo"
    m = parse_file(path)
    assert "fusegen.synthesized_entry" not in m.attrs
    assert m.entry.name == "e"
    f = m.entry.instruction("f")
    assert f.fused_computation is m.computation("f")
    # relaxed JSON (bare keys) in backend_config still becomes a dict
    assert f.backend_config == {"fusion_backend_config": {"kind": "__cudnn$fusion"}}
    d = m.computation("f").root
    assert d.attrs["lhs_batch_dims"] == (0,) and d.attrs["rhs_contracting_dims"] == (1,)


@needs_corpus
def test_inline_computation_and_inline_operands():
    m = parse_file(CORPUS / "xla" / "cases" / "lit_triton__normalization__bitcast_reduce_broadcast.hlo")
    red = next(i for i in m.all_instructions() if i.opcode == "reduce")
    body = red.attrs["to_apply"]
    assert isinstance(body, Computation) and body in m.computations
    assert body.root.opcode == "maximum" and len(body.parameters) == 2
    m = parse_modules((CORPUS / "xla" / "modules" / "backends__gpu__tests__pdl.hlo").read_text())[0]
    e = m.computation("e")  # a lone computation: wrapped into a synthesized kLoop fusion
    assert m.entry.root.fused_computation is e
    a = e.instruction("a")
    assert a.opcode == "exponential"
    (p,) = a.operands
    assert p.opcode == "parameter" and p.shape == Shape("f32") and p in e.instructions
    assert e.instructions.index(p) < e.instructions.index(a)


@needs_corpus
def test_shapeless_tuple_is_inferred():
    m = parse_file(CORPUS / "xla" / "cases" / "lit_gpu__scatter__variadic_scatter_simple.hlo")
    root = next(c for c in m.computations if c.root.name == "override").root
    assert root.shape.tuple_shapes == tuple(o.shape for o in root.operands)


@needs_corpus
def test_attribute_forms():
    m = parse_modules((CORPUS / "xla" / "modules" / "backends__gpu__tests__pdl.hlo").read_text())[2]
    rw = next(i for i in m.all_instructions() if i.opcode == "reduce-window")
    assert rw.attrs["window"] == {"size": (1, 11), "pad": [(0, 0), (10, 0)]}
    assert rw.attrs["to_apply"].name == "add_region"
    cmp = next(i for i in m.all_instructions() if i.name == "mask")
    assert cmp.attrs["direction"] == "NE" and cmp.shape.element_type == "pred"
    m = parse_module(_MISC)
    e = m.entry
    assert e.instruction("s").attrs["slice"] == [(0, 8, 2), (1, 3, 1)]
    assert e.instruction("pd").attrs["padding"] == [(0, 0, 0), (1, 2, 1)]
    conv = e.instruction("conv")
    assert conv.attrs["window"] == {"size": (3, 3), "stride": (1, 1), "pad": [(1, 1), (1, 1)],
                                    "rhs_reversal": (0, 1)}
    assert conv.attrs["dim_labels"] == "b01f_01io->b01f"
    assert conv.attrs["feature_group_count"] == 1
    assert e.instruction("gte").attrs["index"] == 1
    cc = e.instruction("cc")
    assert cc.attrs["custom_call_target"] == "my$target"
    assert cc.backend_config == {"a": 1}
    assert cc.attrs["api_version"] == "API_VERSION_STATUS_RETURNING"
    assert cc.attrs["output_to_operand_aliasing"] == "{{}: (0, {})}"
    assert cc.attrs["frontend_attributes"] == {"_xla_stream": "1", "k": "v w"}
    assert cc.attrs["control-predecessors"] == ["gte"]
    assert cc.attrs["sharding"] == "{devices=[2,1]<=[2]}"
    srt = e.instruction("srt")
    assert srt.attrs["is_stable"] is True and srt.attrs["dimensions"] == (0,)
    assert e.instruction("bc").attrs["backend_config"] == "not json"
    assert e.instruction("cst").attrs["literal"] == "{ {1, 2}, {3, 4} }"
    assert e.instruction("el").attrs["literal"] is None
    p = e.parameters[0]
    assert p.shape.layout == Layout((1, 0), ((8, 128), (2, 1)), 1, ())
    assert e.parameters[1].shape == Shape("f32", (4, 8), None, None, (True, False))
    assert e.parameters[2].shape.layout.extra == ("E(4)",)
    q = e.parameters[3].shape
    assert q.is_tuple and q.tuple_shapes[1].tuple_shapes == (Shape("s32"), Shape("pred"))
    cond = e.instruction("cond")
    assert [c.name for c in cond.attrs["branch_computations"]] == ["first", "first"]
    assert m.computation("add").root.name == "r"


_MISC = """
// leading comment
HloModule misc, is_scheduled=true /* c */

add /* a comment */ {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(f32[] a, b)  // trailing comment
}

first {  // a conditional branch: one parameter, the operand's shape (the verifier checks it)
  t = (f32[], (s32[], pred[])) parameter(0)
  ROOT g = f32[] get-tuple-element(t), index=0
}

ENTRY %main (p0: f32[8,256], p1: f32[<=4,8], p2: s4[2,2], p3: (f32[], (s32[], pred[])), x: f32[1,6,6,1],
             w: f32[3,3,1,1], i: s32[]) -> f32[2,2] {
  p0 = f32[8,256]{1,0:T(8,128)(2,1)S(1)} parameter(0)
  p1 = f32[<=4, 8] parameter(1)
  p2 = s4[2,2]{1,0:E(4)} parameter(2)
  p3 = (f32[], (s32[], pred[])) parameter(3)
  x = f32[1,6,6,1] parameter(4)
  w = f32[3,3,1,1] parameter(5)
  i = s32[] parameter(6)
  s = f32[4,2] slice(p0), slice={[0:8:2], [1:3]}
  pd = f32[8,261] pad(p0, f32[] constant(0)), padding=0_0x1_2_1
  conv = f32[1,6,6,1] convolution(x, w), window={size=3x3 stride=1x1 pad=1_1x1_1 rhs_reversal=0x1},
    dim_labels=b01f_01io->b01f, feature_group_count=1
  gte = (s32[], pred[]) get-tuple-element(p3), index=1
  cc = f32[2] custom-call(s), custom_call_target="my$target", api_version=API_VERSION_STATUS_RETURNING,
    backend_config={"a":1}, output_to_operand_aliasing={{}: (0, {})}, sharding={devices=[2,1]<=[2]},
    frontend_attributes={_xla_stream="1",k="v w"}, control-predecessors={%gte}
  srt = f32[8] sort(f32[8] constant({1,2,3,4,5,6,7,8})), dimensions={0}, is_stable=true, to_apply=add
  bc = f32[2] custom-call(), custom_call_target="t", backend_config="not json"
  cst = s32[2,2] constant({ {1, 2}, {3, 4} })
  el = f32[100] constant({...})
  cond = f32[] conditional(i, p3, p3), branch_computations={%first, first}
  ROOT out = tuple(cc, /*index=1*/ cc)
}
"""


def test_misc_grammar_roundtrips_literals():
    m = parse_module(_MISC)
    e = m.entry
    np.testing.assert_array_equal(parse_literal(e.instruction("cst").attrs["literal"], e.instruction("cst").shape),
                                  np.array([[1, 2], [3, 4]], dtype=np.int32))
    with pytest.raises(ValueError, match="elided"):
        parse_literal(e.instruction("el").attrs["literal"], e.instruction("el").shape)


# ------------------------------------------------------------------------------------------ literals
@pytest.mark.parametrize(
    "text, etype, dims, expected",
    [
        ("0", "f32", (), np.float32(0)),
        ("-inf", "bf16", (), -np.inf),
        ("nan", "f32", (), np.nan),
        ("true", "pred", (), True),
        ("{ {1,2},{3,4} }", "s32", (2, 2), [[1, 2], [3, 4]]),
        ("{{1}, {3}, {5}}", "s32", (3, 1), [[1], [3], [5]]),
        ("{-2, -3, -4}", "s4", (3,), [-2, -3, -4]),
        ("{(2.0, 0.0), (0.0, 2.0)}", "c64", (2,), [2 + 0j, 2j]),
        ("0x1F", "u8", (), 31),
        ("-1000000000000", "s64", (), -10**12),
        ("18446744073709551615", "u64", (), 2**64 - 1),
        ("1.001e-05", "bf16", (), 1.0013580322265625e-05),
        ("0", "f32", (2, 3), np.zeros((2, 3))),
        ("448", "f8e4m3fn", (), 448.0),
    ],
)
def test_parse_literal(text, etype, dims, expected):
    shape = Shape(etype, dims)
    arr = parse_literal(text, shape)
    from fusegen.hlo.dtypes import numpy_dtype

    assert arr.dtype == numpy_dtype(etype)
    assert arr.shape == dims
    exp = np.asarray(expected, dtype=np.float64 if etype.startswith(("f", "bf")) else None)
    if arr.dtype.kind in "fc" or etype.startswith(("bf", "f8")):
        np.testing.assert_array_equal(np.asarray(arr, dtype=np.complex128 if etype.startswith("c") else np.float64),
                                      exp)
    else:
        np.testing.assert_array_equal(arr.astype(np.int64) if etype != "u64" else arr, exp)
    again = parse_literal(format_literal(arr, shape), shape)
    np.testing.assert_array_equal(np.asarray(again, dtype=np.float64 if arr.dtype.kind != "c" else np.complex128),
                                  np.asarray(arr, dtype=np.float64 if arr.dtype.kind != "c" else np.complex128))


@pytest.mark.parametrize(
    "text, etype, dims, match",
    [(None, "f32", (), "elided"), ("{1,2}", "f32", (3,), "2 values"), ("256", "u8", (), "out of range"),
     ("1.5", "s32", (), "integer"), ("{1,2", "f32", (2,), "unbalanced"), ("(1, 2)", "f32", (), "complex")],
)
def test_parse_literal_errors(text, etype, dims, match):
    with pytest.raises(ValueError, match=match):
        parse_literal(text, Shape(etype, dims))


def test_tuple_literal():
    shape = Shape("tuple", (), None, (Shape("s32", (2,)), Shape("f32")))
    a, b = parse_literal("( {1, 2}, 3.5 )", shape)
    assert a.tolist() == [1, 2] and float(b) == 3.5
    assert format_literal((a, b), shape) == "({1, 2}, 3.5)"


# ------------------------------------------------------------------------------------------ opcodes
_OPCODE_CHILD = r"""
import json, sys
from jaxlib import _hlo
for op in sys.stdin.read().split():
    print(json.dumps({"op": op, "start": True}), flush=True)
    t = "HloModule m\nENTRY e {\n a = s32[4] parameter(0)\n ROOT c = s32[4] %s(a)\n}\n" % op
    try:
        _hlo.hlo_module_from_text(t)
        err = ""
    except Exception as e:
        err = str(e)
    print(json.dumps({"op": op, "unknown": "expects opcode" in err}), flush=True)
"""


def test_known_opcodes_are_xla_spellings():
    try:
        import jaxlib._hlo  # noqa: F401
    except Exception:
        pytest.skip("jaxlib's HLO parser is not importable")
    todo = sorted(KNOWN_OPCODES) + ["clz", "optimization-barrier"]
    verdict: dict[str, bool] = {}
    stalls = 0
    while todo:
        try:
            r = subprocess.run([sys.executable, "-c", _OPCODE_CHILD], input=" ".join(todo), capture_output=True,
                               text=True, timeout=120)
            out, rc = r.stdout, r.returncode
        except subprocess.TimeoutExpired as e:  # a child that hangs is killed; its lines so far still count
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            rc = -1
        started, done = None, 0
        for line in out.splitlines():
            rec = json.loads(line)
            if rec.get("start"):
                started = rec["op"]
            else:
                verdict[rec["op"]] = not rec["unknown"]
                started, done = None, done + 1
        if rc != 0 and started is not None:
            verdict[started] = True  # jaxlib crashed or hung building it: the opcode itself was recognised
        elif rc != 0 and not done:
            stalls += 1  # the child stopped before its first opcode (its start-up, not an opcode)
            if stalls == 3:
                pytest.skip("jaxlib's HLO parser child stopped at start-up three times (the environment)")
        todo = [o for o in todo if o not in verdict]
        if rc == 0:
            break
    unknown = sorted(o for o in KNOWN_OPCODES if not verdict.get(o, False))
    assert unknown == []
    # spellings that are NOT opcodes must be rejected by both parsers
    assert verdict["clz"] is False and not is_known_opcode("clz")
    assert verdict["optimization-barrier"] is False and not is_known_opcode("optimization-barrier")
