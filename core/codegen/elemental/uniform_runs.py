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

An index that moves with the lane has a *lane form* instead: ``(start, stride, start mod width)``, lane ``j`` of
a run holding ``start + stride * j``, ``start`` on the coarse block (kept symbolic until a load needs it). A read
whose offset falls by one a lane from a run-aligned start (``x[:, ::-1]``: ``511 - lin_c % 512``) is one
``[BLOCK // w, w]`` load at the run's lowest address, its columns put back in reverse in registers: XLA loads
the 16 bytes and reverses them in registers, where Triton's axis analysis sees no contiguity in a falling
offset and loads a lane at a time.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs

from fusegen.codegen.elemental.common import COMPLEX_PARTS, Cx
from fusegen.codegen.elemental.vector_reads import plain_vector_type
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction, Shape
from fusegen.hlo.layout_util import dim_strides

# a lane form's start: an int, a coarse variable, or an op on starts built when a load needs it
# (("add", a, b), ("sub", a, b), ("mul", a, k), ("mod", a, k), ("lin", starts, dims, m2m))
Start = Any


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
        whole: every run is wholly inside ``[0, N)`` (``N`` a multiple of ``width``): a run's vector is in range.
    """

    base: str
    width: int
    coarse_base: str
    coarse_shape: str
    expand: str = ""
    seeds: dict = attrs.field(factory=dict)
    hoist: Any = attrs.field(default=None, eq=False)
    whole: bool = False

    def broadcast(self, x: str) -> str:
        """The expression broadcasting coarse value ``x`` over its run."""
        if self.expand:
            return self.expand.format(x=x)
        w = self.width
        return f"tl.reshape(tl.broadcast_to({x}[:, None], [BLOCK // {w}, {w}]), [BLOCK])"

    def prologue(self, pid: str, clamp: bool = True) -> str:
        """The line defining :attr:`coarse_base` from the program id expression ``pid`` (clamped into range
        unless the grid covers ``N`` exactly)."""
        w = self.width
        q = f"{pid} * (BLOCK // {w}) + tl.arange(0, BLOCK // {w})"
        return f"{self.coarse_base} = " + (f"tl.minimum({q}, (N - 1) // {w})" if clamp else q)


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

    # ------------------------------------------------------------------------------------ lane forms
    def _lanes_on(self) -> bool:
        runs = self.ctx.runs
        return runs is not None and runs.whole and runs.hoist is None and self.ctx.steps is None

    def lane_form(self, a: int | str) -> tuple[Start, int, int | None] | None:
        """``(start, stride, start % width)`` of index ``a`` over a thread's run (lane ``j`` holds
        ``start + stride * j``; the modulus ``None`` where unknown), or ``None`` when ``a`` is not affine in
        the lane."""
        w = self.ctx.runs.width
        if isinstance(a, int):
            return a, 0, a % w
        hit = self.root_gen._lanes.get(a)
        if hit is not None:
            return hit
        if a == self.ctx.runs.base:
            return ("mul", self.ctx.runs.coarse_base, w), 1, 0
        q = self.coarse(a)
        if q is None:
            return None
        return q, 0, (q % w if isinstance(q, int) else None)

    def _lane(self, result: int | str, op: str, operands: tuple, k: int = 0, shape: tuple = ()) -> int | str:
        """Record the lane form of ``result`` = ``op(*operands)`` (``k``: the factor of ``mul`` / modulus of
        ``mod``; ``shape``: ``(dims, m2m)`` of ``lin``); nothing for a result uniform over the run."""
        if not self._lanes_on() or not isinstance(result, str) or result in self.root_gen._lanes:
            return result
        forms = [self.lane_form(o) for o in operands]
        if any(f is None for f in forms) or not any(f[1] for f in forms):
            return result
        w = self.ctx.runs.width

        def mod(terms: list[tuple[int | None, int]]) -> int | None:  # (start % w, factor) pairs
            if any(m is None and f % w for m, f in terms):
                return None
            return sum((m or 0) * f for m, f in terms) % w

        (s0, t0, m0), *rest = forms
        if op in ("add", "sub"):
            sign = 1 if op == "add" else -1
            s1, t1, m1 = rest[0]
            out = ((op, s0, s1), t0 + sign * t1, mod([(m0, 1), (m1, sign)]))
        elif op == "mul":
            out = (("mul", s0, k), t0 * k, mod([(m0, k)]))
        elif op == "mod" and t0 == 1 and m0 == 0 and k % w == 0:
            out = (("mod", s0, k), 1, 0)  # a run-aligned run of w never crosses a multiple of k
        elif op == "lin":
            dims, m2m = shape
            strides = dim_strides(dims, m2m)
            out = (("lin", tuple(s for s, _, _ in forms), dims, m2m),
                   sum(t * st for (_, t, _), st in zip(forms, strides)),
                   mod([(m, st) for (_, _, m), st in zip(forms, strides)]))
        else:
            return result
        self.root_gen._lanes[result] = out
        return result

    def _coarse_start(self, s: Start) -> int | str:
        """A lane form's start written on the coarse block."""
        if isinstance(s, (int, str)):
            return s
        op, *args = s
        if op == "lin":
            starts, dims, m2m = args
            return self.linearize(tuple(self._coarse_start(x) for x in starts), dims, m2m)
        if op in ("mul", "mod"):
            a = self._coarse_start(args[0])
            return self.imul(a, args[1]) if op == "mul" else self.imod(a, args[1])
        a, b = (self._coarse_start(x) for x in args)
        if op == "sub" and isinstance(a, int) and isinstance(b, str):
            return self.iexpr(f"{a} - {b}", "q")  # isub would widen the int to the fine block
        return self.iadd(a, b) if op == "add" else self.isub(a, b)

    def _shifted(self, s: Start, c: int) -> Start:
        """Start ``s + c``, the constant folded into a leaf where it can be (so ``511 - x`` shifted by -3 is
        ``508 - x``: Triton's axis analysis then sees the run's low address aligned)."""
        if isinstance(s, int):
            return s + c
        if isinstance(s, tuple) and s[0] in ("add", "sub"):
            return (s[0], self._shifted(s[1], c), s[2])
        if isinstance(s, tuple) and s[0] == "mul" and c % s[2] == 0:
            return ("mul", self._shifted(s[1], c // s[2]), s[2])
        if isinstance(s, tuple) and s[0] == "lin":
            starts, dims, m2m = s[1:]
            minor = next((d for d in m2m if dims[d] != 1), None)
            if minor is not None:  # linear in its starts: the stride-1 start takes the constant
                return ("lin", tuple(self._shifted(x, c) if d == minor else x for d, x in enumerate(starts)), dims, m2m)
        return ("add", s, c)

    def _load_reversed_runs(self, ptr: str, shape: Shape, lin: str, inst: Instruction) -> str | None:
        """The load at ``lin`` as one ``[BLOCK // w, w]`` vector a run, reversed in registers, where ``lin``
        falls by one a lane from an aligned run start; ``None`` otherwise (unmasked: every run is in range,
        ``UniformRuns.whole``, and its offsets are by the generator's invariant)."""
        ctx = self.ctx
        if not self._lanes_on() or ctx.block_shape != "[BLOCK]" or ctx.mask != "mask":
            return None
        et, w = shape.element_type, ctx.runs.width
        if not plain_vector_type(et) or dtypes.bit_width(et) * w > 128:
            return None
        form = self.lane_form(lin)
        if form is None or form[1] != -1 or form[2] != (w - 1) % w:
            return None
        low = self._coarse_start(self._shifted(form[0], 1 - w))
        if not isinstance(low, str):
            return None
        t = ctx.emit(f"tl.load({ptr} + ({low}[:, None] + tl.arange(0, {w})[None, :]))", inst.name + "_v")
        block = f"BLOCK // {w}"
        rev = self.joined_columns(self.vector_columns(t, w, block)[::-1], block)
        return ctx.emit(f"tl.reshape({rev}, [BLOCK])", inst.name)
