"""The JSON documents of a run: ``fusegen run --json`` and ``fusegen.run(...).to_json()`` are built here.

One function per part: :func:`fusion_json` (a fusion row), :func:`report_json` (a module, or a file of several),
:func:`reference_profile_json` (``reference_profile``), :func:`autotune_json` (the ``autotune`` keys of
``run --autotune``). Keys are stable: tests and users' scripts read them (adding keys is fine).
"""

from __future__ import annotations

from typing import Any, Sequence


def launch_dimensions_json(f: Any) -> dict | None:
    """The structured launch of a fusion report's kernel (the one its ``launch`` string names):
    ``{"grid": [x, y, z], "threads": [x, y, z], "shared_memory_bytes": N}``, ``None`` without a kernel."""
    kernels = list(getattr(f, "kernels", None) or [])
    for k in kernels:
        if str(k.launch) == f.launch:
            return k.launch.to_json()
    return kernels[0].launch.to_json() if kernels else None


def fusion_json(f: Any) -> dict:
    """One fusion of ``--json``: the report's keys plus ``launch_dimensions`` (and ``shared_memory_reason``:
    see :attr:`fusegen.runtime.executor.FusionReport.launch_dimensions`)."""
    d = f.to_json()
    d["launch_dimensions"] = f.launch_dimensions
    if f.shared_memory_reason is not None:
        d["shared_memory_reason"] = f.shared_memory_reason
    return d


def report_json(reports: Sequence[Any]) -> dict:
    """The ``--json`` document: ``{"module", "fusions": [...], ...}`` (fusions in entry post order)."""
    from fusegen.runtime.executor import combined_status

    if len(reports) == 1:
        r = reports[0]
        return {
            "module": r.module,
            "fusions": [fusion_json(f) for f in r.fusions],
            "other_instructions": r.other,
            "non_fusion_instructions": [{"name": n, "opcode": o, "backend": b} for n, o, b in r.other_instructions],
            "outputs_match": r.outputs_ok,
            "output_max_abs_error": r.output_max_abs_error,
            "seconds": round(r.seconds, 3),
            "status": r.status,
            "plugin_errors": r.plugin_errors,  # status "error": the plugin, fusion and reason of each failure
            **(r.verdict.to_json() if r.verdict is not None else {}),
            "timings": r.timings_json(),
            **(r.spmd_json() if hasattr(r, "spmd_json") else {}),  # num_partitions, collectives (SPMD runs)
            "reference_profile": reference_profile_json(r),
            "estimated_us": estimated_json(r),  # fusegen.perf's estimate of the module on the device (not measured)
        }
    # A file of several modules (XLA tests separate them with `// -----`): one list, each row names its module.
    return {
        "module": "; ".join(r.module for r in reports),
        "modules": [report_json([r]) for r in reports],
        "fusions": [{**fusion_json(f), "module": r.module} for r in reports for f in r.fusions],
        "status": combined_status(r.status for r in reports),
        "plugin_errors": [{**e, "module": r.module} for r in reports for e in r.plugin_errors],
        "estimated_us": _sum_estimates([estimated_json(r) for r in reports]),
    }


def estimated_json(report: Any) -> dict:
    """``estimated_us``: the module's estimated device time (:func:`fusegen.perf.report.module_estimate_json`) from
    its fusions' ``estimate`` and its library calls'."""
    from fusegen.perf.report import module_estimate_json

    return module_estimate_json([getattr(f, "estimate", None) for f in report.fusions],
                                list(getattr(report, "library_estimates", []) or []),
                                collectives=getattr(report, "collective_totals", None))  # SPMD runs


def _sum_estimates(parts: list[dict]) -> dict:
    out = dict(parts[0]) if parts else {}
    for k in ("us", "fusions_us", "library_calls_us", "collectives_us", "collectives_overlapped_us",
              "collectives_exposed_us", "unestimated"):
        vals = [p.get(k) for p in parts]
        out[k] = None if any(v is None for v in vals) else (round(sum(vals), 6) if k != "unestimated" else sum(vals))
    return out


def reference_profile_json(report: Any, n: int = 20) -> dict:
    """The ``reference_profile`` part of ``--json``: the module's reference run and f64 oracle per instruction.

    ``{"reference_s", "f64_s"}`` (seconds over all instructions of each run, where it ran: in the process
    beside the kernels with ``jobs`` above 1), ``"instructions"``: the ``n`` slowest, ``[{"name", "opcode",
    "reference_s", "f64_s", "calls"}]``, and ``"per_element"``: ``[{"name", "opcode", "computation",
    "reason"}]``, each instruction whose computation the evaluator runs per element (not liftable)."""
    from fusegen.runtime.instruction_profile import merge_profiles

    prof = getattr(report, "reference_profile", None) or {}
    ref, f64 = prof.get("reference", {}), prof.get("f64", {})
    return {"reference_s": round(sum(r[1] for r in ref.values()), 6), "f64_s": round(sum(r[1] for r in f64.values()), 6),
            "instructions": merge_profiles(ref, f64, n), "per_element": list(getattr(report, "per_element", []))}


def autotune_json(tuned: Sequence[tuple[str, Any]], compiles: int, cache_stats: dict) -> dict:
    """The ``autotune`` part of ``run --autotune --json``: one entry per instruction, plus totals.

    Each entry: ``name``, ``configs`` (tried), ``supported``, ``compiled``, ``failures`` (kind -> count),
    ``winner``, ``duration_us``, ``scratch_bytes``, ``tie_break``, ``cache`` (``memory`` | ``directory`` |
    ``miss``), ``cache_hit``, ``step``, ``error`` (and ``module`` for multi-module files), and for a
    profiled instruction ``candidates``: ``[{"name", "backend", "trusted", "duration_us", "scratch_bytes",
    "failure": null | kind}]`` in config order.
    """
    multi = len({m for m, _ in tuned}) > 1
    entries = []
    for module_name, r in tuned:
        d = r.to_json()
        d["candidates"] = [{"name": c.name, "backend": getattr(c.config, "backend", ""), "trusted": bool(c.trusted),
                            "duration_us": c.duration_us, "scratch_bytes": c.scratch_bytes,
                            "failure": c.failure.kind.name if c.failure else None} for c in r.results]
        if multi:
            d["module"] = module_name
        entries.append(d)
    return {"autotune": entries, "autotune_compiles": compiles, "autotune_cache": dict(cache_stats)}
