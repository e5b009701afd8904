"""The tuning part of the report: every measured candidate of every tuned instruction.

Entries come from a live tuning (:class:`fusegen.autotuning.autotuner.InstructionReport`, with
``--autotune``) or from replay records (``fusegen run --autotune --record DIR``), replayed through the
real clustering and ``PickBestConfig`` (:mod:`fusegen.autotuning.replay`). One entry::

    {"instruction", "module", "source": "autotune" | "record FILE", "step", "cache", "configs", "supported",
     "winner", "fastest", "tie_break", "tie_break_sentence", "window_us", "duration_us", "scratch_bytes",
     "error", "candidates": [{"name", "backend", "trusted", "duration_us" (null when it did not run),
     "scratch_bytes", "failure", "message", "cluster", "winner", "fastest", "in_window"}]}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from fusegen.autotuning.selection import DEFAULT_SCRATCH_WINDOW_US, ProfileResult


def tie_break_sentence(winner: dict, fastest: dict, window_us: float) -> str:
    """What ``PickBestConfig`` logs (at DEBUG) when the scratch-bytes tie-break moved the choice."""
    return (f"PickBestConfig: chose {winner['name']} ({winner['duration_us']:.3f} us, {winner['scratch_bytes']} "
            f"scratch bytes) over fastest {fastest['name']} ({fastest['duration_us']:.3f} us, "
            f"{fastest['scratch_bytes']} scratch bytes): fewer scratch bytes within the {window_us:.3g} us window")


def _candidates(results: Sequence[ProfileResult], winner: str | None, window_us: float) -> list[dict]:
    ran = [r for r in results if not r.failed]
    fastest = min(ran, key=lambda r: r.duration_us).name if ran else None
    limit = min((r.duration_us for r in ran), default=0.0) + window_us
    out = []
    for r in results:
        compiled = not (r.failed and r.failure.kind.name == "COMPILATION_FAILED")
        out.append({
            "name": r.name, "backend": getattr(r.config, "backend", "") or r.name.split(":", 1)[0],
            "trusted": bool(r.trusted), "duration_us": float(r.duration_us) if compiled else None,
            "scratch_bytes": int(r.scratch_bytes), "failure": r.failure.kind.name if r.failed else None,
            "message": (r.failure.message if r.failed else "") or "", "cluster": int(r.cluster),
            "winner": r.name == winner, "fastest": r.name == fastest,
            "in_window": (not r.failed) and r.duration_us <= limit,
        })
    return out


def _finish(entry: dict) -> dict:
    cands = entry["candidates"]
    entry["fastest"] = next((c["name"] for c in cands if c["fastest"]), None)
    w = next((c for c in cands if c["winner"]), None)
    f = next((c for c in cands if c["fastest"]), None)
    entry["tie_break_sentence"] = (tie_break_sentence(w, f, entry["window_us"])
                                   if entry.get("tie_break") and w and f and w is not f else None)
    entry["failures"] = [{"name": c["name"], "failure": c["failure"], "message": c["message"]}
                         for c in cands if c["failure"]]
    return entry


def from_instruction_reports(tuned: Sequence[tuple[str, Any]], window_us: float = DEFAULT_SCRATCH_WINDOW_US) -> list[dict]:
    """Entries from ``[(module name, InstructionReport)]`` of a live tuning."""
    out = []
    for module_name, r in tuned:
        d = {k: v for k, v in r.to_json().items() if k not in ("name", "key")}
        figures = d.pop("source", None)  # where the durations came from (measured / estimated / CPU time)
        d.update(instruction=r.name, module=module_name, source="autotune", window_us=window_us,
                 candidates=_candidates(r.results, r.winner, window_us), figures=figures)
        out.append(_finish(d))
    return out


def from_record_dir(directory: str | Path) -> list[dict]:
    """Entries replayed from every ``*.json`` record in ``directory`` (sorted by file name).

    Raises:
        fusegen.autotuning.replay.RecordError: a record is malformed (names the file).
        OSError: the directory cannot be read.
    """
    from fusegen.autotuning.replay import RecordError, load_record, replay

    out = []
    for p in sorted(Path(directory).glob("*.json")):
        try:
            obj = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise RecordError(f"{p}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
        rec = load_record(obj, str(p))
        o = replay(rec)
        backends = {c["name"]: c["backend"] for c in rec["candidates"]}
        cands = _candidates(o.results, o.winner, rec["window_us"])
        for c in cands:
            c["backend"] = backends.get(c["name"]) or c["backend"]
        win = next((r for r in o.results if r.name == o.winner), None)
        out.append(_finish({
            "instruction": rec.get("instruction") or p.stem.split(".")[0], "module": "", "source": f"record {p.name}",
            "step": "replayed", "cache": "-", "configs": len(cands), "supported": len(cands), "winner": o.winner,
            "tie_break": o.tie_break, "window_us": rec["window_us"], "error": o.error,
            "duration_us": win.duration_us if win is not None else None,
            "scratch_bytes": win.scratch_bytes if win is not None else 0, "candidates": cands,
            "figures": rec.get("source")}))
    return out
