"""The verdict speaks of the compiled program: each kernel also runs as compiled for sm_90, and agrees bit for bit.

The judged run interprets a kernel's :attr:`~fusegen.codegen.kernel.KernelSource.interpret_variant` (larger tiles,
the same arithmetic) or widens a linear kernel's ``BLOCK`` (``interpret_max_programs``), so the program judged is
not the one compiled. :class:`CompiledTrace` watches that run (the ``before_kernel`` hook of
:func:`~fusegen.codegen.triton_runtime.run_fusion`: the state of every buffer a kernel writes, before it runs) and
:meth:`CompiledTrace.check` then runs each such kernel as compiled (its own source, constexprs and grid) on the same
inputs and compares its output elements with the judged run's, bit for bit:

* **every program id** where the grid has at most :data:`SMALL_GRID` programs: from the buffers' state before the
  kernel, every buffer it writes compared whole with the state after it;
* **a sample** otherwise, run through a program-id map the kernel does not see
  (:func:`~fusegen.codegen.triton_runtime.run_programs`): the first and last programs and one seeded random one
  (a tile origin wrong for every interior program reads right at both ends), then, while the compiled runs
  took less than :data:`BUDGET_FRACTION` of the kernel's judged run (at least :data:`MIN_BUDGET_S`), the programs
  of the last tile along each tile axis and the other seeded random ones (:func:`sample_program_ids`). A
  buffer the fusion has not written yet is filled with :data:`SENTINEL` bytes first, and the elements that differ
  from it afterwards are the programs' elements (one holding the sentinel's own bit pattern is not told from an
  unwritten one); a buffer holding data (an in-place output, a buffer an earlier kernel wrote) keeps it, and the
  elements the programs changed are compared. A difference is confirmed on the buffers' true state before it is
  reported (a kernel may read its own output).
* **the whole launch** where a sample means nothing: atomics (the programs' order decides the values), a kernel of
  several launches (each reads the last one's writes), launches an interpreter variant merges
  (:attr:`~fusegen.codegen.kernel.KernelSource.scalar_launches`); run whole up to :data:`WHOLE_MAX_PROGRAMS`
  programs within the same time budget (at least :data:`WHOLE_MIN_BUDGET_S`), else ``skipped`` with the reason.

Bit for bit, with one allowance: a GEMM's interpreter variant sums each ``tl.dot``'s products in larger groups
(``block_k`` up to 128, whole tiles through numpy's BLAS) than the compiled K loop, so their f32 sums may differ in
the last bits. Where the variant of a kernel with ``tl.dot`` ran, a float element that differs within two ulps of its
type plus :data:`REASSOCIATION_RTOL` of the largest compared magnitude counts as ``reassociated`` (``--json``), not
as a difference; summing in the compiled grouping in the interpreter cost 8 times the variant's time on gpt12's MLP
GEMM. Any other difference makes the fusion a mismatch naming the kernel, its variant and the first element.

A kernel the judged run ran as compiled (no variant, not widened) is ``same`` without a second run. No XLA
counterpart: XLA runs only the compiled kernel.
"""

from __future__ import annotations

import re
import time
import zlib
from typing import Any, Sequence

import attrs
import numpy as np

from fusegen.codegen import triton_runtime
from fusegen.codegen.kernel import EmittedFusion, KernelSource
from fusegen.hlo import dtypes

__all__ = ["CompiledTrace", "CompiledProgramCheck", "KernelCheck", "sample_program_ids", "boundary_program_ids",
           "SMALL_GRID", "RANDOM_IDS", "ALWAYS_RUN", "WHOLE_MAX_PROGRAMS", "SENTINEL"]

