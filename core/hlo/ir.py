"""The HLO intermediate representation fusegen works on.

Mirrors XLA's ``HloModule`` / ``HloComputation`` / ``HloInstruction`` / ``Shape`` / ``Layout``
(``xla/hlo/ir/hlo_instruction.h``, ``xla/shape.h``, ``xla/layout.h``) as plain Python objects.

Conventions every other part of fusegen relies on:

* ``Shape.element_type`` is the HLO primitive-type spelling (``f32``, ``bf16``, ``pred``, ``s32``,
  ``u8``, ``f8e4m3fn``, ``c64``, ``token``, ...); a tuple shape has ``element_type == "tuple"``.
* ``Shape.layout.minor_to_major`` is XLA's layout; ``None`` layout means the default (descending,
  ``{rank-1, ..., 0}``). :meth:`Shape.minor_to_major` always answers with the effective layout.
* ``Instruction.attrs`` maps the HLO text attribute key (``dimensions``, ``slice``, ``to_apply``,
  ``backend_config``, ...) to a parsed value; see :data:`ATTRIBUTE_FORMS` for each key's Python form.
  Computation-valued attributes (``to_apply``, ``calls``, ``condition``, ``body``,
  ``branch_computations``) hold :class:`Computation` objects (a list for the multi-valued ones).
* A constant keeps its literal text in ``attrs["literal"]`` (``None`` when elided as ``{...}``).
"""

from __future__ import annotations

from typing import Any, Iterator

import attrs as _attrs
from attrs import field as _field

#: Python form of each parsed attribute (everything else is kept as its raw text, a ``str``).
ATTRIBUTE_FORMS: dict[str, str] = {
    "dimensions": "tuple[int, ...]",
    "slice": "list[tuple[int, int, int]]  # (start, limit, stride)",
    "dynamic_slice_sizes": "tuple[int, ...]",
    "padding": "list[tuple[int, int, int]]  # (low, high, interior) per dimension",
    "window": "dict[str, tuple[int, ...] | list[tuple[int,int]]]  # size, stride, pad, lhs_dilate, rhs_dilate, rhs_reversal",
    "lhs_contracting_dims": "tuple[int, ...]",
    "rhs_contracting_dims": "tuple[int, ...]",
    "lhs_batch_dims": "tuple[int, ...]",
    "rhs_batch_dims": "tuple[int, ...]",
    "index": "int",
    "iota_dimension": "int",
    "feature_group_count": "int",
    "batch_group_count": "int",
    "index_vector_dim": "int",
    "direction": "str  # EQ NE LT LE GT GE",
    "kind": "str  # kLoop kInput kOutput kCustom",
    "custom_call_target": "str",
    "backend_config": "dict | str  # JSON object parsed; non-JSON kept as str",
    "metadata": "dict[str, str | int]",
    "frontend_attributes": "dict[str, str]",
    "to_apply": "Computation",
    "calls": "Computation | list[Computation]",
    "condition": "Computation",
    "body": "Computation",
    "branch_computations": "list[Computation]",
    "true_computation": "Computation",
    "false_computation": "Computation",
    "control-predecessors": "list[str]",
    "is_stable": "bool",
    "indices_are_sorted": "bool",
    "unique_indices": "bool",
    "literal": "str | None  # constants only; None when elided",
    "parameter_number": "int  # parameters only",
    "exponent_bits": "int",
    "mantissa_bits": "int",
}

#: Attributes whose value names one or more computations.
COMPUTATION_ATTRIBUTES = ("to_apply", "calls", "condition", "body", "branch_computations", "true_computation",
                          "false_computation", "select", "scatter")  # the last two: select-and-scatter


@_attrs.frozen
class Layout:
    """An XLA layout: ``{1,0:T(8,128)S(1)}``.

    Attributes:
        minor_to_major: dimension numbers, most minor first.
        tiles: the ``T(...)`` tiles, each a tuple of ints (``-1``... kept as printed, ``*`` as ``-1``).
        memory_space: the ``S(n)`` memory space, or ``None``.
        extra: any other layout items (``E(4)`` element size, ``L(..)``, ...) as their raw text.
    """

    minor_to_major: tuple[int, ...]
    tiles: tuple[tuple[int, ...], ...] = ()
    memory_space: int | None = None
    extra: tuple[str, ...] = ()


