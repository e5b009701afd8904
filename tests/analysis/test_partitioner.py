"""The computation partitioner (XLA's ``PartitionedComputation``): the emitters document's log/transpose/add
example, XLA's own partitioner test graphs, and the linear size of the partition on chained diamonds."""

from __future__ import annotations

import pytest

from fusegen.analysis.partitioner import PartitionedComputation, is_evaluated_more_than_once, partition
from fusegen.hlo.parser import parse_module


def _comp(body: str, name: str = "fused"):
    m = parse_module(f"HloModule t\n{name} {{\n{body}\n}}\n", "t")
    return m.computation(name)


def _names(insts) -> list[str]:
    return [i.name for i in insts]


def _check_is_partition(pc: PartitionedComputation) -> None:
    seen: dict[str, int] = {}
    for k, sg in enumerate(pc.subgraphs):
        assert sg.roots, sg.name
        for i in sg.instructions:
            assert i.name not in seen, f"%{i.name} in two subgraphs"
            seen[i.name] = k
            assert pc.find_subgraph(i) is sg
    assert set(seen) == {i.name for i in pc.computation.instructions}
    # a subgraph's value crosses into another one only through the callee's roots
    for sg in pc.subgraphs:
        for i in sg.instructions:
            for o in i.operands:
                callee = pc.find_subgraph(o)
                if callee is not sg:
                    assert any(r is o for r in callee.roots)


SEED_EXAMPLE = """
  param = f32[20,20] parameter(0)
  log = f32[20,20] log(param)
  transpose = f32[20,20] transpose(log), dimensions={1,0}
  ROOT add = f32[20,20] add(log, transpose)"""


def test_seed_log_transpose_add_example():
    # log is read at (i, j) by add and at (j, i) through the transpose: it gets a function of its own, called
    # twice, instead of being emitted along both paths. The transpose has one user and stays with the add.
    comp = _comp(SEED_EXAMPLE)
    pc = partition(comp)
    _check_is_partition(pc)
    assert len(pc.subgraphs) == 2
    root_sg = pc.root_subgraph
    assert root_sg is pc.subgraphs[0]
    assert _names(root_sg.instructions) == ["transpose", "add"]
    assert _names(root_sg.roots) == ["add"]
    log_sg = pc.find_subgraph(comp.instruction("log"))
    assert log_sg is not root_sg
    assert _names(log_sg.roots) == ["log"] and set(_names(log_sg.instructions)) == {"param", "log"}
    assert pc.callees(root_sg) == [log_sg] and pc.callees(log_sg) == []
    assert root_sg.index_ranges == (20, 20) and root_sg.name == "fused_add" and log_sg.name == "fused_log"
    # the index-reading relation: the transpose is read at the add's index, the log at another one
    assert root_sg.indexing_id(comp.instruction("transpose")) == root_sg.indexing_id(comp.instruction("add"))
    assert log_sg.indexing_id(comp.instruction("log")) != root_sg.indexing_id(comp.instruction("add"))


def test_same_index_users_do_not_split():
    comp = _comp("""
  p = f32[16] parameter(0)
  l = f32[16] log(p)
  e = f32[16] exponential(l)
  n = f32[16] negate(l)
  ROOT a = f32[16] add(e, n)""")
    pc = partition(comp)
    _check_is_partition(pc)
    assert len(pc.subgraphs) == 1 and _names(pc.subgraphs[0].roots) == ["a"]


def test_xla_partition_diamonds():
    # computation_partitioner_test.cc PartitionDiamonds: every add with its two slices, and the parameter alone
    comp = _comp("""
  param = f32[6] parameter(0)
  slice0.1 = f32[5] slice(param), slice={[0:5]}
  slice0.2 = f32[5] slice(param), slice={[1:6]}
  add0 = f32[5] add(slice0.1, slice0.2)
  slice1.1 = f32[4] slice(add0), slice={[0:4]}
  slice1.2 = f32[4] slice(add0), slice={[1:5]}
  add1 = f32[4] add(slice1.1, slice1.2)
  slice2.1 = f32[3] slice(add1), slice={[0:3]}
  slice2.2 = f32[3] slice(add1), slice={[1:4]}
  add2 = f32[3] add(slice2.1, slice2.2)
  slice3.1 = f32[2] slice(add2), slice={[0:2]}
  slice3.2 = f32[2] slice(add2), slice={[1:3]}
  ROOT add3 = f32[2] add(slice3.1, slice3.2)""", "fused_computation")
    pc = partition(comp)
    _check_is_partition(pc)
    assert [sg.name for sg in pc.subgraphs] == ["fused_computation_add3", "fused_computation_add2",
                                                "fused_computation_add1", "fused_computation_add0",
                                                "fused_computation_param"]
    for k in range(4):
        sg = pc.subgraphs[3 - k]
        assert sorted(_names(sg.instructions)) == sorted([f"slice{k}.1", f"slice{k}.2", f"add{k}"])
        assert _names(sg.roots) == [f"add{k}"]
    assert _names(pc.subgraphs[4].instructions) == ["param"]