#: Grids of at most this many programs run every program id.
SMALL_GRID = 8
#: Seeded random program ids in a sample, beside the first, last and boundary ones.
RANDOM_IDS = 2
#: The first ids of a sample that run whatever the time budget: the first, the last and one random program.
ALWAYS_RUN = 3
#: At most this many boundary program ids in a sample.
MAX_BOUNDARY = 4
#: A sample runs its first :data:`ALWAYS_RUN` programs, then the others in order while the compiled runs of the
#: kernel took less than this fraction of the kernel's judged run, or :data:`MIN_BUDGET_S` (a compiled program of
#: XLA's small tiles costs the interpreter about as much as a whole variant program: a GEMM's 16x8 tile loops over
#: all of K).
BUDGET_FRACTION = 0.1
#: ... seconds, the least budget of a sampled kernel.
MIN_BUDGET_S = 0.02
#: ... seconds, the least budget of a kernel run whole.
WHOLE_MIN_BUDGET_S = 0.5
#: Programs per launch of a whole run between looks at the budget.
_WHOLE_CHUNK = 16
#: A kernel that cannot be sampled runs whole up to this many programs (all its launches together).
WHOLE_MAX_PROGRAMS = 256
#: The byte a buffer the fusion has not written yet is filled with before a sample runs.
SENTINEL = 0xA5
#: Sampled ids listed per kernel in the JSON.
_LISTED_IDS = 32

_ATOMIC = re.compile(r"tl\.atomic_\w+\(|\batom\.")


def _num_programs(grid: Sequence[int]) -> int:
    n = 1
    for g in grid:
        n *= int(g)
    return n


def _grid3(grid: Sequence[int]) -> tuple[int, int, int]:
    g = tuple(int(x) for x in grid) + (1, 1, 1)
    return g[0], g[1], g[2]


