"""The report's data: one JSON-able document per HLO file (``fusegen report --json-data``).

Everything the HTML shows comes from this document, so other tools can draw it too. Layout::

    {"schema": 1, "file": str, "device": str, "generated": ISO time, "options": {...},
     "phases": {"parse": s, "passes": s, "autotune": s, "dispatch": s, "run": s, "compile": s},
     "modules": [{"name", "fusions": [FUSION...], "library_calls": [...], "graph": GRAPH,
                  "outputs_match": bool | None, "output_max_abs_error": float | None}],
     "tuning": [TUNING...],            # fusegen.report.tuning
     "summary": {"fusions", "by_kind", "by_emitter", "by_backend", "host_fallbacks": [...], "status",
                 "estimated_us": {"us", "device", "model_version", "label"}, "by_estimate": [...]}}

Each FUSION and library call carries fusegen.perf's ``estimate`` of its device time, each module its
``estimated_us``; ``summary.by_estimate`` ranks the fusions by it, beside the seconds they took here.

A FUSION is the executor's :class:`~fusegen.runtime.executor.FusionReport` JSON (so keys other
features add there, such as per-output ``status`` or an error budget, come through unchanged) plus
``computation``, ``shape``, ``backend_kind``, ``dispatch`` (each kind matcher in rank order with its
answer), ``kernels`` (source, launch dimensions, sm_90 compile), ``launch_dimensions``, ``hlo`` and,
where the fusion's report carries them or :mod:`fusegen.indexing` is present, ``indexing_maps``, and where
its emitter answers the thread-id protocol (``explain --indexing``), ``thread_indexing``.
"""

from __future__ import annotations

import collections
import datetime
import json
from typing import Any, Sequence

from fusegen.hlo.ir import Computation, Instruction, Module

SCHEMA = 1

#: Opcodes the executor evaluates in place: not drawn, edges pass through them.
TRIVIAL_OPCODES = frozenset({"bitcast", "get-tuple-element", "tuple", "constant", "parameter"})
CONTROL_OPCODES = frozenset({"while", "conditional", "call"})


def control_computations(module: Module) -> list[tuple[Computation, Instruction | None, str]]:
    """Computations the executor runs (entry, ``while``/``conditional``/``call`` bodies), in visiting order.

    Each item is ``(computation, calling instruction or None for the entry, role)``; role is ``entry``,
    ``body``, ``condition``, ``branch N``, ``true``, ``false`` or ``call``.
    """
    out: list[tuple[Computation, Instruction | None, str]] = []
    seen: set[int] = set()

    def visit(comp: Computation, caller: Instruction | None, role: str) -> None:
        if id(comp) in seen:
            return
        seen.add(id(comp))
        out.append((comp, caller, role))
        for inst in comp.instructions:
            if inst.opcode == "while":
                visit(inst.attrs["condition"], inst, "condition")
                visit(inst.attrs["body"], inst, "body")
            elif inst.opcode == "conditional":
                branches = inst.attrs.get("branch_computations")
                if branches is None:
                    visit(inst.attrs["true_computation"], inst, "true")
                    visit(inst.attrs["false_computation"], inst, "false")
                else:
                    for k, b in enumerate(branches):
                        visit(b, inst, f"branch {k}")
            elif inst.opcode == "call":
                visit(inst.attrs["to_apply"], inst, "call")

    visit(module.entry, None, "entry")
    return out


def dispatch_path(matchers: Sequence[Any], decided_by: str, kind: str) -> list[dict]:
    """Every kind matcher in asking order with what it answered for one fusion.

    Dispatch asks in rank order and stops at the first answer, so the matchers ranked before the one that
    decided answered ``None`` (``"passed"``), the decider answered ``kind`` and the rest were not asked.
    """
    names = [m.name for m in matchers]
    decided = names.index(decided_by) if decided_by in names else -1
    out = []
    for i, m in enumerate(matchers):
        state = "passed" if i < decided else ("answered" if i == decided else "not asked")
        out.append({"matcher": m.name, "plugin": m.plugin, "rank": m.rank, "state": state,
                    "answer": kind if i == decided else None})
    return out


def _launch_dimensions(kernel: Any) -> dict:
    """The kernel's launch; ``xla`` is the launch as XLA's thunk prints it, where the emitter models it."""
    ld = kernel.launch
    d = {"kernel": kernel.name, "grid": list(ld.grid), "num_programs": ld.num_programs,
         "num_warps": ld.num_warps, "threads_per_program": 32 * ld.num_warps,
         "shared_memory_bytes": ld.shared_memory_bytes, "num_stages": kernel.num_stages}
    if hasattr(ld, "to_json"):
        d["xla"] = ld.to_json()
    return d


