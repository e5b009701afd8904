"""The estimate as ``explain``, ``run``, ``run --profile`` and ``fusegen report`` show it (JSON parts and rankings).

Every fusion row gets ``"estimate"`` (:meth:`fusegen.perf.FusionEstimate.to_json`: ``us`` with launch overhead,
``kernel_us``, ``model``, ``bound``, ``device``, ``model_version``, bytes and flops, ``"label": "estimate"``), every
collective of an SPMD module its ``"estimate"`` (:func:`collective_estimates_json`), every module
``"estimated_us"`` (:func:`module_estimate_json`). Nothing here raises: a fusion the model cannot read gets
``{"us": null, "error": ...}`` and the rest of the document is unchanged.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import attrs

from fusegen.perf.estimate import (LABEL, MODEL_VERSION, ModuleEstimate, estimate_fusion, estimate_rows,
                                   library_calls)


def fusion_estimate_json(inst: Any, device: Any, emitted: Any = None, sass: Any = None) -> dict:
    """``estimate_fusion(inst, device, emitted=emitted, sass=sass).to_json()``, or ``{"us": None, "error": ...}``
    when the model fails on it (never raises)."""
    try:
        return estimate_fusion(inst, device, emitted=emitted, sass=sass).to_json()
    except Exception as e:  # noqa: BLE001 - an estimate must never break explain or run
        return {"us": None, "label": LABEL, "model_version": MODEL_VERSION,
                "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}


def apply_machine_code(rows: Sequence, device: Any) -> int:
    """Re-estimate planned fusions (``fusegen.api.plan_fusions`` rows) with their primary kernel's sm_90 machine
    code (:func:`fusegen.codegen.sass.kernel_sass_stats`, cached by content): tensor cores, load width, occupancy
    and spills enter the estimate (:mod:`fusegen.perf.machine_code`). A kernel that does not assemble keeps its
    estimate. Returns how many estimates now use machine code."""
    from fusegen.codegen.sass import SassError, kernel_sass_stats, tools_unavailable_reason

    if tools_unavailable_reason() is not None:
        return 0
    n = 0
    for inst, (emitted, rep) in rows:
        kernels = list(getattr(emitted, "kernels", ()) or ())
        if not kernels:
            continue
        try:
            stats = kernel_sass_stats(kernels[min(emitted.primary, len(kernels) - 1)])
        except (SassError, OSError, ValueError):
            continue
        rep.estimate = fusion_estimate_json(inst, device, emitted, stats)
        n += 1
    return n


def library_estimates_json(module: Any, device: Any) -> list[dict]:
    """``[{"name", "target", ...estimate}]`` of the module's cuBLAS / cuDNN calls outside fusions."""
    out = []
    for call in library_calls(module):
        d = fusion_estimate_json(call, device)
        out.append({"name": call.name, "target": str(call.attrs.get("custom_call_target", "")).strip('"'), **d})
    return out


def _us(d: dict | None) -> float | None:
    v = (d or {}).get("us")
    return float(v) if isinstance(v, (int, float)) else None


def collective_estimates_json(module: Any, device: Any, fusion_estimates: Iterable[tuple[str, dict | None]],
                              library: Sequence[dict] = ()) -> tuple[dict, dict]:
    """Each collective of ``module`` priced on ``device`` (:mod:`fusegen.perf.collectives`) with the part the
    fusions and library calls scheduled beside it hide: ``({name: {"us", "algorithm", "protocol", "group_size",
    "bytes", "wire_bytes", ..., "async", "overlapped_us", "exposed_us", "overlapped_with"}}, totals)``, totals
    ``{"collectives_us", "collectives_overlapped_us", "collectives_exposed_us"}`` for :func:`module_estimate_json`.
    ``fusion_estimates``: ``(name, estimate JSON)`` of the module's fusions; ``library``: library-call estimates
    with their ``"name"``. Never raises: a module without collectives (or one fusegen cannot plan across
    devices) gives ``({}, zeros)``."""
    from fusegen.device import DEFAULT_DEVICE
    from fusegen.perf.collectives import module_collectives_json

    compute = {n: u for n, u in ((n, _us(d)) for n, d in fusion_estimates) if u is not None}
    compute.update({d["name"]: u for d in library if d.get("name") and (u := _us(d)) is not None})
    try:
        return module_collectives_json(module, device if device is not None else DEFAULT_DEVICE, compute)
    except Exception:  # noqa: BLE001 - an estimate must never break explain, run or the report
        return {}, {"collectives_us": 0.0, "collectives_overlapped_us": 0.0, "collectives_exposed_us": 0.0}


