"""The results of the indexing analysis: one operand's indexing, and an instruction's per-operand sets.

Mirrors ``OperandIndexing``, ``RuntimeVarIndexing`` and ``HloInstructionIndexing`` of XLA's
``xla/hlo/analysis/indexing_analysis.h``, including their text form (``operand id = N`` headers,
``runtime variables:`` and ``replica id:`` sections, ``unknown indexing``).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import attrs

from fusegen.hlo.ir import Instruction
from fusegen.indexing.expr import RT
from fusegen.indexing.map import IndexingMap
from fusegen.indexing.simplify import remove_unused_vars, simplify, used_vars


def _instruction_text(inst: Instruction) -> str:
    """How XLA's ``RuntimeVarIndexing::ToString`` names the instruction that yields a runtime value."""
    if inst.opcode == "parameter":
        return f"parameter({inst.parameter_number})"
    if inst.opcode == "constant":
        lit = inst.attrs.get("literal")
        if not inst.shape.dimensions and lit is not None:
            return f"constant({lit})"
        return "constant"
    return inst.name


@attrs.frozen(eq=False)
class RuntimeVarIndexing:
    """A runtime variable's origin: the instruction whose value it is, and the map from the indexed
    instruction's output space to that instruction's index (``(d0, d1) -> (d0, 1)`` for a gather index)."""

    instruction: Instruction
    map: IndexingMap

    def key(self) -> tuple:
        return (id(self.instruction), self.map._key())

    def __str__(self) -> str:
        return f"{_instruction_text(self.instruction)}; {self.map}"


@attrs.frozen(eq=False)
class OperandIndexing:
    """One way an operand is read: its indexing map, the origin of each runtime variable of the map (in the
    map's ``rt`` order), and for collectives the map to the replica id the element comes from."""

    map: IndexingMap
    rt_vars: tuple[RuntimeVarIndexing, ...] = ()
    replica_id_map: IndexingMap | None = None

    def key(self) -> tuple:
        return (self.map._key(), tuple(r.key() for r in self.rt_vars),
                None if self.replica_id_map is None else self.replica_id_map._key())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OperandIndexing) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __str__(self) -> str:
        """``OperandIndexing::ToString`` (``unknown indexing`` for an undefined map)."""
        if self.map.is_undefined:
            return "unknown indexing"
        out = str(self.map)
        if self.rt_vars:
            out += "\nruntime variables:\n" + "".join(f"\nrt{i}: {r}" for i, r in enumerate(self.rt_vars))
        if self.replica_id_map is not None:
            out += f"\nreplica id:\n{self.replica_id_map}"
        return out

    def simplified(self) -> "OperandIndexing":
        """``Simplify()`` then ``RemoveUnusedSymbols()``: dropped runtime variables lose their records too."""
        if self.map.is_undefined:
            return self
        m = simplify(self.map)[0]
        return self.with_map(m).without_unused_symbols()

    def with_map(self, m: IndexingMap) -> "OperandIndexing":
        return attrs.evolve(self, map=m)

    def without_unused_symbols(self) -> "OperandIndexing":
        """Drops unused range variables and runtime variables (with their records)."""
        m = self.map
        if m.is_undefined or m.is_known_empty:
            return self
        used = used_vars(m, dims=False)
        new = remove_unused_vars(m, dims=False)[0]
        if new.num_rt_vars == m.num_rt_vars:
            return attrs.evolve(self, map=new)
        keep = [i for i in range(m.num_rt_vars) if (RT, i) in used]
        rts = tuple(self.rt_vars[i] for i in keep if i < len(self.rt_vars))
        return attrs.evolve(self, map=new, rt_vars=rts)


def unique(items: Iterable[OperandIndexing]) -> list[OperandIndexing]:
    """Insertion-ordered set (XLA keeps a hash set; the order here is just deterministic)."""
    seen: set = set()
    out = []
    for it in items:
        k = it.key()
        if k not in seen:
            seen.add(k)
            out.append(it)
    return out


@attrs.define
class InstructionIndexing:
    """``HloInstructionIndexing``: for each operand (output-to-input) or output (input-to-output), the set
    of ways it is indexed."""

    indexing_maps: list[list[OperandIndexing]] = attrs.field(factory=list)

    @classmethod
    def from_maps(cls, maps: Iterable[IndexingMap]) -> "InstructionIndexing":
        return cls([[OperandIndexing(m)] for m in maps])

    @classmethod
    def from_operand_indexing(cls, items: Iterable[OperandIndexing]) -> "InstructionIndexing":
        return cls([[it] for it in items])

    @classmethod
    def unknown(cls, count: int) -> "InstructionIndexing":
        return cls([[OperandIndexing(IndexingMap.unknown())] for _ in range(count)])

    def __iter__(self) -> Iterator[list[OperandIndexing]]:
        return iter(self.indexing_maps)

    def __len__(self) -> int:
        return len(self.indexing_maps)

    def __getitem__(self, i: int) -> list[OperandIndexing]:
        return self.indexing_maps[i]

    def maps(self, i: int) -> list[IndexingMap]:
        return [o.map for o in self.indexing_maps[i]]

    def to_string(self, separator: str = "\n") -> str:
        """``HloInstructionIndexing::ToString``."""
        out = []
        for i, items in enumerate(self.indexing_maps):
            out.append(f"operand id = {i} " + "".join(str(it) for it in items) + separator)
        return "".join(out)

    def __str__(self) -> str:
        return self.to_string()