def _indexing_maps(rep: Any, emitted: Any) -> Any:
    """Indexing maps when the fusion's report or emitted kernel carries them (the indexing-map feature)."""
    for obj in (rep, emitted):
        maps = getattr(obj, "indexing_maps", None)
        if maps:
            if isinstance(maps, dict):
                return {str(k): str(v) for k, v in maps.items()}
            return [str(m) for m in maps]
    return None


def computed_indexing_maps(inst: Instruction) -> dict[str, str] | None:
    """The fusion's output-to-input indexing maps from :mod:`fusegen.indexing`, when that package is present.

    ``{"%operand (operand i)": "map; map..."}`` for output 0 (XLA's ``ComputeOutputToInputIndexing``), or
    ``None`` without the package or when the analysis raises (the card then has no maps section).
    """
    try:
        from fusegen.indexing.analysis import compute_output_to_input_indexing
    except ImportError:
        return None
    try:
        indexing = compute_output_to_input_indexing(inst, 0)
        return {f"%{op.name} (operand {i})": "\n".join(str(it) for it in items)
                for i, (op, items) in enumerate(zip(inst.operands, indexing))}
    except Exception:  # an op the analysis does not cover must not cost the user the report
        return None


def thread_indexing_maps(inst: Instruction, device: Any, pm: Any) -> dict[str, str] | None:
    """The emitter's thread-id maps, as ``explain --indexing`` prints them (``thread_id_to_output_indexing`` /
    ``thread_id_to_input_indexing`` of the emitter dispatch picks, a plugin's too): ``{"%root -> output": map,
    "%root -> operand %x": map}``; None when the emitter has none (or cannot say: the card then leaves it out)."""
    from fusegen.codegen.thread_indexing import fusion_thread_indexing

    try:
        t = fusion_thread_indexing(inst, device, pm)
    except Exception:  # a plugin emitter's failing map must not cost the user the report
        return None
    out = {}
    for r in t["roots"]:
        if r["thread_to_output"]:
            out[f"%{r['root']} -> output"] = r["thread_to_output"]
        for o in r["operands"]:
            if o["thread_to_input"]:
                out[f"%{r['root']} -> operand %{o['operand']}"] = o["thread_to_input"]
    return out or None


def fusion_entry(inst: Instruction, rep: Any, emitted: Any, matchers: Sequence[Any], decided_by: str,
                 compile_kernels: bool, capability: int = 90) -> dict:
    """One fusion card's data (see the module docstring); compiles its kernels when ``compile_kernels``."""
    from fusegen.hlo.printer import print_computation, print_shape
    from fusegen.report.compile_info import kernel_compile_info

    d = dict(rep.to_json())
    d["computation"] = inst.parent.name if inst.parent is not None else ""
    d["shape"] = print_shape(inst.shape)
    d["backend_kind"] = inst.fusion_backend_kind
    fbc = inst.backend_config.get("fusion_backend_config")
    if isinstance(fbc, dict):  # the tiling the kernel was built with (a tuned GEMM's winning config)
        cfg = {k: v for k, v in fbc.items() if k != "kind"}
        if cfg:
            d["backend_config"] = json.dumps(cfg, separators=(",", ":"), sort_keys=True)
    d["dispatch"] = dispatch_path(matchers, decided_by, rep.kind)
    d["matcher"] = decided_by
    d["host"] = rep.backend == "host"
    kernels = []
    for k in rep.kernels:
        kd = {"name": k.name, "launch": str(k.launch), "source": k.source, "launch_dimensions": _launch_dimensions(k)}
        if compile_kernels:
            kd["compile"] = kernel_compile_info(k, capability)
        kernels.append(kd)
    d["kernels"] = kernels
    d.setdefault("launch_dimensions", [k["launch_dimensions"] for k in kernels])
    maps = d.get("indexing_maps") or _indexing_maps(rep, emitted) or computed_indexing_maps(inst)
    if maps:
        d["indexing_maps"] = maps
    try:
        d["hlo"] = print_computation(inst.fused_computation)
    except Exception:  # printer cannot print an exotic attribute: the card still shows everything else
        d["hlo"] = ""
    return d