def module_estimate_json(fusion_estimates: Iterable[dict | None], library: Sequence[dict] = (),
                         device: str = "", collectives: dict | None = None) -> dict:
    """The module's estimated time: ``{"us", "fusions_us", "library_calls_us", "collectives_us",
    "collectives_overlapped_us", "collectives_exposed_us", "device", "model_version", "label", "unestimated"}``.
    ``us`` = fusions + library calls + collectives - the collectives' part hidden under compute (``None`` when a
    kernel's estimate is infinite, i.e. it spills or cannot launch); each part includes its kernels' launch
    overheads; ``collectives``: the totals of :func:`collective_estimates_json` (zeros without)."""
    fus = list(fusion_estimates)
    f_us = [_us(d) for d in fus]
    l_us = [_us(d) for d in library]
    missing = [d.get("name", "?") for d, u in zip(library, l_us) if u is None]
    inf = any(d is not None and d.get("us") is None and d.get("exec_us") is None and "error" not in d for d in fus)
    total_f = sum(u for u in f_us if u is not None)
    total_l = sum(u for u in l_us if u is not None)
    dev = device or next((d.get("device") for d in [*fus, *library] if d and d.get("device")), "")
    coll = {k: float((collectives or {}).get(k, 0.0) or 0.0)
            for k in ("collectives_us", "collectives_overlapped_us", "collectives_exposed_us")}
    total = total_f + total_l + coll["collectives_exposed_us"]
    return {"us": None if inf else round(total, 6), "fusions_us": round(total_f, 6),
            "library_calls_us": round(total_l, 6), **{k: round(v, 6) for k, v in coll.items()},
            "device": dev, "model_version": MODEL_VERSION, "label": LABEL,
            "unestimated": sum(1 for u in f_us if u is None) + len(missing)}


def ranked_by_estimate(fusions: Sequence[Any], n: int = 10) -> list[Any]:
    """The ``n`` fusion reports with the largest estimated time (``report.estimate["us"]``; an infinite estimate
    first, a fusion without one last), ties in execution order."""
    def key(ix: tuple[int, Any]) -> tuple:
        i, f = ix
        est = getattr(f, "estimate", None) or (f.get("estimate") if isinstance(f, dict) else None) or {}
        u = est.get("us")
        if u is None and est and "error" not in est:
            return (0, 0.0, i)  # infinite
        return (1 if u is not None else 2, -(u or 0.0), i)

    return [f for _, f in sorted(enumerate(fusions), key=key)[:n]]


def estimate_cell(est: dict | None) -> str:
    """A table cell: ``12.34`` (µs), ``inf`` (spills / cannot launch), ``-`` (no estimate)."""
    if not est:
        return "-"
    u = est.get("us")
    if u is None:
        return "-" if "error" in est else "inf"
    return f"{u:.2f}" if u < 1000 else f"{u:,.0f}"


def module_line(est: dict | None) -> str:
    """One line under a table: the module's estimated device time, labelled as an estimate."""
    if not est:
        return ""
    dev = est.get("device") or "the device"
    total = "infinite (a kernel spills or cannot launch)" if est.get("us") is None else f"{est['us']:,.2f} µs"
    parts = f"fusions {est.get('fusions_us', 0):,.2f}"
    if est.get("library_calls_us"):
        parts += f", library calls {est['library_calls_us']:,.2f}"
    if est.get("collectives_us"):
        parts += (f", collectives {est['collectives_us']:,.2f} of which {est.get('collectives_overlapped_us', 0):,.2f}"
                  " hidden under compute")
    return (f"estimated {dev} time: {total} ({parts}; fusegen.perf v{est.get('model_version')}: an estimate, "
            f"not a measurement)")


def estimate_planned(module: Any, rows: Sequence, device: Any = None) -> ModuleEstimate:
    """Estimates of ``module``'s planned fusions (``rows``: its ``fusegen.api.plan_fusions`` rows, planned for
    ``device``), plus its cuBLAS/cuDNN calls and, for an SPMD module, its collectives. The planning is the
    caller's: :func:`fusegen.api.estimate_module` plans a module and calls this."""
    from fusegen.device import DEFAULT_DEVICE

    device = device if device is not None else DEFAULT_DEVICE
    est = estimate_rows(rows, device, library_calls(module), module.name)
    coll, totals = collective_estimates_json(module, device, [(f.name, f.to_json()) for f in est.fusions])
    return attrs.evolve(est, collectives=coll, collective_totals=totals) if coll else est
