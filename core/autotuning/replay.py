"""Replaying recorded measurements through the real selection code (``fusegen tune --replay``).

A record (written by :func:`write_record`, ``fusegen run --autotune --record DIR``) is::

    {"window_us": 2, "rtol": 0.1, "check_correctness": true,
     "candidates": [{"name": str, "backend": str, "trusted": bool, "duration_us": float,
                     "scratch_bytes": int,
                     "failure": null | "COMPILATION_FAILED" | "EXECUTION_FAILED" | "REDZONE_CHECK_FAILED"
                                | "WRONG_RESULTS",
                     "output": [numbers]}]}

(plus optional ``instruction``, ``key``, per-candidate ``message`` and ``source``: where the durations came from,
:meth:`fusegen.cache.provenance.Source.to_json`; a record without one is from before fusegen recorded it). Replay follows
``Autotuner::GetTunedConfig``: one candidate is the winner without profiling; no compiled candidate
is ``"No candidates could be compiled."``; one compiled candidate wins; otherwise the recorded
candidates go through :func:`fusegen.autotuning.clustering.profile_all` (trusted first, clusters at
``rtol``, demotion) and :func:`fusegen.autotuning.selection.pick_best_config` (``window_us``). A candidate
the tuning found WRONG_RESULTS is recorded with that failure, its message and its output; the replay computes
WRONG_RESULTS again from the outputs (the recorded verdict is what the tuning saw, not an input), so a record
edited by hand cannot make a wrong candidate right or a right one wrong.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Sequence

import attrs
import numpy as np

from fusegen.autotuning.clustering import DEFAULT_RTOL, buffers_match, profile_all
from fusegen.autotuning.selection import (DEFAULT_SCRATCH_WINDOW_US, AutotuneError, Failure, FailureKind,
                                          ProfileResult, pick_best_config)

RECORDABLE = ("COMPILATION_FAILED", "EXECUTION_FAILED", "REDZONE_CHECK_FAILED")
#: Failures a record also says, but the replay recomputes from the outputs.
RECOMPUTED = ("WRONG_RESULTS",)


class RecordError(ValueError):
    """A replay record is malformed; the message names the file and the field."""


@attrs.define
class ReplayOutcome:
    """Result of a replay: the JSON of ``--json`` is :meth:`to_json`."""

    winner: str | None
    error: str | None
    failures: dict[str, str]
    messages: dict[str, str]
    results: list[ProfileResult]
    tie_break: bool = False
    fastest: str | None = None
    #: where the record's durations came from (``Source.to_json()``); ``None`` for a record without one
    source: dict | None = None

    def to_json(self) -> dict:
        out = {"winner": self.winner, "error": self.error, "failures": dict(self.failures)}
        if self.source is not None:
            out["source"] = dict(self.source)
        return out


def _num(c: dict, field: str, source: str, i: int, default=None, kind=(int, float)):
    v = c.get(field, default)
    if v is None and default is None:
        raise RecordError(f"{source}: candidates[{i}].{field} is required")
    if not isinstance(v, kind) or isinstance(v, bool):
        raise RecordError(f"{source}: candidates[{i}].{field} must be a number, got {v!r}")
    return v


def load_record(obj: Any, source: str = "<record>") -> dict:
    """Validate a record (parsed JSON) and return it with defaults filled in.

    Raises:
        RecordError: naming ``source`` and the first bad field.
    """
    if not isinstance(obj, dict):
        raise RecordError(f"{source}: a record must be a JSON object")
    window = obj.get("window_us", DEFAULT_SCRATCH_WINDOW_US)
    rtol = obj.get("rtol", DEFAULT_RTOL)
    check = obj.get("check_correctness", True)
    for name, v in (("window_us", window), ("rtol", rtol)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise RecordError(f"{source}: {name} must be a non-negative number, got {v!r}")
    if not isinstance(check, bool):
        raise RecordError(f"{source}: check_correctness must be true or false, got {check!r}")
    cands = obj.get("candidates")
    if not isinstance(cands, list) or not cands:
        raise RecordError(f"{source}: candidates must be a non-empty list")
    seen = set()
    out = []
    for i, c in enumerate(cands):
        if not isinstance(c, dict):
            raise RecordError(f"{source}: candidates[{i}] must be an object")
        name = c.get("name")
        if not isinstance(name, str) or not name:
            raise RecordError(f"{source}: candidates[{i}].name must be a non-empty string")
        if name in seen:
            raise RecordError(f"{source}: candidates[{i}].name {name!r} appears twice")
        seen.add(name)
        trusted = c.get("trusted", False)
        if not isinstance(trusted, bool):
            raise RecordError(f"{source}: candidates[{i}].trusted must be true or false")
        failure = c.get("failure")
        if failure is not None:
            try:
                kind = FailureKind.parse(str(failure))
            except ValueError as e:
                raise RecordError(f"{source}: candidates[{i}].failure: {e}") from None
            if kind.name not in RECORDABLE + RECOMPUTED:
                raise RecordError(f"{source}: candidates[{i}].failure {failure!r} cannot be recorded (use one of "
                                  f"{', '.join(RECORDABLE + RECOMPUTED)} or null)")
            if kind.name in RECOMPUTED and c.get("output") is None:
                raise RecordError(f"{source}: candidates[{i}] ({name}) is {kind.name} but has no output to recompute "
                                  f"it from")
            failure = None if kind.name in RECOMPUTED else kind.name  # recomputed from the outputs
        dur = _num(c, "duration_us", source, i, 0.0)
        scratch = _num(c, "scratch_bytes", source, i, 0, kind=(int,))
        output = c.get("output")
        if failure is None and check and output is None:
            raise RecordError(f"{source}: candidates[{i}] ({name}) has no output but check_correctness is true")
        if output is not None:
            try:
                output = np.asarray(_flatten(output), dtype=np.float64)
            except (TypeError, ValueError):
                raise RecordError(f"{source}: candidates[{i}].output must be a list of numbers") from None
        out.append({"name": name, "backend": str(c.get("backend", "")), "trusted": trusted, "failure": failure,
                    "duration_us": float(dur), "scratch_bytes": int(scratch), "output": output,
                    "message": str(c.get("message", "") or "")})
    figures = obj.get("source")
    if figures is not None:
        from fusegen.cache.provenance import Source, SourceError

        try:
            figures = Source.from_json(figures, "source").to_json()
        except SourceError as e:
            raise RecordError(f"{source}: {e}") from None
    return {"window_us": float(window), "rtol": float(rtol), "check_correctness": check, "candidates": out,
            "instruction": obj.get("instruction"), "key": obj.get("key"), "source": figures}


def _flatten(x: Any) -> list:
    if isinstance(x, (list, tuple)):
        out: list = []
        for e in x:
            out.extend(_flatten(e) if isinstance(e, (list, tuple)) else [float("nan") if e is None else e])
        return out
    raise TypeError


def replay(record: dict) -> ReplayOutcome:
    """Run selection over a validated record (:func:`load_record`)."""
    cands = record["candidates"]
    results = [ProfileResult(c["name"], c["duration_us"], c["scratch_bytes"], None, c["trusted"], c["name"], c["output"])
               for c in cands]
    for r, c in zip(results, cands):
        if c["failure"]:
            r.failure = Failure(FailureKind[c["failure"]], c["message"])

    def outcome(winner: str | None, error: str | None, tie: bool = False, fastest: str | None = None) -> ReplayOutcome:
        return ReplayOutcome(winner, error, {r.name: r.failure.kind.name for r in results if r.failed},
                             {r.name: r.failure.message for r in results if r.failed}, results, tie, fastest,
                             record.get("source"))

    if len(results) == 1:  # exactly one supported config: used without compiling
        results[0].failure = None
        return outcome(results[0].name, None)
    compiled = [i for i, r in enumerate(results) if not (r.failed and r.failure.kind is FailureKind.COMPILATION_FAILED)]
    if not compiled:
        return outcome(None, "No candidates could be compiled.")
    if len(compiled) == 1:  # used without profiling
        r = results[compiled[0]]
        r.failure = None
        return outcome(r.name, None)
    recorded = {i: results[i] for i in compiled}
    order = list(compiled)

    def run_one(k: int) -> ProfileResult:
        return recorded[order[k]]

    rtol = record["rtol"]
    profile_all([results[i].trusted for i in order], run_one, lambda a, b: buffers_match(a, b, rtol),
                record["check_correctness"])
    try:
        sel = pick_best_config(results, record["window_us"])
    except AutotuneError as e:
        return outcome(None, e.message)
    return outcome(sel.result.name, None, sel.tie_break, results[sel.fastest_index].name)


def replay_file(path: str | Path) -> ReplayOutcome:
    """Load, validate and replay a record file (``RecordError`` naming the file on bad input)."""
    p = Path(path)
    try:
        obj = json.loads(p.read_text())
    except OSError as e:
        raise RecordError(f"{path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    return replay(load_record(obj, str(path)))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] or "instr"


def record_json(instr_name: str, key_digest: str, results: Sequence[ProfileResult], window_us: float, rtol: float,
                check_correctness: bool, source: Any = None) -> dict:
    """The record of one tuned instruction (raw measurements; WRONG_RESULTS left to the replay)."""
    cands = []
    for r in results:
        failure = r.failure.kind.name if (r.failure and r.failure.kind.name in RECORDABLE + RECOMPUTED) else None
        out = None
        if r.output is not None and failure in (None, *RECOMPUTED):
            leaves = r.output if isinstance(r.output, (list, tuple)) else [r.output]
            out = [float(x) for leaf in leaves for x in np.asarray(leaf).astype(np.float64).ravel()]
        cfg = r.config
        cands.append({"name": r.name, "backend": getattr(cfg, "backend", ""), "trusted": bool(r.trusted),
                      "duration_us": float(r.duration_us), "scratch_bytes": int(r.scratch_bytes),
                      "failure": failure, "message": r.failure.message if failure else None, "output": out})
    out = {"instruction": instr_name, "key": key_digest, "window_us": window_us, "rtol": rtol,
           "check_correctness": check_correctness, "candidates": cands}
    if source is not None:
        out["source"] = source.to_json()
    return out


def write_record(directory: str | Path, instr_name: str, key_digest: str, results: Sequence[ProfileResult],
                 window_us: float = DEFAULT_SCRATCH_WINDOW_US, rtol: float = DEFAULT_RTOL,
                 check_correctness: bool = True, source: Any = None) -> Path:
    """Write ``<directory>/<instruction>.<key prefix>.json``; returns the path. ``source``: a
    :class:`fusegen.cache.provenance.Source` saying where the durations came from."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{_safe(instr_name)}.{key_digest[:12]}.json"
    p.write_text(json.dumps(record_json(instr_name, key_digest, results, window_us, rtol, check_correctness,
                                        source)) + "\n")
    return p


def format_outcome(o: ReplayOutcome) -> str:
    """Human-readable replay result: winner (and tie-break), then every failure with its reason."""
    lines = []
    if o.winner:
        lines.append(f"winner: {o.winner}")
        if o.source is not None:
            lines.append(f"  (times: {o.source.get('label', o.source.get('kind'))})")
        if o.tie_break:
            lines.append(f"  (fewer scratch bytes within the window than the fastest, {o.fastest})")
    else:
        lines.append(f"no winner: {o.error}")
    if o.failures:
        lines.append(f"failures ({len(o.failures)}):")
        for name, kind in o.failures.items():
            msg = o.messages.get(name) or ""
            lines.append(f"  {name}: {FailureKind[kind].label}" + (f": {msg}" if msg else ""))
    return "\n".join(lines)
