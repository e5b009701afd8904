"""parse -> print -> parse round trips (fusegen.hlo.printer), and XLA's parser accepting the printed text."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegen.hlo.ir import Instruction, Layout, Shape
from fusegen.hlo.literal import format_literal, parse_literal
from fusegen.hlo.parser import parse_module, parse_modules
from fusegen.hlo.printer import module_key, print_instruction, print_module, print_shape

SHARED = Path(__file__).parents[2].parent / "shared"
CORPUS = SHARED / "corpus"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"shared corpus not found at {CORPUS}")
INVALID = {"B01.hlo", "B02.hlo"}


def corpus_files() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    files = sorted(CORPUS.rglob("*.hlo")) + sorted((CORPUS / "jax" / "xla_dump_h200").glob("*optimizations.txt"))
    return [p for p in files if p.name not in INVALID and "hostile" not in p.relative_to(CORPUS).parts]


def _id(p: Path) -> str:
    return str(p.relative_to(CORPUS))


# Modules XLA:GPU (or JAX) itself produced: XLA must accept our printing of them.
def xla_produced() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    return sorted((CORPUS / "jax").glob("*.hlo")) + sorted(
        (CORPUS / "jax" / "xla_dump_h200").glob("*optimizations.txt"))


@needs_corpus
@pytest.mark.parametrize("path", corpus_files(), ids=_id)
def test_roundtrip_corpus(path: Path):
    for m in parse_modules(path.read_text(), str(path)):
        text = print_module(m)
        m2 = parse_module(text, f"printed:{path.name}")
        assert module_key(m2) == module_key(m)
        # printing is a fixed point after one round
        assert print_module(m2) == text


_SMALL = """HloModule m, is_scheduled=true

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}

ENTRY main {
  x = f32[4,8]{1,0} parameter(0)
  z = f32[] constant(0)
  ROOT s = f32[4]{0} reduce(x, z), dimensions={1}, to_apply=add, metadata={op_name="sum"}
}
"""


@pytest.mark.parametrize(
    "old, new",
    [
        ("ROOT s = f32[4]{0}", "ROOT s2 = f32[4]{0}"),  # an instruction name
        ("f32[4,8]{1,0}", "f32[4,8]{0,1}"),  # a layout
        ("dimensions={1}", "dimensions={0}"),  # a parsed attribute
        ('op_name="sum"', 'op_name="sum2"'),  # metadata
        ("is_scheduled=true", "is_scheduled=false"),  # a header attribute
        ("add(a, b)", "add(b, a)"),  # operand order
        ("ROOT r = f32[] add(a, b)", "ROOT r = f32[] multiply(a, b)"),  # an opcode
        ("HloModule m,", "HloModule n,"),  # the module name
    ],
)
def test_module_key_sees_differences(old, new):
    assert old in _SMALL
    k = module_key(parse_module(_SMALL))
    assert module_key(parse_module(_SMALL)) == k
    assert module_key(parse_module(_SMALL.replace(old, new))) != k


_CHILD = r"""
import json, sys
from jaxlib import _hlo
for path in sys.stdin.read().split("\n"):
    if not path:
        continue
    try:
        m = _hlo.hlo_module_from_text(open(path).read())
        print(json.dumps({"file": path, "ok": True,
                          "counts": sorted([c.name, len(c.instructions())] for c in m.computations())}), flush=True)
    except Exception as e:
        print(json.dumps({"file": path, "ok": False, "error": str(e)[:400]}), flush=True)
"""


@needs_corpus
def test_printed_xla_modules_are_accepted_by_xla(tmp_path: Path):
    try:
        import jaxlib._hlo  # noqa: F401
    except Exception:
        pytest.skip("jaxlib's HLO parser (jaxlib._hlo) is not importable")
    originals = xla_produced()
    assert len(originals) >= 23
    printed = []
    for p in originals:
        q = tmp_path / (p.name + ".printed.hlo")
        q.write_text(print_module(parse_module(p.read_text(), str(p))))
        printed.append(q)
    r = subprocess.run([sys.executable, "-c", _CHILD], input="\n".join(map(str, originals + printed)),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    res = {rec["file"]: rec for rec in map(json.loads, r.stdout.splitlines())}
    for p, q in zip(originals, printed):
        a, b = res[str(p)], res[str(q)]
        assert a["ok"], a
        assert b["ok"], (q.name, b.get("error"))
        assert a["counts"] == b["counts"]


# ------------------------------------------------------------------------------------------ unit printing
def test_print_shape_forms():
    assert print_shape(Shape("f32", (2, 3), Layout((1, 0)))) == "f32[2,3]{1,0}"
    assert print_shape(Shape("f32")) == "f32[]"
    assert print_shape(Shape("token")) == "token[]"
    t = Shape("tuple", (), None, (Shape("f32", (2,)), Shape("tuple", (), None, (Shape("s32"), Shape("pred")))))
    assert print_shape(t) == "(f32[2], (s32[], pred[]))"
    assert print_shape(Shape("f32", (8, 256), Layout((1, 0), ((8, 128), (2, 1)), 1))) == "f32[8,256]{1,0:T(8,128)(2,1)S(1)}"
    assert print_shape(Shape("s4", (2, 2), Layout((1, 0), (), None, ("E(4)",)))) == "s4[2,2]{1,0:E(4)}"
    assert print_shape(Shape("f32", (4, 8), None, None, (True, False))) == "f32[<=4,8]"


def test_print_instruction_and_in_memory_constant():
    p = Instruction("p", "parameter", Shape("f32", (2,)), attrs={"parameter_number": 0})
    c = Instruction("c", "constant", Shape("f32", (2,)), attrs={"literal": np.array([1.5, -np.inf], np.float32)})
    a = Instruction("a", "add", Shape("f32", (2,), Layout((0,))), operands=[p, c],
                    attrs={"metadata": {"op_name": 'x"y', "source_line": 3}})
    assert print_instruction(p) == "%p = f32[2] parameter(0)"
    assert print_instruction(c) == "%c = f32[2] constant({1.5, -inf})"
    assert print_instruction(a) == '%a = f32[2]{0} add(%p, %c), metadata={op_name="x\\"y" source_line=3}'


# ------------------------------------------------------------------------------------------ literal property
_ETYPES = ["f32", "f16", "bf16", "f64", "s8", "s32", "u8", "s64", "pred", "c64", "f8e4m3fn", "s4"]


@settings(max_examples=200, deadline=None)
@given(etype=st.sampled_from(_ETYPES), dims=st.lists(st.integers(0, 3), max_size=3), seed=st.integers(0, 2**31))
def test_literal_format_parse_roundtrip(etype, dims, seed):
    from fusegen.hlo.dtypes import numpy_dtype

    rng = np.random.default_rng(seed)
    shape = Shape(etype, tuple(dims))
    dtype = numpy_dtype(etype)
    n = int(np.prod(dims)) if dims else 1
    if etype == "pred":
        arr = rng.integers(0, 2, n).astype(bool)
    elif etype.startswith(("s", "u")):
        lo, hi = (-8, 8) if etype == "s4" else (0 if etype[0] == "u" else -100, 100)
        arr = rng.integers(lo, hi, n).astype(dtype)
    elif etype == "c64":
        arr = (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(dtype)
    else:
        vals = rng.normal(scale=100, size=n)
        vals[rng.random(n) < 0.1] = np.inf
        arr = vals.astype(dtype)
    arr = arr.reshape(dims)
    back = parse_literal(format_literal(arr, shape), shape)
    assert back.dtype == dtype and back.shape == tuple(dims)
    assert back.tobytes() == arr.tobytes()