def module_entry(module: Module, device: Any, pm: Any, run_report: Any = None, compile_kernels: bool = True,
                 capability: int = 90, card_prefix: str = "") -> dict:
    """Fusions (with their kernels planned, or taken from ``run_report``), library calls and the graph.

    ``card_prefix`` keeps card ids apart when one file holds several modules (names repeat across them).
    """
    from fusegen.report.graph import card_id
    from fusegen import dispatch
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.report.graph import graph_data
    from fusegen.runtime.executor import Executor
    from fusegen.hlo.sharding import ShardingError, device_counts
    from fusegen.evaluator.spmd_plan import collectives_by_name
    from fusegen.perf.report import collective_estimates_json, fusion_estimate_json, module_estimate_json

    ex = Executor(module, device, pm, compile_kernels=False)
    collectives = collectives_by_name(module)  # fusegen.evaluator.spmd_plan: groups and bytes of each
    try:
        devices = device_counts(module)
    except ShardingError:  # the run refuses the header with the reason
        devices = (1, 1)
    ran = {f.name: f for f in run_report.fusions} if run_report is not None else {}
    matchers = pm.kind_matchers()
    fusions, calls = [], []
    for comp, _caller, _role in control_computations(module):
        for inst in comp.instructions:
            if inst.opcode == "fusion":
                emitted, plan = ex.plan_fusion(inst)
                rep = ran.get(inst.name, plan)
                decided_by = rep.decided_by
                if decided_by not in {m.name for m in matchers}:  # "autotuner": ask which matcher gave the kind
                    decided_by = dispatch.get_emitter_fusion_kind(FusionAnalysis.create(inst, device), pm).decided_by
                d = fusion_entry(inst, rep, emitted, matchers, decided_by, compile_kernels, capability)
                d["ran"] = inst.name in ran
                tmaps = thread_indexing_maps(inst, device, pm) if emitted is not None else None
                if tmaps:
                    d["thread_indexing"] = tmaps
                d["card"] = card_id(card_prefix + inst.name)
                fusions.append(d)
            elif inst.opcode not in TRIVIAL_OPCODES and inst.opcode not in CONTROL_OPCODES:
                calls.append({"name": inst.name, "opcode": inst.opcode, "computation": comp.name,
                              "target": inst.attrs.get("custom_call_target", ""),
                              "backend": ex._backend_for(inst).name})
                if inst.opcode == "custom-call":  # a library call: its estimated device time (fusegen.perf)
                    calls[-1]["estimate"] = fusion_estimate_json(inst, device)
                c = collectives.get(inst.name)
                if c is not None:  # the graph node says what it exchanges
                    calls[-1]["target"] = f"{c.opcode} {[list(g) for g in c.groups]} {c.bytes_per_partition} B/partition"
                    calls[-1]["collective"] = c.to_json()
    coll_est, coll_totals = ({}, None) if not collectives else collective_estimates_json(
        module, device, [(f["name"], f.get("estimate")) for f in fusions],
        [{"name": c["name"], **c["estimate"]} for c in calls if "estimate" in c])
    for c in calls:  # each collective's estimated time on its group (fusegen.perf.collectives)
        if "collective" in c:
            c["collective"]["estimate"] = coll_est.get(c["name"])
    out = {"name": module.name, "fusions": fusions, "library_calls": calls,
           "estimated_us": module_estimate_json([f.get("estimate") for f in fusions],
                                                [c["estimate"] for c in calls if "estimate" in c],
                                                getattr(device, "name", ""), coll_totals),
           "num_partitions": devices[0], "replica_count": devices[1],
           "graph": graph_data(module, {f["name"]: f for f in fusions}, {c["name"]: c for c in calls})}
    if run_report is not None:
        verdict = getattr(run_report, "verdict", None)  # per-output ok/drift/mismatch against the f64 oracle
        if verdict is not None:
            out["verdict"] = verdict.to_json()
        out["status"] = getattr(run_report, "status", "ok" if run_report.ok else "mismatch")
        out["outputs_match"] = run_report.outputs_ok
        out["output_max_abs_error"] = run_report.output_max_abs_error
        out["other_instructions"] = dict(run_report.other)
    return out