def test_xla_concatenates():
    simple = _comp("""
  param1 = f32[6] parameter(0)
  param2 = f32[3] parameter(1)
  neg = f32[6] negate(param1)
  exp = f32[3] exponential(param2)
  ROOT concat = f32[9] concatenate(neg, exp), dimensions={0}""")
    assert len(partition(simple).subgraphs) == 1
    diamond = _comp("""
  param1 = f32[6] parameter(0)
  param2 = f32[6] parameter(1)
  log = f32[6] log(param1)
  add = f32[6] add(log, param2)
  neg = f32[6] negate(log)
  exp = f32[6] exponential(add)
  ROOT concat = f32[12] concatenate(neg, exp), dimensions={0}""")
    pc = partition(diamond)
    _check_is_partition(pc)
    assert len(pc.subgraphs) == 2
    assert sorted(_names(pc.subgraphs[0].instructions)) == ["add", "concat", "exp", "neg", "param2"]
    assert sorted(_names(pc.subgraphs[1].instructions)) == ["log", "param1"]
    assert _names(pc.subgraphs[1].roots) == ["log"]


def test_xla_tuple_root_splits_shared_parameters():
    comp = _comp("""
  p0 = f32[6] parameter(0)
  p1 = f32[6] parameter(1)
  add = f32[6] add(p0, p1)
  sub = f32[6] subtract(p0, p1)
  ROOT root = (f32[6], f32[6]) tuple(add, sub)""")
    pc = partition(comp)
    _check_is_partition(pc)
    assert len(pc.subgraphs) == 3
    assert sorted(_names(pc.root_subgraph.instructions)) == ["add", "root", "sub"]
    assert {tuple(_names(sg.instructions)) for sg in pc.subgraphs[1:]} == {("p0",), ("p1",)}


def test_xla_transpose_as_forced_root_and_partially_mergable():
    comp = _comp("""
  p0 = f32[64,32] parameter(0)
  p1 = f32[64,32] parameter(1)
  add = f32[64,32] add(p0, p1)
  transpose = f32[32,64] transpose(add), dimensions={1,0}
  exp = f32[32,64] exponential(transpose)
  ROOT root = f32[32,64] tanh(exp)""")
    pc = partition(comp, lambda i: i.opcode == "transpose")
    _check_is_partition(pc)
    assert len(pc.subgraphs) == 2
    assert len(pc.root_subgraph.roots) == 1 and len(pc.root_subgraph.instructions) == 2
    comp2 = _comp("""
  p0 = f32[10,10] parameter(0)
  p1 = f32[10,10] parameter(1)
  add = f32[10,10] add(p0, p1)
  transpose = f32[10,10] transpose(add), dimensions={1,0}
  ROOT sub = f32[10,10] subtract(add, transpose)""")
    pc2 = partition(comp2)
    _check_is_partition(pc2)
    assert len(pc2.subgraphs) == 2
    assert sorted(_names(pc2.root_subgraph.instructions)) == ["sub", "transpose"]


@pytest.mark.parametrize("depth", [5, 30])
def test_chained_diamonds_partition_linearly(depth):
    # depth levels of x_{k+1} = x_k[0:n-1] + x_k[1:n]: one subgraph per level, each instruction emitted once
    n = depth + 2
    lines = [f"  x0 = f32[{n}] parameter(0)"]
    for k in range(depth):
        m = n - k - 1
        lines += [f"  a{k} = f32[{m}] slice(x{k}), slice={{[0:{m}]}}",
                  f"  b{k} = f32[{m}] slice(x{k}), slice={{[1:{m + 1}]}}",
                  f"  {'ROOT ' if k == depth - 1 else ''}x{k + 1} = f32[{m}] add(a{k}, b{k})"]
    pc = partition(_comp("\n".join(lines)))
    _check_is_partition(pc)
    assert len(pc.subgraphs) == depth + 1
    assert sum(len(sg.instructions) for sg in pc.subgraphs) == 3 * depth + 1


def test_gather_index_operand_is_evaluated_more_than_once():
    comp = _comp("""
  op = f32[10,4] parameter(0)
  p = s32[3,2] parameter(1)
  idx = s32[3,2] negate(p)
  ROOT g = f32[3,4] gather(op, idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={1,4}""")
    idx = comp.instruction("idx")
    assert is_evaluated_more_than_once(idx)
    pc = partition(comp)
    _check_is_partition(pc)
    assert pc.find_subgraph(idx) is not pc.root_subgraph
    assert not is_evaluated_more_than_once(comp.instruction("op"))


def test_rootless_computation_is_an_error():
    from fusegen.hlo.ir import Computation

    with pytest.raises(ValueError, match="has no root"):
        partition(Computation(name="empty"))


def test_same_indices_compares_indexing_maps():
    # n is read through two transposes that cancel: by the maps, l's users exp and negate read it at the root's
    # own index, so l stays in the root function (without maps, the detour's fresh indexing id split it off).
    comp = _comp("""
  p = f32[8,16] parameter(0)
  l = f32[8,16] log(p)
  e = f32[8,16] exponential(l)
  n = f32[8,16] negate(l)
  t1 = f32[16,8] transpose(n), dimensions={1,0}
  t2 = f32[8,16] transpose(t1), dimensions={1,0}
  ROOT a = f32[8,16] add(e, t2)""")
    pc = partition(comp)
    _check_is_partition(pc)
    assert len(pc.subgraphs) == 1
    sg = pc.root_subgraph
    ids = {n: sg.indexing_id(comp.instruction(n)) for n in ("a", "e", "n", "l", "t1", "t2")}
    assert ids["n"] == ids["l"] == ids["e"] == ids["a"] == ids["t2"] and ids["t1"] != ids["a"]
    # a real permutation still splits: log read at (i, j) and at (j, i)
    comp2 = _comp(SEED_EXAMPLE)
    assert len(partition(comp2).subgraphs) == 2