@_attrs.frozen
class Shape:
    """An HLO shape: array (``f32[2,3]{1,0}``), tuple (``(f32[2], s32[])``) or ``token[]``.

    Attributes:
        element_type: primitive type spelling, ``"tuple"`` for tuples.
        dimensions: array dimension sizes (empty for scalars and tuples).
        layout: the printed layout or ``None`` (default layout).
        tuple_shapes: element shapes of a tuple, else ``None``.
        dynamic: per dimension, whether it is a bounded dynamic dimension (``<=8``); empty if none.
    """

    element_type: str
    dimensions: tuple[int, ...] = ()
    layout: Layout | None = None
    tuple_shapes: tuple["Shape", ...] | None = None
    dynamic: tuple[bool, ...] = ()

    @property
    def is_tuple(self) -> bool:
        return self.tuple_shapes is not None

    @property
    def is_array(self) -> bool:
        return self.tuple_shapes is None and self.element_type != "token"

    @property
    def rank(self) -> int:
        return len(self.dimensions)

    @property
    def numel(self) -> int:
        """Number of elements of an array shape (1 for a scalar)."""
        n = 1
        for d in self.dimensions:
            n *= d
        return n

    def minor_to_major(self) -> tuple[int, ...]:
        """The effective layout: the printed one, or XLA's default ``rank-1 ... 0``."""
        if self.layout is not None and len(self.layout.minor_to_major) == self.rank:
            return self.layout.minor_to_major
        return tuple(range(self.rank - 1, -1, -1))

    def leaves(self) -> list["Shape"]:
        """Array leaves of a (possibly nested) tuple shape in order; ``[self]`` for an array."""
        if not self.is_tuple:
            return [self]
        out: list[Shape] = []
        for s in self.tuple_shapes or ():
            out.extend(s.leaves())
        return out

    def without_layout(self) -> "Shape":
        if self.is_tuple:
            return _attrs.evolve(self, tuple_shapes=tuple(s.without_layout() for s in self.tuple_shapes))
        return _attrs.evolve(self, layout=None)


@_attrs.define(eq=False)
class Instruction:
    """One HLO instruction.

    Attributes:
        name: the instruction name without ``%``.
        opcode: HLO opcode spelling (``add``, ``get-tuple-element``, ``custom-call``, ...).
        shape: result shape.
        operands: operand instructions, in order.
        attrs: parsed attributes keyed by their HLO text name (see :data:`ATTRIBUTE_FORMS`).
        parent: the computation holding it (set by :class:`Computation`).
        line: 1-based line of its definition in the source text (0 if built in memory).
    """

    name: str
    opcode: str
    shape: Shape
    operands: list["Instruction"] = _field(factory=list)
    attrs: dict[str, Any] = _field(factory=dict)
    parent: "Computation | None" = _field(default=None, repr=False)
    line: int = _field(default=0, repr=False)

    def __repr__(self) -> str:
        return f"<Instruction %{self.name} = {self.opcode}>"

    @property
    def called_computations(self) -> list["Computation"]:
        """Every computation this instruction calls, in attribute order."""
        out: list[Computation] = []
        for key in COMPUTATION_ATTRIBUTES:
            v = self.attrs.get(key)
            if v is None:
                continue
            if isinstance(v, Computation):
                out.append(v)
            else:
                out.extend(c for c in v if isinstance(c, Computation))
        return out

    @property
    def fused_computation(self) -> "Computation":
        """The body of a ``fusion`` instruction (its ``calls``)."""
        c = self.attrs.get("calls")
        if isinstance(c, list):
            c = c[0]
        if not isinstance(c, Computation):
            raise ValueError(f"%{self.name} ({self.opcode}) has no called computation")
        return c

    @property
    def backend_config(self) -> dict:
        """The backend config as a dict (``{}`` when absent or not JSON)."""
        bc = self.attrs.get("backend_config")
        return bc if isinstance(bc, dict) else {}

    @property
    def fusion_backend_kind(self) -> str | None:
        """``backend_config.fusion_backend_config.kind`` (``__triton_gemm``, ...) or ``None``."""
        fbc = self.backend_config.get("fusion_backend_config")
        if isinstance(fbc, dict):
            k = fbc.get("kind")
            return k if isinstance(k, str) and k else None
        return None

    @property
    def users(self) -> list["Instruction"]:
        """Instructions of the same computation that use this one (each once, in program order)."""
        if self.parent is None:
            return []
        return self.parent.users_of(self)

    @property
    def parameter_number(self) -> int:
        return int(self.attrs["parameter_number"])


