"""The module verifier passes run after (``fusegen.hlo.module_verifier``), the pass kit and the pass checks.

* every module of the shared corpus (XLA's own test inputs, its optimized output, JAX programs) verifies,
  except the one XLA test input that is not valid HLO (an XLA tool test that only prints indexing maps);
* each planted fault of the table is found, named, and XLA refuses the same module (compiled through jaxlib,
  when it is installed): the verifier says no more than XLA would;
* the pass kit's edits keep a module valid (``replace_all_uses`` with ``convert(dot)`` makes no cycle);
* outputs compared with a pass's error budget: exact means bit for bit, a budget is relative to the output's
  scale, NaN/inf places and integers must agree.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import REPO
from fusegen.hlo.ir import Instruction, Layout, Shape
from fusegen.hlo.module_verifier import entry_signature, signature_change, verify_module
from fusegen.hlo.parser import parse_module
from fusegen.hlo.printer import print_module
from fusegen.passes import kit
from fusegen.passes.pass_checks import output_difference
from xla_oracle import JAX_ERROR

CORPUS = REPO.parent / "shared" / "corpus"

BASE = """HloModule base
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  p0 = f32[8,16]{1,0} parameter(0)
  ROOT e = f32[8,16]{1,0} exponential(p0)
}
ENTRY main {
  x = f32[8,32]{1,0} parameter(0)
  w = f32[32,16]{1,0} parameter(1)
  d = f32[8,16]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  c = s32[8,16]{1,0} convert(d)
  f = f32[8,16]{1,0} fusion(d), kind=kLoop, calls=fused
  z = f32[] constant(0)
  ROOT r = f32[8]{0} reduce(f, z), dimensions={1}, to_apply=add
}
"""


def _inst(m, name):
    return next(i for c in m.computations for i in c.instructions if i.name == name)


def _shape(m, name, et, dims):
    _inst(m, name).shape = Shape(et, tuple(dims), Layout(tuple(range(len(dims) - 1, -1, -1))))


def _implicit_broadcast(m):
    e = m.entry
    kit.add_instruction(e, "power", _inst(m, "d").shape, [_inst(m, "d"), _inst(m, "z")], before=e.root, name="sq")


def _reorder(m):
    e = m.entry
    d = _inst(m, "d")
    e.instructions.remove(d)
    e.instructions.append(d)


#: (fault, mutation, what the verifier says, whether the printed module is text XLA can be handed)
FAULTS = [
    ("dot contracting sizes", lambda m: _inst(m, "d").attrs.update(rhs_contracting_dims=(1,)),
     "computation 'main': dot %d: contracting dimension sizes differ: lhs %x f32[8,32] dimension 1 is 32, rhs %w "
     "f32[32,16] dimension 1 is 16", True),
    ("dot result shape", lambda m: _shape(m, "d", "f32", (8, 32)),
     "dot %d: result f32[8,32] should have dimensions [8, 16]", True),
    ("fusion operand type", lambda m: setattr(_inst(m, "f"), "operands", [_inst(m, "c")]),
     "fusion %f: parameter 0 of 'fused' is f32[8,16] but operand %c is s32[8,16]", True),
    ("convert dimensions", lambda m: _shape(m, "c", "s32", (16, 8)),
     "convert %c changes dimensions: f32[8,16] %d -> s32[16,8]", True),
    ("unary operand type", lambda m: _shape(m, "e", "s32", (8, 16)),
     "exponential %e is s32[8,16] but its operand %p0 is f32[8,16]", True),
    ("reduce result", lambda m: _shape(m, "r", "f32", (16,)),
     "reduce %r: result 0 is f32[16] but reducing dimensions [1] of f32[8,16] gives [8]", True),
    ("binary op implicit broadcast", _implicit_broadcast,
     "power %sq: operand %z is f32[], the result f32[8,16] (HLO has no implicit broadcast", True),
    ("layout", lambda m: setattr(_inst(m, "x"), "shape", Shape("f32", (8, 32), Layout((1, 1)))),
     "computation 'main', %x: layout {1,1} of f32[8, 32] is not a permutation of its 2 dimensions", True),
    ("operand outside the computation", lambda m: setattr(_inst(m, "c"), "operands", [Instruction(
        "ghost", "parameter", _inst(m, "d").shape, attrs={"parameter_number": 0})]),
     "computation 'main', %c: operand %ghost is not an instruction of this computation", False),
    ("operand defined after its user", _reorder,
     "computation 'main', %c: operand %d is defined after its user", False),
]


@pytest.mark.skipif(not CORPUS.exists(), reason=f"shared corpus not found at {CORPUS}")
def test_every_corpus_module_verifies_but_the_one_invalid_xla_test_input():
    from fusegen.conformance.corpus import parse_file

    bad, n = {}, 0
    for p in sorted(CORPUS.glob("**/*.hlo")):
        for m in parse_file(p):
            n += 1
            problems = verify_module(m)
            if problems:
                bad[p.name] = problems
    assert n > 600
    assert bad == {"tools__print_indexing_test.hlo": [
        "computation 'main': fusion %fusion: parameter 1 of 'fused_computation' is s32[] but operand %b is s32[1024]"]}


def test_the_base_module_verifies_and_xla_runs_it():
    m = parse_module(BASE)
    assert verify_module(m) == []
    if JAX_ERROR is None:
        from fusegen.runtime.inputs import make_inputs
        from xla_oracle import run_xla

        assert run_xla(print_module(m), make_inputs(m))[0].shape == (8,)


@pytest.mark.parametrize("fault, mutate, said, printable", FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_is_found_and_xla_refuses_the_module_too(fault, mutate, said, printable):
    m = parse_module(BASE)
    mutate(m)
    problems = verify_module(m)
    assert problems and said in problems[0], problems
    if printable and JAX_ERROR is None:
        from fusegen.runtime.inputs import make_inputs
        from xla_oracle import run_xla

        with pytest.raises(Exception):
            run_xla(print_module(m), make_inputs(parse_module(BASE)))


def test_entry_signature_changes_are_named():
    m = parse_module(BASE)
    before = entry_signature(m)
    assert signature_change(before, m) is None
    _inst(m, "x").shape = Shape("f32", (8, 32), Layout((0, 1)))
    assert signature_change(before, m) == "entry parameter 0 is f32[8,32]{0,1}, it was f32[8,32]{1,0}"


def test_kit_edits_keep_the_module_valid():
    m = parse_module(BASE)
    entry, d = m.entry, _inst(m, "d")
    uniq = kit.NameUniquer(m)
    assert [c.name for c in kit.computations_outside_fusions(m)] == ["main"]
    assert [i.name for _, i in kit.instructions_outside_fusions(m, "dot")] == ["d"]
    assert kit.contracting_sizes(d) == ((32,), (32,))
    narrow = kit.add_instruction(entry, "convert", kit.with_element_type(d.shape, "bf16"), [d], after=d,
                                 name="d.bf16", uniq=uniq)
    wide = kit.add_instruction(entry, "convert", d.shape, [narrow], after=narrow, name="d", uniq=uniq)
    kit.replace_all_uses(entry, d, wide)
    assert (wide.name, narrow.operands, [u.name for u in d.users]) == ("d.1", [d], ["d.bf16"])
    assert verify_module(m) == []
    x16 = kit.add_instruction(entry, "convert", kit.with_element_type(_inst(m, "x").shape, "bf16"), [_inst(m, "x")],
                              before=d, uniq=uniq)
    kit.replace_operand(entry, d, _inst(m, "x"), x16)
    assert verify_module(m) == [] and x16.name == "convert" and d.operands[0] is x16
    assert print_module(parse_module(print_module(m))) == print_module(m)  # prints and parses back


def test_output_difference_within_a_budget():
    b = np.array([1.0, -2.0, np.nan, np.inf], np.float32)
    assert output_difference([b], [b.copy()], 0.0) is None
    a = b.copy()
    a[0] = np.nextafter(np.float32(1.0), np.float32(2.0))
    assert "differs in 1 of 4 elements" in output_difference([b], [a], 0.0, ["f32"])
    assert output_difference([b], [a], 1e-6, ["f32"]) is None  # 1.2e-7 of the scale 2
    a[1] = -2.1
    assert output_difference([b], [a], 0.01, ["f32"]) == (
        "output 0 (f32) changed by 0.1, 0.05 of its largest value 2; the pass declares error_budget=0.01")
    a = b.copy()
    a[2] = 0.0
    assert "NaN or infinity at different places" in output_difference([b], [a], 0.5, ["f32"])
    i = np.array([1, 2, 3], np.int32)
    assert "integer outputs must be equal" in output_difference([i], [i + np.array([0, 0, 1], np.int32)], 0.5,
                                                                 ["s32"])


def test_sort_comparator_and_bitcast_bytes():
    m = parse_module("""HloModule s
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}
ENTRY e {
  k = f32[4,8]{1,0} parameter(0)
  v = s32[4,8]{1,0} parameter(1)
  s = (f32[4,8]{1,0}, s32[4,8]{1,0}) sort(k, v), dimensions={1}, to_apply=cmp
  k2 = f32[4,8]{1,0} get-tuple-element(s), index=0
  ROOT bc = u8[4,8,4]{2,1,0} bitcast(k2)
}
""")
    assert verify_module(m) == []
    _inst(m, "c").shape = Shape("f32", ())
    assert verify_module(m) == ["computation 'e': sort %s: comparator 'cmp' takes (f32[], f32[], f32[], s32[]), expected "
                                "(f32[], f32[], s32[], s32[])"]
    _inst(m, "c").shape = Shape("s32", ())
    _shape(m, "bc", "u8", (4, 8, 2))
    assert verify_module(m) == ["computation 'e': bitcast %bc changes the byte size: f32[4,8] %k2 -> u8[4,8,2] (a "
                                "bitcast reinterprets the same bytes)"]