def summary(modules: Sequence[dict]) -> dict:
    """Counts by kind / emitter / backend, host fallbacks with their reasons, and the overall status."""
    fusions = [f for m in modules for f in m["fusions"]]
    count = lambda key: dict(collections.Counter(f.get(key, "-") for f in fusions).most_common())  # noqa: E731
    by_kind_backend: dict[str, dict[str, int]] = {}
    for f in fusions:
        row = by_kind_backend.setdefault(f["kind"], {})
        row[f["backend"]] = row.get(f["backend"], 0) + 1
    statuses = count("status")
    # "drift": within the error budget but above the usual tolerance (the verdict feature); not a failure
    bad = sum(n for s, n in statuses.items() if s not in ("ok", "pending", "drift"))
    # a module's verdict (its outputs against the f64 oracle) can say drift or mismatch on its own
    worst = {"ok": 0, "drift": 1, "vacuous": 2, "undetermined": 3, "mismatch": 4}
    module_status = max((m["status"] for m in modules if m.get("status") in worst), key=worst.get, default="ok")
    ran = any(s != "pending" for s in statuses) or any("status" in m for m in modules)
    status = "not run" if not ran else "mismatch" if bad else "drift" if "drift" in statuses else "ok"
    if status != "not run" and worst[module_status] > worst[status]:
        status = module_status
    return {
        "fusions": len(fusions),
        "library_calls": sum(c["opcode"] == "custom-call" for m in modules for c in m["library_calls"]),
        "other_instructions": sum(c["opcode"] != "custom-call" for m in modules for c in m["library_calls"]),
        "by_kind": count("kind"), "by_emitter": count("emitter"), "by_backend": count("backend"),
        "by_status": statuses, "by_kind_backend": by_kind_backend,
        "host_fallbacks": [{"name": f["name"], "kind": f["kind"], "reason": f.get("reason", ""),
                            "card": f.get("card", "")} for f in fusions if f.get("host")] + [
            {"name": c["name"], "kind": "custom-call", "card": "",
             "reason": f"library call {c.get('target', '')}: no other execution backend accepts it here"}
            for m in modules for c in m["library_calls"] if c["opcode"] == "custom-call" and c.get("backend") == "host"],
        "status": status,
        **estimate_summary(modules, fusions),
    }


def estimate_summary(modules: Sequence[dict], fusions: Sequence[dict], n: int = 10) -> dict:
    """``estimated_us`` (every module's estimated device time, summed, with its collectives' part) and
    ``by_estimate``: the ``n`` fusions of the largest estimate (``{"name", "card", "us", "bound", "model",
    "interpreter_s"}``; ``interpreter_s``: its seconds on this CPU when it ran, else None), ``by_collective``:
    each collective's estimate (``{"name", "kind", "group_size", "us", "exposed_us", "algorithm"}``), labelled as
    estimates (fusegen.perf)."""
    from fusegen.perf.report import ranked_by_estimate

    parts = [m.get("estimated_us") or {} for m in modules]
    total = None if any(p.get("us") is None for p in parts) else round(sum(p.get("us", 0.0) for p in parts), 6)
    first = next((p for p in parts if p), {})
    coll = {k: round(sum(float(p.get(k, 0.0) or 0.0) for p in parts), 6)
            for k in ("collectives_us", "collectives_overlapped_us", "collectives_exposed_us")}
    by_collective = [{"name": c["name"], "kind": (c["collective"]["estimate"] or {}).get("kind", c["opcode"]),
                      "group_size": (c["collective"]["estimate"] or {}).get("group_size"),
                      "us": (c["collective"]["estimate"] or {}).get("us"),
                      "exposed_us": (c["collective"]["estimate"] or {}).get("exposed_us"),
                      "algorithm": (c["collective"]["estimate"] or {}).get("algorithm", "-")}
                     for m in modules for c in m.get("library_calls", ()) if (c.get("collective") or {}).get("estimate")]
    rows = []
    for f in ranked_by_estimate(list(fusions), n):
        e = f.get("estimate") or {}
        rows.append({"name": f["name"], "card": f.get("card", ""), "us": e.get("us"), "bound": e.get("bound", "-"),
                     "model": e.get("model", "-"),
                     "interpreter_s": (f.get("timings") or {}).get("seconds") if f.get("ran") else None})
    return {"estimated_us": {"us": total, "device": first.get("device", ""), "model_version": first.get("model_version"),
                             "label": "estimate", **coll},
            "by_estimate": rows, "by_collective": by_collective}


def build_report(path: str, device: Any, modules: Sequence[dict], tuning: Sequence[dict], phases: dict,
                 options: dict) -> dict:
    """Assemble the document from :func:`module_entry` results and :mod:`fusegen.report.tuning` entries."""
    from fusegen import __version__

    by_name = {(m["name"], f["name"]): f for m in modules for f in m["fusions"]}
    for k, t in enumerate(tuning):  # a tuned fusion's card links to its chart and back
        for m in modules:
            f = by_name.get((m["name"], t["instruction"]))
            if f is not None and t.get("module") in ("", None, m["name"]):
                f["tuning"] = {"index": k, "winner": t.get("winner"), "step": t.get("step")}
                t["fusion"], t["card"] = f["name"], f.get("card")
    return {
        "schema": SCHEMA,
        "fusegen_version": __version__,
        "file": str(path),
        "device": getattr(device, "name", str(device)),
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "options": dict(options),
        "phases": {k: round(v, 3) for k, v in phases.items()},
        "modules": list(modules),
        "tuning": list(tuning),
        "summary": summary(modules),
    }
