"""Values uniform over each thread's run of consecutive lanes, loaded once per run.

A linear-index kernel (:func:`fusegen.codegen.emitter.build_linear_kernel`) on XLA's loop geometry gives every
thread ``width`` consecutive elements (XLA's unroll factor). An operand read through a broadcast along the minor
dimension (a row scale of a dequantize, a softmax's row maximum) is at the same address for the whole run, but a
``[BLOCK]`` load at those addresses is one load per element: Triton neither merges equal addresses nor lets a
contiguity-free pointer vectorise. XLA loads such a value once per thread: its indexing-map simplifier proves the
index independent of the unrolled element (``(th * 4 + v) floordiv 2048 = th floordiv 512`` for ``v`` in
``[0, 3]``, ``xla/hlo/analysis/indexing_map.cc``, ``SimplifyFloorDiv``), so the unrolled loads are one value.

Here the same fact is tracked on the generator's index variables: each index built by ``idiv``/``imod``/
``iadd``/``isub``/``imul``/``iclamp``/``linearize`` from the run's base (``lin_c``) by a quotient of a multiple
of ``width``, or from a seed variable (a reduction's kept row ``A_c``, constant over the row's lanes), has a
*coarse* twin on a smaller block (one lane per run, built from ``lin_q = lin_c // width`` or the seed's twin),
emitted beside it. A load whose offset has a coarse twin loads on the coarse block and broadcasts each value
over its run (``tl.reshape(tl.broadcast_to(x[:, None], [BLOCK // w, w]), [BLOCK])``: a register-only broadcast,
as the run is the thread's own elements in Triton's blocked layout). A kernel that loops over the reduced
dimension emits the coarse code before its loop (``hoist``): the value is loop-invariant, as in XLA's kernel.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs

from fusegen.codegen.elemental.common import COMPLEX_PARTS, Cx
from fusegen.hlo.ir import Instruction, Shape


@attrs.frozen
class UniformRuns:
    """The run structure of a linear-index kernel (``KernelContext.runs``).

    Attributes:
        base: the fine linear index variable (``"lin_c"``), ``[BLOCK]``, clamped into ``[0, N)``; ``""``: none.
        width: consecutive lanes a thread holds (XLA's unroll factor; ``BLOCK`` is a multiple of it).
        coarse_base: the variable holding ``base // width`` on the coarse block (``"lin_q"``).
        coarse_shape: the coarse block's shape text (``"[BLOCK // 4]"``).
        expand: the broadcast of a coarse value ``{x}`` to the block (default: runs of ``width`` lanes).
        seeds: fine index variable -> its coarse twin, for variables the kernel defines itself.
        hoist: where coarse code is written (before the kernel's loop); ``None``: in place.
    """

    base: str
    width: int
    coarse_base: str
    coarse_shape: str
    expand: str = ""
    seeds: dict = attrs.field(factory=dict)
    hoist: Any = attrs.field(default=None, eq=False)

    def broadcast(self, x: str) -> str:
        """The expression broadcasting coarse value ``x`` over its run."""
        if self.expand:
            return self.expand.format(x=x)
        w = self.width
        return f"tl.reshape(tl.broadcast_to({x}[:, None], [BLOCK // {w}, {w}]), [BLOCK])"

    def prologue(self, pid: str) -> str:
        """The line defining :attr:`coarse_base` from the program id expression ``pid``."""
        w = self.width
        return (f"{self.coarse_base} = tl.minimum({pid} * (BLOCK // {w}) + tl.arange(0, BLOCK // {w}), "
                f"(N - 1) // {w})")


class UniformRunsMixin:
    """Coarse twins of index variables and run-uniform loads (a mixin of :class:`ElementalGenerator`)."""

    def coarse(self, a: int | str) -> int | str | None:
        """``a`` on the coarse block (an int stays an int), or ``None`` when ``a`` varies within a run."""
        if isinstance(a, int):
            return a
        hit = self.root_gen._coarse.get(a)
        if hit is None and self.ctx.runs is not None:
            hit = self.ctx.runs.seeds.get(a)
        return hit

    def _at_hoist(self, make: Callable[[], Any]) -> Any:
        """``make()`` with the kernel's lines going to :attr:`UniformRuns.hoist` (when set)."""
        hoist = self.ctx.runs.hoist
        if hoist is None:
            return make()
        body = self.ctx.body
        self.ctx.body = hoist
        try:
            return make()
        finally:
            self.ctx.body = body

    def _twin(self, result: int | str, make: Callable[..., int | str], *operands: int | str) -> int | str:
        """Record the coarse twin of ``result`` = ``make(*operands)`` when every operand has one."""
        runs = self.ctx.runs
        if runs is None or not isinstance(result, str) or result in self.root_gen._coarse:
            return result
        qs = [self.coarse(o) for o in operands]
        if all(q is not None for q in qs):
            q = self._at_hoist(lambda: make(*qs))
            if isinstance(q, (int, str)):
                self.root_gen._coarse[result] = q
        return result

    def _twin_div(self, result: int | str, a: int | str, k: int) -> int | str:
        runs = self.ctx.runs
        if runs is not None and a == runs.base and isinstance(result, str) and k % runs.width == 0:
            if result not in self.root_gen._coarse:
                q = k // runs.width
                self.root_gen._coarse[result] = (runs.coarse_base if q == 1 else
                                                 self._at_hoist(lambda: self.iexpr(f"{runs.coarse_base} // {q}", "q")))
            return result
        return self._twin(result, lambda x: self.idiv(x, k), a)

    def _load_runs(self, ptr: str, shape: Shape, lin: str, inst: Instruction) -> Any:
        """The load at ``lin`` on the coarse block broadcast over each run, or ``None`` when ``lin`` has no coarse
        twin or the kernel is not at its main block (unmasked: offsets are in range by the generator's
        invariant, and a run's lanes share the address)."""
        runs, ctx = self.ctx.runs, self.ctx
        if runs is None or ctx.block_shape != "[BLOCK]" or ctx.mask != "mask":
            return None
        q = self.coarse(lin)
        if not isinstance(q, str):
            return None

        def load(off: str, hint: str) -> str:
            x = self._at_hoist(lambda: ctx.emit(f"tl.load({ptr} + {off})", hint + "_q"))
            return ctx.emit(runs.broadcast(x), hint)

        if shape.element_type in COMPLEX_PARTS:
            o2 = self._at_hoist(lambda: ctx.emit(f"{q} * 2", "off"))
            return Cx((load(o2, f"{inst.name}_re"), load(f"{o2} + 1", f"{inst.name}_im")))
        v = load(q, inst.name)
        if shape.element_type == "pred":
            v = ctx.emit(f"{v} != 0", inst.name)
        return v