@_attrs.define(eq=False)
class Computation:
    """An HLO computation: instructions in text order and a root.

    Attributes:
        name: computation name without ``%``.
        instructions: in definition order (XLA text is always in a valid post order).
        root: the ``ROOT`` instruction (the last one when none is marked).
        is_entry: whether this is the module's ``ENTRY``.
        line: 1-based line of the header.
    """

    name: str
    instructions: list[Instruction] = _field(factory=list)
    root: Instruction | None = None
    is_entry: bool = False
    line: int = _field(default=0, repr=False)
    _users: dict[int, list[Instruction]] | None = _field(default=None, repr=False, alias="_users")
    #: bumped by every structural edit through :meth:`add` / :meth:`invalidate` (caches of derived facts, such
    #: as the evaluator's plan, compare it)
    version: int = _field(default=0, repr=False, eq=False)

    def __repr__(self) -> str:
        return f"<Computation %{self.name}: {len(self.instructions)} instructions>"

    def __attrs_post_init__(self) -> None:
        for inst in self.instructions:
            inst.parent = self

    def add(self, inst: Instruction) -> Instruction:
        inst.parent = self
        self.instructions.append(inst)
        self.invalidate()
        return inst

    @property
    def parameters(self) -> list[Instruction]:
        """Parameter instructions ordered by parameter number."""
        ps = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(ps, key=lambda i: i.parameter_number)

    def instruction(self, name: str) -> Instruction:
        for i in self.instructions:
            if i.name == name:
                return i
        raise KeyError(name)

    def users_of(self, inst: Instruction) -> list[Instruction]:
        if self._users is None:
            users: dict[int, list[Instruction]] = {}
            for i in self.instructions:
                seen: set[int] = set()
                for o in i.operands:
                    if id(o) not in seen:
                        seen.add(id(o))
                        users.setdefault(id(o), []).append(i)
            self._users = users
        return list(self._users.get(id(inst), []))

    def invalidate(self) -> None:
        """Forget cached use lists (and, through :attr:`version`, every other cache) after a structural edit."""
        self._users = None
        self.version += 1

    def post_order(self) -> list[Instruction]:
        """Instructions reachable from the root, operands before users (then unreachable ones)."""
        seen: set[int] = set()
        order: list[Instruction] = []
        for start in ([self.root] if self.root else []) + self.instructions:
            if start is None or id(start) in seen:
                continue
            stack: list[tuple[Instruction, int]] = [(start, 0)]
            seen.add(id(start))
            while stack:
                node, k = stack.pop()
                if k < len(node.operands):
                    stack.append((node, k + 1))
                    child = node.operands[k]
                    if id(child) not in seen:
                        seen.add(id(child))
                        stack.append((child, 0))
                else:
                    order.append(node)
        return order


@_attrs.define(eq=False)
class Module:
    """An HLO module.

    Attributes:
        name: module name.
        attrs: header attributes (``entry_computation_layout``, ``is_scheduled``, ...) as raw text values.
        computations: in text order (callees before callers, as XLA prints them).
        entry: the ``ENTRY`` computation (for a file without one: its last computation).
        extra_sections: trailing/leading non-computation sections (``FileNames``, ``StackFrames``, ...) as raw text.
        filename: where it was read from, for error messages.
    """

    name: str
    attrs: dict[str, str] = _field(factory=dict)
    computations: list[Computation] = _field(factory=list)
    entry: Computation | None = None
    extra_sections: list[str] = _field(factory=list)
    filename: str = "<string>"

    def computation(self, name: str) -> Computation:
        for c in self.computations:
            if c.name == name:
                return c
        raise KeyError(name)

    def all_instructions(self) -> Iterator[Instruction]:
        for c in self.computations:
            yield from c.instructions

    def fusion_instructions(self) -> list[Instruction]:
        """Every ``fusion`` instruction of every non-fused computation, callees first."""
        return [i for c in self.computations for i in c.instructions if i.opcode == "fusion"]