def _unlinear(pid: int, grid: Sequence[int]) -> tuple[int, int, int]:
    gx, gy, _ = _grid3(grid)
    return pid % gx, (pid // gx) % gy, pid // (gx * gy)


# --------------------------------------------------------------------------------------------------
# which program ids
# --------------------------------------------------------------------------------------------------
_DIV_MOD = re.compile(r"\(\s*(\w+)\s*//\s*(\d+)\s*\)\s*%\s*(\d+)")
_MOD = re.compile(r"(?<![\w)])(\w+)\s*%\s*(\d+)")
_DIV = re.compile(r"^\s*(\w+)\s*=\s*\(?\s*(\w+)\s*//\s*(\d+)\s*\)?\s*$", re.M)
_PID = re.compile(r"^\s*(\w+)\s*=\s*tl\.program_id\(0\)\s*$", re.M)
_TILE = re.compile(r"^\s*(\w+)\s*=\s*(\w+)\s*\*\s*(\w+)\s*\+\s*\w+\s*$", re.M)


def boundary_program_ids(ks: KernelSource) -> list[int]:
    """Linear program ids (``x + gx * (y + gy * z)``) of ``ks``'s launch whose tile is the last along a dimension.

    The last program along each grid axis; and where the kernel decomposes its program id, or a tile id
    ``pid * BLOCK + t``, into tile coordinates as fusegen's emitters write them (``(pid // S) % C``,
    ``pid % C``, ``rest = tile // S``), the program holding the last tile along each such coordinate (the others
    0), and the first tile of the last outermost row. A heuristic on the source text: a pattern it does not see
    only makes the sample plainer.
    """
    grid = _grid3(ks.launch.grid)
    m = _num_programs(grid)
    out: list[int] = []

    def add(pid: int) -> None:
        if 0 <= pid < m and pid not in out:
            out.append(pid)

    gx, gy, gz = grid
    add(gx - 1)
    add((gy - 1) * gx)
    add((gz - 1) * gx * gy)
    src = ks.source
    info: dict[str, tuple[int, int]] = {r: (1, 1) for r in (_PID.findall(src) or ["pid"])}  # var -> (stride, per)
    for name, base, scale in _TILE.findall(src):  # tile = pid * BLOCK + t: BLOCK tiles per program
        per = int(scale) if scale.isdigit() else ks.constexprs.get(scale)
        if info.get(base) == (1, 1) and isinstance(per, int) and per > 0:
            info[name] = (1, per)
    for name, base, d in _DIV.findall(src):
        if base in info:
            info[name] = (info[base][0] * int(d), info[base][1])
    tiles: list[tuple[int, int]] = []  # (tile id, tiles per program)
    for base, d, c in _DIV_MOD.findall(src):
        if base in info:
            tiles.append(((int(c) - 1) * info[base][0] * int(d), info[base][1]))
    for base, c in _MOD.findall(src):
        if base in info:
            tiles.append(((int(c) - 1) * info[base][0], info[base][1]))
    for name, base, _ in _DIV.findall(src):  # the outermost coordinate: its last row's first tile
        if base in info:
            step, per = info[name]
            tiles.append(((-(-m * per // step) - 1) * step, per))
    for t, per in tiles:
        add(t // per)
    return out


def sample_program_ids(ks: KernelSource, seed: int = 0) -> tuple[list[int], bool]:
    """The linear program ids of ``ks``'s launch the compiled check runs, and whether they are a sample.

    Every id where the grid has at most :data:`SMALL_GRID` programs; else the first, the last, one of
    :data:`RANDOM_IDS` drawn by ``numpy``'s generator from ``seed`` and the kernel's name and grid (the same ids on
    every run), up to :data:`MAX_BOUNDARY` of :func:`boundary_program_ids` and the other random ones, in that order
    without repeats. The first :data:`ALWAYS_RUN` run whatever the time budget.
    """
    m = _num_programs(ks.launch.grid)
    if m <= SMALL_GRID:
        return list(range(m)), False
    ids = [0, m - 1]
    rng = np.random.default_rng([seed, zlib.crc32(f"{ks.name}:{tuple(ks.launch.grid)}".encode())])
    drawn: list[int] = []
    while len(drawn) < min(RANDOM_IDS, m - 2):
        r = int(rng.integers(0, m))
        if r not in ids and r not in drawn:
            drawn.append(r)
    ids += drawn[:1]
    bounds = 0
    for b in boundary_program_ids(ks):
        if bounds >= MAX_BOUNDARY:
            break
        if b not in ids and b not in drawn:
            ids.append(b)
            bounds += 1
    return ids + drawn[1:], True


# --------------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------------
@attrs.frozen
class KernelCheck:
    """One kernel of a fusion run as compiled.

    Attributes:
        kernel: the kernel's name.
        variant: what the judged run ran instead: ``"interpret_variant"``, ``"widened"`` (a wider ``BLOCK``) or
            ``"none"`` (the kernel itself).
        status: ``"same"`` (bit for bit, up to ``reassociated`` elements), ``"differs"`` or ``"skipped"``
            (``reason`` says why).
        programs: programs of the kernel's launches (all launches together).
        program_ids: how many of them ran as compiled.
        sampled: ``program_ids`` is a sample (:func:`sample_program_ids`).
        ids: the linear ids that ran (up to 32; empty where the whole launch ran or none needed to).
        reason: why skipped, how it ran, or the first differing element.
        first_difference: ``{"buffer", "index", "storage_position", "program", "compiled", "judged",
            "differing_elements"}`` of the first element that differs (``index``: the logical index in the output
            leaf or scratch buffer; ``program``: the linear id that wrote it, where known; values as text with their
            bits), else ``None``.
        reassociated: elements that differ in bits but within the reassociation allowance of a ``tl.dot`` the
            interpreter variant sums in other groups (``_allowance``; 0 for every other kernel).
    """

    kernel: str
    variant: str
    status: str
    programs: int
    program_ids: int
    sampled: bool = False
    ids: tuple[int, ...] = ()
    reason: str = ""
    first_difference: dict | None = None
    reassociated: int = 0

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "variant": self.variant, "status": self.status, "programs": self.programs,
                "program_ids": self.program_ids, "sampled": self.sampled, "ids": list(self.ids),
                "bitwise": self.status == "same" and not self.reassociated, "reassociated": self.reassociated,
                "reason": self.reason, "first_difference": self.first_difference}


_VARIANT_RANK = {"interpret_variant": 2, "widened": 1, "none": 0}
_STATUS_RANK = {"differs": 2, "skipped": 1, "same": 0}


@attrs.frozen
class CompiledProgramCheck:
    """A fusion's kernels run as compiled, against the judged run (``--json``: per fusion ``compiled_program``).

    Attributes:
        kernels: one :class:`KernelCheck` per kernel, in launch order.
        seconds: wall time of the compiled runs, seconds.
        checked_on: the fusion whose execution ran the check, where this fusion runs that fusion's identical
            kernels (:mod:`fusegen.runtime.kernel_reuse`); ``None`` for its own.
    """

    kernels: tuple[KernelCheck, ...]
    seconds: float = 0.0
    checked_on: str | None = None

    @property
    def status(self) -> str:
        """``differs`` if a kernel differs, else ``skipped`` if one was skipped, else ``same``."""
        return max((k.status for k in self.kernels), key=_STATUS_RANK.__getitem__, default="same")

    @property
    def variant(self) -> str:
        """The most removed of the kernels' variants: ``interpret_variant`` > ``widened`` > ``none``."""
        return max((k.variant for k in self.kernels), key=_VARIANT_RANK.__getitem__, default="none")

    @property
    def message(self) -> str:
        """The first differing kernel's reason (naming its variant and element), else the skipped ones'."""
        for k in self.kernels:
            if k.status == "differs":
                return k.reason
        show = [k for k in self.kernels if k.status == "skipped"] or list(self.kernels)
        return "; ".join(f"{k.kernel}: {k.reason}" for k in show)

    def to_json(self) -> dict:
        """``{"status", "variant", "sampled", "program_ids", "programs", "bitwise", "reassociated", "reason",
        "first_difference", "seconds", "checked_on", "kernels": [...]}``: ``program_ids`` of ``programs`` ran as
        compiled over all kernels; ``bitwise``: every compared element is the same bit for bit."""
        first = next((k.first_difference for k in self.kernels if k.first_difference), None)
        re_ = sum(k.reassociated for k in self.kernels)
        return {"status": self.status, "variant": self.variant, "sampled": any(k.sampled for k in self.kernels),
                "program_ids": sum(k.program_ids for k in self.kernels),
                "programs": sum(k.programs for k in self.kernels), "bitwise": self.status == "same" and not re_,
                "reassociated": re_, "reason": self.message,
                "first_difference": first, "seconds": round(self.seconds, 6), "checked_on": self.checked_on,
                "kernels": [k.to_json() for k in self.kernels]}

    def on(self, fusion: str) -> "CompiledProgramCheck":
        """This check as reported for a fusion that ran the kernels of ``fusion``'s execution."""
        return attrs.evolve(self, checked_on=self.checked_on or fusion, seconds=0.0)


# --------------------------------------------------------------------------------------------------
# the trace of the judged run, and the check
# --------------------------------------------------------------------------------------------------
@attrs.define
class _Step:
    kernel: KernelSource
    runner: KernelSource
    buffers: list[np.ndarray]
    writable: list[int]                 # parameter positions the kernel may write
    fresh: set[int]                     # ... of those, buffers nothing wrote yet (zero-filled)
    before: dict[int, np.ndarray]       # ... the others' state before the kernel


def _variant_of(ks: KernelSource, runner: KernelSource, max_programs: int | None) -> str:
    if runner is not ks:
        return "interpret_variant"
    grid, cx = triton_runtime._widened(ks, max_programs)
    return "widened" if (tuple(grid), cx) != (tuple(ks.launch.grid), dict(ks.constexprs)) else "none"


def _runner(ks: KernelSource) -> KernelSource:
    v = ks.interpret_variant
    return v if v is not None and v.params == ks.params else ks


def _merged(step: _Step) -> bool:
    """The runner does no launch of its own: an earlier variant's launch did this kernel's work."""
    return step.runner is not step.kernel and _num_programs(step.runner.launch.grid) == 0


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.itemsize in (1, 2, 4, 8) else a.view(np.uint8)


def _sentinel_like(a: np.ndarray) -> np.ndarray:
    return np.full(a.nbytes, SENTINEL, dtype=np.uint8).view(a.dtype).reshape(a.shape)


class CompiledTrace:
    """Records a fusion's judged run (pass it as ``before_kernel`` to
    :func:`~fusegen.codegen.triton_runtime.run_fusion`), then :meth:`check` runs its kernels as compiled.

    Args:
        emitted: the fusion that runs (its output aliases and copies say which outputs start with data).
        max_programs: the ``interpret_max_programs`` of the judged run (which kernels it widened).
        seed: the seed of the random program ids.
        budget_fraction: a sample's time budget as a fraction of the kernel's judged run (default
            :data:`BUDGET_FRACTION`; ``float("inf")`` runs every sampled id).
    """

    def __init__(self, emitted: EmittedFusion, max_programs: int | None = 16, seed: int = 0,
                 budget_fraction: float | None = None):
        self.max_programs = max_programs
        self.seed = seed
        self.budget_fraction = budget_fraction
        self._times: list[float] = []  # when each kernel's judged launches started
        self.steps: list[_Step] = []
        self._written: set[int] = set()
        self._filled = set(emitted.output_aliases) | {leaf for _, leaf in emitted.copies}
        #: some kernel runs other than as compiled: the buffers' states are kept
        self.active = any(_variant_of(k, _runner(k), max_programs) != "none" for k in emitted.kernels)

    def __call__(self, ks: KernelSource, runner: KernelSource, buffers: list[np.ndarray]) -> None:
        writable = [i for i, p in enumerate(ks.params) if p.kind in ("output", "scratch")]
        fresh = {i for i in writable if id(buffers[i]) not in self._written
                 and not (ks.params[i].kind == "output" and ks.params[i].index in self._filled)}
        before = {i: buffers[i].copy() for i in writable if i not in fresh} if self.active else {}
        self._written.update(id(buffers[i]) for i in writable)
        self.steps.append(_Step(ks, runner, list(buffers), writable, fresh, before))
        self._times.append(time.perf_counter())

    # -- the check ----------------------------------------------------------------------------------
    def check(self) -> CompiledProgramCheck:
        """Run every kernel the judged run replaced as compiled and compare (see the module docstring).

        Raises:
            triton.runtime.errors.InterpreterError: a compiled program failed to run (a kernel bug the variant
                hid; the executor reports the fusion's error).
        """
        t0 = time.perf_counter()
        self._times.append(t0)  # the judged run ended (check is called right after it)
        out: list[KernelCheck] = []
        j = 0
        while j < len(self.steps):
            step = self.steps[j]
            end = j + 1
            while end < len(self.steps) and _merged(self.steps[end]):
                end += 1
            variant = _variant_of(step.kernel, step.runner, self.max_programs)
            programs = sum(_num_programs(s.kernel.launch.grid) * len(s.kernel.launch_args) for s in self.steps[j:end])
            if variant == "none" and end == j + 1:
                out.append(KernelCheck(step.kernel.name, "none", "same", programs, programs,
                                       reason="the judged run ran it as compiled"))
            elif end > j + 1 or len(step.kernel.launch_args) > 1 or _ATOMIC.search(step.kernel.source) \
                    or step.runner.launch_args != step.kernel.launch_args:
                out.extend(self._whole(j, end, variant, programs))
            else:
                out.append(self._sampled(j, variant))
            j = end
        return CompiledProgramCheck(tuple(out), time.perf_counter() - t0)

    def _after(self, j: int, buf: np.ndarray) -> np.ndarray:
        """The judged run's state of ``buf`` after step ``j``: before the next step that writes it, else final."""
        for s in self.steps[j + 1:]:
            for i in s.writable:
                if s.buffers[i] is buf:
                    return s.before[i]
        return buf

    @staticmethod
    def _start(step: _Step, i: int) -> np.ndarray:
        return np.zeros_like(step.buffers[i]) if i in step.fresh else step.before[i].copy()

    def _whole(self, j: int, end: int, variant: str, programs: int) -> list[KernelCheck]:
        group = self.steps[j:end]
        first = group[0].kernel
        why = ("atomics (the programs' order decides the values)" if _ATOMIC.search(first.source)
               else f"{len(group)} kernels whose launches its interpreter variant merges" if len(group) > 1
               else f"{len(first.launch_args)} launches, each reading the last one's writes"
               if len(first.launch_args) > 1 else "its interpreter variant merges its launches")

        def rows(status: str, ran: int, reason: str, diff: dict | None = None, reassociated: int = 0) -> list:
            return [KernelCheck(first.name, variant, status, programs, ran, reason=reason, first_difference=diff,
                                reassociated=reassociated)] + \
                [KernelCheck(s.kernel.name, "interpret_variant", status, 0, 0, reason=f"run with {first.name}")
                 for s in group[1:]]

        if programs > WHOLE_MAX_PROGRAMS:
            return rows("skipped", 0, f"not sampled: {why}; too many programs to run whole "
                                      f"({programs} > {WHOLE_MAX_PROGRAMS})")
        work: dict[int, np.ndarray] = {}
        last: dict[int, tuple[_Step, int]] = {}  # id(judged buffer) -> a step of the group writing it, its position
        for s in group:
            for i in s.writable:
                if id(s.buffers[i]) not in work:
                    work[id(s.buffers[i])] = self._start(s, i)
                last[id(s.buffers[i])] = (s, i)
        budget = self._budget(j, end, WHOLE_MIN_BUDGET_S)
        t0, ran = time.perf_counter(), 0
        for s in group:  # launch by launch, program chunks in id order (as the interpreter runs a launch)
            bufs = [work.get(id(b), b) for b in s.buffers]
            compiled, grid = attrs.evolve(s.kernel, interpret_variant=None), s.kernel.launch.grid
            for args in s.kernel.launch_args:
                c = 0
                while c < _num_programs(grid):
                    spent = time.perf_counter() - t0
                    if ran and spent + spent / ran * (programs - ran) > budget:  # the first program sets the pace
                        return rows("skipped", ran, f"not sampled: {why}; running it whole as compiled would take "
                                                    f"about {spent / ran * programs:.2g} s, over its time budget "
                                                    f"({budget:.2g} s)")
                    ids = range(c, min(c + (_WHOLE_CHUNK if ran else 1), _num_programs(grid)))
                    triton_runtime.run_programs(compiled, bufs, [_unlinear(p, grid) for p in ids], scalars=args)
                    ran, c = ran + len(ids), ids.stop
        res = _Comparison()
        for key, (s, i) in last.items():
            _merge(res, _first_difference(work[key], self._after(end - 1, s.buffers[i]), None, s.kernel.params[i],
                                          _reassociates(s, variant)))
        if res.diff is not None:
            return rows("differs", programs, _differs_text(first.name, variant, res.diff), res.diff)
        return rows("same", programs, f"not sampled: {why}; every program ran as compiled and equals the {variant} "
                                      + _bitwise_text(res), reassociated=res.reassociated)

    def _run(self, step: _Step, ids: list[int], sentinel: bool,
             work: dict[int, np.ndarray] | None = None) -> dict[int, np.ndarray]:
        """The programs ``ids`` of ``step``'s kernel as compiled; its writable buffers afterwards (by position),
        started from ``work`` or their true state or, where nothing wrote them yet and ``sentinel``, from
        :data:`SENTINEL`."""
        if work is None:
            work = {i: _sentinel_like(step.buffers[i]) if sentinel and i in step.fresh else self._start(step, i)
                    for i in step.writable}
        triton_runtime.run_programs(attrs.evolve(step.kernel, interpret_variant=None),
                                    [work.get(i, b) for i, b in enumerate(step.buffers)],
                                    [_unlinear(p, step.kernel.launch.grid) for p in ids])
        return work

    def _budget(self, j: int, end: int, least: float) -> float:
        """Seconds the compiled runs of steps ``j`` to ``end`` may take: :data:`BUDGET_FRACTION` of their judged run,
        at least ``least``."""
        fraction = BUDGET_FRACTION if self.budget_fraction is None else self.budget_fraction
        return max(fraction * (self._times[end] - self._times[j]), least)

    def _run_within_budget(self, j: int, ids: list[int]) -> tuple[list[int], dict[int, np.ndarray]]:
        """The first :data:`ALWAYS_RUN` of ``ids``, then the next ones one at a time while the budget lasts (see
        :data:`BUDGET_FRACTION`); the ids that ran and the buffers (sentinel-filled where fresh) afterwards."""
        step = self.steps[j]
        budget = self._budget(j, j + 1, MIN_BUDGET_S)
        t0 = time.perf_counter()
        work = self._run(step, ids[:ALWAYS_RUN], True)
        ran = min(ALWAYS_RUN, len(ids))
        while ran < len(ids) and time.perf_counter() - t0 < budget:
            self._run(step, ids[ran:ran + 1], True, work)
            ran += 1
        return ids[:ran], work

    def _compare(self, j: int, work: dict[int, np.ndarray], written: dict[int, np.ndarray] | None,
                 variant: str) -> _Comparison:
        step = self.steps[j]
        res = _Comparison()
        for i in step.writable:
            _merge(res, _first_difference(work[i], self._after(j, step.buffers[i]),
                                          None if written is None else written[i], step.kernel.params[i],
                                          _reassociates(step, variant)))
        return res

    def _writes(self, step: _Step, work: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        return {i: _bits(work[i]) != _bits(_sentinel_like(work[i]) if i in step.fresh else step.before[i])
                for i in step.writable}

    def _sampled(self, j: int, variant: str) -> KernelCheck:
        step = self.steps[j]
        ks = step.kernel
        ids, sampled = sample_program_ids(ks, self.seed)
        if not sampled:  # every program, from the buffers' true state: compared whole
            res = self._compare(j, self._run(step, ids, False), None, variant)
        else:
            ids, work = self._run_within_budget(j, ids)
            written = self._writes(step, work)
            res = self._compare(j, work, written, variant)
            if res.diff is not None and step.fresh:  # confirmed on the true state (a kernel may read its output)
                res = self._compare(j, self._run(step, ids, False), written, variant)
        programs = _num_programs(ks.launch.grid)
        listed = tuple(ids[:_LISTED_IDS])
        if res.diff is not None:
            res.diff["program"] = self._program_of(step, ids, res.diff)
            return KernelCheck(ks.name, variant, "differs", programs, len(ids), sampled, listed,
                               _differs_text(ks.name, variant, res.diff), res.diff)
        how = (f"{len(ids)} sampled programs (first, last, a random one, then boundary and random ones within the "
               "time budget)") \
            if sampled else f"every program ({len(ids)})"
        return KernelCheck(ks.name, variant, "same", programs, len(ids), sampled, listed,
                           f"{how} as compiled equal the {variant} {_bitwise_text(res)}", reassociated=res.reassociated)

    def _program_of(self, step: _Step, ids: list[int], diff: dict) -> int | None:
        """The program among ``ids`` that writes the differing element (each run alone on sentinel buffers)."""
        i = next(i for i in step.writable if _param_name(step.kernel.params[i]) == diff["buffer"])
        for p in ids:
            work = self._run(step, [p], True)
            if self._writes(step, work)[i][diff["storage_position"]]:
                return p
        return None


# --------------------------------------------------------------------------------------------------
# comparing
# --------------------------------------------------------------------------------------------------
def _logical_index(pos: int, shape: Any) -> list[int]:
    idx = [0] * len(shape.dimensions)
    for d in shape.minor_to_major():
        n = shape.dimensions[d]
        idx[d], pos = pos % n, pos // n
    return idx


def _value_text(buf: np.ndarray, pos: int, element_type: str) -> str:
    raw = buf[pos:pos + 1]
    try:
        v = triton_runtime.from_storage(raw.copy(), element_type)
        text = repr(v.reshape(-1)[0].item()) if v.size else "?"
    except (TypeError, ValueError):
        text = "?"
    return f"{text} (0x{raw.tobytes()[::-1].hex()})"


#: Kernels whose interpreter variant sums a ``tl.dot``'s products in other groups (a GEMM's larger ``block_k`` and
#: tiles): their f32 sums may differ in the last bits from the compiled program's (:func:`_compare`).
_DOT = re.compile(r"\btl\.dot\(")
#: The reassociation allowance, relative to the largest magnitude among the compared elements of a buffer.
REASSOCIATION_RTOL = 2.0 ** -12


@attrs.define
class _Comparison:
    diff: dict | None = None     # the first element outside the comparison (see _first_difference)
    reassociated: int = 0        # elements that differ in bits within the reassociation allowance
    largest: float = 0.0         # ... their largest |compiled - judged| over the allowance (<= 1)


def _float_values(buf: np.ndarray, element_type: str) -> np.ndarray | None:
    if element_type not in ("f16", "bf16", "f32", "f64") and not element_type.startswith("f8"):
        return None
    try:
        return np.asarray(triton_runtime.from_storage(buf, element_type)).astype(np.float64)
    except (TypeError, ValueError):
        return None


def _allowance(judged: np.ndarray, compiled: np.ndarray, scale: float, element_type: str) -> np.ndarray:
    """Per element: two ulps of the element type at the larger magnitude plus :data:`REASSOCIATION_RTOL` times
    ``scale`` (the largest finite magnitude among the compared elements)."""
    import ml_dtypes

    fi = ml_dtypes.finfo(dtypes.numpy_dtype(element_type))
    mag = np.maximum(np.abs(judged), np.abs(compiled))
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(mag, float(fi.smallest_normal)))) - fi.nmant)
    return 2 * ulp + REASSOCIATION_RTOL * scale


def _first_difference(compiled: np.ndarray, judged: np.ndarray, where: np.ndarray | None, param: Any,
                      reassociating: bool = False) -> _Comparison:
    """Compare two storage buffers bit for bit (within ``where``: a bool mask, ``None`` for all); with
    ``reassociating``, float elements whose values differ within :func:`_allowance` are counted, not reported.
    The first other differing element (physical order) is ``{"buffer", "index", "storage_position", "compiled",
    "judged", "differing_elements"}``."""
    bad = _bits(compiled) != _bits(judged)
    if where is not None:
        bad &= where
    out = _Comparison()
    if not bad.any():
        return out
    et = param.shape.element_type
    if reassociating:
        at = np.flatnonzero(bad)
        c, j = _float_values(compiled[at], et), _float_values(judged[at], et)
        if c is not None and j is not None and c.shape == at.shape:
            seen = _float_values(judged if where is None else judged[where], et)
            finite = np.abs(seen[np.isfinite(seen)])
            with np.errstate(all="ignore"):
                ratio = np.abs(c - j) / _allowance(j, c, float(finite.max()) if finite.size else 0.0, et)
            ok = ratio <= 1
            out.reassociated, out.largest = int(ok.sum()), float(ratio[ok].max()) if ok.any() else 0.0
            bad[at[ok]] = False
            if not bad.any():
                return out
    pos = int(np.argmax(bad))
    elem = pos // 2 if et in ("c64", "c128") else pos
    out.diff = {"buffer": _param_name(param), "index": _logical_index(elem, param.shape) if param.shape.numel else [],
                "storage_position": pos, "compiled": _value_text(compiled, pos, et),
                "judged": _value_text(judged, pos, et), "differing_elements": int(bad.sum())}
    return out


def _merge(into: _Comparison, part: _Comparison) -> None:
    into.diff = into.diff or part.diff
    into.reassociated += part.reassociated
    into.largest = max(into.largest, part.largest)


def _reassociates(step: _Step, variant: str) -> bool:
    return variant == "interpret_variant" and bool(_DOT.search(step.kernel.source))


def _bitwise_text(res: _Comparison) -> str:
    if not res.reassociated:
        return "bit for bit"
    return (f"bit for bit but {res.reassociated} element(s) within the allowance of summing a tl.dot's products in "
            f"other groups (at most {res.largest:.2g} of it)")


def _param_name(param: Any) -> str:
    return f"output {param.index}" if param.kind == "output" else f"scratch {param.index}"


def _differs_text(kernel: str, variant: str, diff: dict) -> str:
    return (f"kernel {kernel} as compiled differs from its {variant} at {diff['buffer']} {diff['index']}: "
            f"compiled {diff['compiled']}, judged {diff['judged']} ({diff['differing_elements']} element(s) differ)")
