"""Choosing the winner among profiled candidates (XLA ``PickBestConfig``).

Mirrors ``xla/backends/autotuner/config_selector.cc`` (``PickBestConfig``, lines 34-85) and the
failure kinds of ``xla/backends/autotuner/config_runner.cc`` (228-245).
"""

from __future__ import annotations

import enum
import logging
from typing import Any, Sequence

import attrs

log = logging.getLogger("fusegen.autotuning")

#: ``Autotuner::Options::scratch_bytes_window_size_us`` (autotuner.h:49); not an XLA flag.
DEFAULT_SCRATCH_WINDOW_US = 2.0


class FailureKind(enum.Enum):
    """Why a candidate is out of the running; ``label`` is XLA's printed form."""

    COMPILATION_FAILED = "COMPILATION FAILED"
    EXECUTION_FAILED = "EXECUTION FAILED"
    REDZONE_CHECK_FAILED = "REDZONE CHECK FAILED"
    WRONG_RESULTS = "WRONG RESULTS"

    @property
    def label(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str) -> "FailureKind":
        """Accept ``COMPILATION_FAILED``, ``kCompilationFailed`` or ``COMPILATION FAILED``.

        Raises:
            ValueError: an unknown kind (the message lists the valid names).
        """
        t = text.strip()
        if t.startswith("k") and t[1:2].isupper():  # XLA enum spelling kCompilationFailed
            t = "".join("_" + c if c.isupper() else c for c in t[1:]).lstrip("_")
        t = t.upper().replace(" ", "_")
        if t == "WRONG_RESULT":
            t = "WRONG_RESULTS"
        try:
            return cls[t]
        except KeyError:
            raise ValueError(f"unknown failure kind {text!r}; expected one of {', '.join(k.name for k in cls)}") from None


@attrs.define
class Failure:
    kind: FailureKind
    message: str = ""

    def __str__(self) -> str:
        return f"{self.kind.label}: {self.message}" if self.message else self.kind.label


@attrs.define
class ProfileResult:
    """One candidate after profiling (XLA ``ConfigResult``).

    Attributes:
        name: the candidate's config name.
        duration_us: measured run time in microseconds (meaningless when failed).
        scratch_bytes: scratch bytes the config needs.
        failure: ``None`` for a good candidate.
        trusted: the backend cannot produce wrong results (clustering).
        config: the :class:`fusegen.codegen_backend.Config`, when known.
        output: the candidate's outputs (list of arrays) for clustering, when kept.
        cluster: cluster index after correctness clustering (-1: none).
    """

    name: str
    duration_us: float = 0.0
    scratch_bytes: int = 0
    failure: Failure | None = None
    trusted: bool = True
    config: Any = None
    output: Any = attrs.field(default=None, repr=False)
    cluster: int = -1

    @property
    def failed(self) -> bool:
        return self.failure is not None


class AutotuneError(Exception):
    """An autotuning step failed. ``code`` is XLA's status code name (``NotFound``, ``Internal``...)."""

    def __init__(self, message: str, code: str = "Internal"):
        super().__init__(message)
        self.code = code
        self.message = message


@attrs.frozen
class Selection:
    """What :func:`pick_best_config` chose.

    Attributes:
        index: position of the winner in the profiles passed in.
        result: the winning profile.
        fastest_index: position of the fastest non-failed profile.
        tie_break: True when the scratch-bytes tie-break picked something other than the fastest.
    """

    index: int
    result: ProfileResult
    fastest_index: int
    tie_break: bool


def failures_message(profiles: Sequence[ProfileResult]) -> str:
    """``"\\nFailures (N):\\n<name>: <KIND>: <message>..."`` over the failed profiles."""
    failed = [p for p in profiles if p.failed]
    lines = [f"{p.name}: {p.failure}" for p in failed]
    return f"\nFailures ({len(failed)}):\n" + "\n".join(lines)


def pick_best_config(profiles: Sequence[ProfileResult], window_us: float = DEFAULT_SCRATCH_WINDOW_US) -> Selection:
    """The fastest non-failed profile, then the fewest scratch bytes within ``window_us`` of it.

    Among non-failed profiles with ``duration <= fastest + window_us`` the one with the smallest
    ``scratch_bytes`` wins; equal scratch is broken by the shorter duration, then by order. When the
    tie-break changes the choice a verbose (DEBUG) log line names both configs.

    Mirrors ``PickBestConfig`` (``xla/backends/autotuner/config_selector.cc``).

    Raises:
        AutotuneError: code ``NotFound``, ``"All configs failed during profiling."`` followed by
            ``"\\nFailures (N):\\n"`` and one line per failure, when every profile failed.
    """
    fastest = -1
    for i, p in enumerate(profiles):
        if p.failed:
            continue
        if fastest < 0 or p.duration_us < profiles[fastest].duration_us:
            fastest = i
    if fastest < 0:
        raise AutotuneError("All configs failed during profiling." + failures_message(profiles), code="NotFound")
    limit = profiles[fastest].duration_us + window_us
    best = fastest
    for i, p in enumerate(profiles):
        if p.failed or p.duration_us > limit:
            continue
        b = profiles[best]
        if p.scratch_bytes < b.scratch_bytes or (p.scratch_bytes == b.scratch_bytes and p.duration_us < b.duration_us):
            best = i
    tie = best != fastest
    if tie:
        f, w = profiles[fastest], profiles[best]
        log.debug(
            "PickBestConfig: chose %s (%.3f us, %d scratch bytes) over fastest %s (%.3f us, %d scratch bytes): "
            "fewer scratch bytes within the %.3g us window",
            w.name, w.duration_us, w.scratch_bytes, f.name, f.duration_us, f.scratch_bytes, window_us,
        )
    return Selection(best, profiles[best], fastest, tie)
