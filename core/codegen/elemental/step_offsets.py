"""Loop-step offsets added to a pointer on their own, so each unrolled step's address is one base plus a constant.

A reduction kernel steps over the reduced extent (``R = it * TR + tr``); an operand read at a position affine in
``R`` is at ``base + it * TR * stride`` with ``base`` the same every step. Written as one ``int32`` offset
``base + R * stride``, the address is a sign-extended sum recomputed per step (Triton's offsets are signed 32-bit
without overflow flags, so LLVM cannot fold the step into the 64-bit address): two registers per step's pointer.
Added as a second pointer offset (``ptr + base + (it * TR) * stride``) the step is a constant displacement of one
pointer (``LDG [R2.64+0x100]``), as in XLA's kernels, whose index arithmetic is known not to wrap.

Each index variable built by ``iadd``/``isub``/``imul``/``linearize`` gets a *step form* ``(base, coefficient)``
(value = ``base + coefficient * step``), from the kernel's seeds (``R_c`` = ``tr`` + 1 step, loop invariants
with coefficient 0); ``idiv``/``imod``/``iclamp`` of a value that moves with the step, or any variable the
generator did not build, has none (loaded as before).
"""

from __future__ import annotations

from typing import Any

import attrs

from fusegen.codegen.elemental.common import COMPLEX_PARTS, Cx
from fusegen.hlo.ir import Instruction, Shape
from fusegen.hlo.layout_util import dim_strides


@attrs.frozen
class LoopSteps:
    """The step structure of a kernel's loop (``KernelContext.steps``).

    Attributes:
        step: the loop's step as an expression (``"it * TR"``: a constant in each unrolled step).
        seeds: variable -> ``(base, coefficient)``: ``{"R_c": ("tr", 1), "A_c": ("A_c", 0), ...}``.
    """

    step: str
    seeds: dict = attrs.field(factory=dict)


class StepOffsetsMixin:
    """Step forms of index variables and step-split loads (a mixin of :class:`ElementalGenerator`)."""

    def step_form(self, a: int | str) -> tuple[int | str, int] | None:
        """``(base, coefficient)`` of ``a`` (``a = base + coefficient * step``), ``None`` when unknown."""
        if isinstance(a, int):
            return a, 0
        steps = self.ctx.steps
        if steps is None:
            return None
        forms = self.root_gen._steps
        return forms[a] if a in forms else steps.seeds.get(a)

    def _step(self, result: int | str, op: str, operands: tuple, k: int = 0, shape: tuple = ()) -> int | str:
        """Record the step form of ``result`` = ``op(*operands)`` (``k``: the factor of ``mul``; ``shape``:
        ``(dims, m2m)`` of ``lin``)."""
        if self.ctx.steps is None or not isinstance(result, str) or result in self.root_gen._steps:
            return result
        forms = [self.step_form(o) for o in operands]
        out: tuple[int | str, int] | None = None
        if all(f is not None for f in forms):
            coefs = [c for _, c in forms]
            bases = [b for b, _ in forms]
            if not any(coefs):
                out = (result, 0)
            elif op == "add":
                out = (self.iadd(*bases), sum(coefs))
            elif op == "sub":
                out = (self.isub(*bases), coefs[0] - coefs[1])
            elif op == "mul":
                out = (self.imul(bases[0], k), coefs[0] * k)
            elif op == "lin":
                dims, m2m = shape
                coef = sum(c * s for c, s in zip(coefs, dim_strides(dims, m2m)))
                out = (self.linearize(tuple(bases), dims, m2m), coef)
        self.root_gen._steps[result] = out
        return result

    def _load_steps(self, ptr: str, shape: Shape, lin: str, inst: Instruction) -> Any:
        """The load at ``lin`` with its step as a separate pointer offset, or ``None`` (no step form, or a
        block other than the loop's main one)."""
        ctx = self.ctx
        if ctx.steps is None or ctx.block_shape != "[BLOCK]":
            return None
        form = self.step_form(lin)
        if form is None or form[1] == 0:
            return None
        base, coef = form
        step = ctx.steps.step
        base = self.itensor(base)
        if shape.element_type in COMPLEX_PARTS:
            b2 = ctx.emit(f"{base} * 2", "off")
            re = ctx.emit(f"tl.load({ptr} + {b2} + ({step}) * {2 * coef}, mask={ctx.mask}, other=0)", f"{inst.name}_re")
            im = ctx.emit(f"tl.load({ptr} + {b2} + ({step}) * {2 * coef} + 1, mask={ctx.mask}, other=0)",
                          f"{inst.name}_im")
            return Cx((re, im))
        other = "" if shape.element_type.startswith("f8") else ", other=0"
        v = ctx.emit(f"tl.load({ptr} + {base} + ({step}) * {coef}, mask={ctx.mask}{other})", inst.name)
        if shape.element_type == "pred":
            v = ctx.emit(f"{v} != 0", inst.name)
        return v
