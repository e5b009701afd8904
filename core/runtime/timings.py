"""Where the time of ``fusegen run`` goes: wall-clock seconds per phase, per module and per fusion.

Phases (keys of ``--json``'s ``"timings"``, all in seconds):

* ``parse``: reading and parsing the HLO file (module level; a file of several modules gives each module
  the whole file's parse time);
* ``passes``: the default pipeline on an unoptimized module (module level);
* ``dispatch``: fusion analysis, the emitter-kind decision and the emitter's construction;
* ``codegen``: the emitter generating its Triton kernels;
* ``compile``: compiling the kernels for sm_90 (``0`` with ``--no-compile``; ``0`` when served from the
  in-process cache of an identical kernel);
* ``interpret``: running the fusion: its kernels in Triton's interpreter, or its execution backend;
* ``reference``: the reference evaluator on the fusion's operands (at module level also the module's own
  reference run and the f64 oracle of the verdict; with ``--jobs`` above 1 those two run in a process beside
  the kernels, :mod:`fusegen.runtime.oracles`, and only the wait for their answers counts);
* ``compare``: comparing the kernel's result with the reference and judging the error budget;
* ``other`` (module level): non-fusion instructions on their execution backends;
* ``seconds``: the whole (a fusion's: the sum of its phases; a module's: wall time from parse to verdict).

No XLA counterpart: XLA's ``--xla_dump_hlo_pass_re`` timings and ``tsl::profiler`` traces play this role.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

#: phases of a fusion, in pipeline order
FUSION_PHASES = ("dispatch", "codegen", "compile", "interpret", "reference", "compare")
#: phases of a module: the fusions' phases plus those outside them
MODULE_PHASES = ("parse", "passes") + FUSION_PHASES + ("other",)


class Timings:
    """Seconds per phase, accumulated over every execution (a fusion inside a ``while`` body adds up)."""

    __slots__ = ("phases",)

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}

    def add(self, phase: str, seconds: float) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the wall time of the ``with`` body to ``name`` (also when it raises)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def get(self, phase: str) -> float:
        return self.phases.get(phase, 0.0)

    def to_json(self, keys: tuple[str, ...] = FUSION_PHASES, seconds: float | None = None) -> dict[str, float]:
        """``{phase: seconds}`` for every key (``0.0`` when not reached) plus ``"seconds"`` (default: their sum),
        rounded to microseconds."""
        d = {k: round(self.get(k), 6) for k in keys}
        d["seconds"] = round(sum(self.get(k) for k in keys) if seconds is None else seconds, 6)
        return d


def module_timings(fusion_timings: list[Timings], module_level: Timings) -> Timings:
    """A module's timings: the sum of its fusions' phases plus its own (parse, passes, module reference...)."""
    total = Timings()
    for t in fusion_timings + [module_level]:
        for k, v in t.phases.items():
            total.add(k, v)
    return total


def slowest(fusions: list, n: int = 10) -> list:
    """The ``n`` fusion reports with the largest total time (``report.timings``), slowest first."""
    return sorted(fusions, key=lambda f: -sum(f.timings.phases.values()))[:n]
