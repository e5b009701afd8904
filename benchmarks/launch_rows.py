"""XLA's kernel launches of a launch corpus, each paired with the fusegen kernel that stands for it.

A launch corpus is a directory with ``LAUNCH.tsv`` (one row per thunk; ``../shared/corpus/jax/launch/README.md``
describes the columns), ``NAME.h200_opt.hlo`` and XLA's own PTX ``NAME.xla.ptx``. Used by
``benchmarks/ptx_vs_xla.py`` (SASS statistics) and ``scripts/gpu-check`` (timings).

Rows taken: ``thunk_kind == kCustomKernel`` and ``hlo_opcode == fusion``, without the launches of a kernel XLA
compiled for another fusion (``note = kernel_reused:...``, whose kernel is measured once at its own row). The
others are returned with the reason they are left out.

Pairing (:func:`pair_launches`): a fusion with one XLA launch gets fusegen's primary kernel
(``EmittedFusion.primary``; the kernels before it prepare operands, as XLA's copy thunks do). A fusion XLA
launches several times (a multi-launch sort: ``sort_N``, ``sort_N__1``, ...) is paired launch by launch with
fusegen's launches from the primary kernel on (every kernel once per ``launch_args`` entry) when the counts
agree, else each XLA launch with the first fusegen kernel from the primary on of the same grid and block, else the
primary kernel.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import attrs

REPO = Path(__file__).resolve().parents[1]
SHARED_LAUNCH = Path(os.environ.get("FUSEGEN_SHARED_LAUNCH", REPO.parent / "shared" / "corpus" / "jax" / "launch"))

#: fusegen's Triton emitters -> the kind a row is counted under
TRITON_KINDS = {"TritonGemmFusion": "kTriton.gemm", "TritonBlockLevelFusion": "kTriton.block"}
_XLA_TRITON = {"__triton": "kTriton.block", "__triton_nested_gemm_fusion": "kTriton.gemm",
               "__triton_gemm": "kTriton.gemm"}


def read_rows(launch_dir: Path, module_filter: str = "") -> tuple[list[dict], list[dict]]:
    """``(kernel launch rows, rows left out with their "reason")`` of ``launch_dir/LAUNCH.tsv``.

    Raises:
        FileNotFoundError: no ``LAUNCH.tsv`` in ``launch_dir``.
    """
    with open(launch_dir / "LAUNCH.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    take, left = [], []
    for r in rows:
        if module_filter not in r["module_file"]:
            continue
        if r["thunk_kind"] != "kCustomKernel":
            why = f"{r['thunk_kind']} thunk (no kernel)"
        elif r["hlo_opcode"] != "fusion":
            why = f"kernel for a {r['hlo_opcode']}, not a fusion"
        elif r["note"].startswith("kernel_reused"):
            why = "XLA reuses another fusion's kernel"
        else:
            take.append(r)
            continue
        left.append({"module": r["module_file"], "fusion": r["fusion_name"], "kernel": r["kernel_name"], "reason": why})
    return take, left


def xla_kind(r: dict) -> str:
    """The kind of XLA's launch: ``kLoop`` / ``kInput`` / ``sort`` / ``kTriton.gemm`` / ``kTriton.block``."""
    if r["note"].startswith("kernel_named_after_inner"):
        return "sort"
    if r["fusion_kind"] == "kCustom":
        return _XLA_TRITON.get(r["backend_kind"], r["backend_kind"] or "kCustom")
    return r["fusion_kind"]


def xla_launch(r: dict) -> dict:
    """``{"grid": [x, y, z], "threads": [x, y, z], "shared_memory_bytes": n}`` of a row (the thunk's)."""
    return {"grid": [int(r[f"grid_{a}"]) for a in "xyz"], "threads": [int(r[f"threads_{a}"]) for a in "xyz"],
            "shared_memory_bytes": int(r["shared_memory_bytes"] or 0)}


def pair_launches(rows: list[dict], emitted) -> list[tuple[Any, str]]:
    """For one fusion's XLA launch rows (thunk order): ``(fusegen KernelSource, how it was paired)`` each."""
    kernels = list(emitted.kernels)
    first = min(emitted.primary, len(kernels) - 1)
    if len(rows) == 1:
        return [(kernels[first], "primary kernel")]
    launches = [k for k in kernels[first:] for _ in k.launch_args]
    if len(launches) == len(rows):
        return [(k, f"launch {i + 1} of {len(launches)}") for i, k in enumerate(launches)]
    out = []
    for r in rows:
        want = xla_launch(r)
        same = [k for k in kernels[first:] if list(k.launch.grid3) == want["grid"] and list(k.launch.threads3) == want["threads"]]
        out.append((same[0], "same grid and block") if same else
                   (kernels[first], f"primary kernel (fusegen {len(launches)} launches, XLA {len(rows)})"))
    return out


@attrs.define
class Launch:
    """One XLA kernel launch and fusegen's counterpart.

    Attributes:
        row: the ``LAUNCH.tsv`` row.
        kind: fusegen's kind for the fusion (``kTriton.gemm`` / ``kTriton.block`` for Triton fusions), else XLA's.
        emitter: fusegen's emitter (``""`` when none).
        kernel: fusegen's ``KernelSource`` (``None``: see ``failure``).
        how: how the two were paired.
        failure: why fusegen has no kernel for the row (counted against fusegen, never dropped).
        output_elements: elements of the fusion's output (all array leaves).
        fusion: the fusion instruction (``None`` if fusegen's parse has none of that name).
    """

    row: dict
    kind: str
    emitter: str = ""
    kernel: Any = None
    how: str = ""
    failure: str | None = None
    output_elements: int = 1
    fusion: Any = None


def plan_launches(launch_dir: Path, rows: list[dict], log=print) -> list[Launch]:
    """Parse each module once, plan each fusion once (``Executor.plan_fusion``, no compile), pair its launches."""
    from fusegen.device import get_device
    from fusegen.hlo.parser import parse_module
    from fusegen.runtime.executor import Executor

    by_module: dict[str, dict[str, list[dict]]] = {}
    for r in rows:
        by_module.setdefault(r["module_file"], {}).setdefault(r["fusion_name"], []).append(r)
    out: list[Launch] = []
    for mf, fusions in by_module.items():
        try:
            m = parse_module((launch_dir / mf).read_text(), mf)
            ex = Executor(m, get_device("h200"), compile_kernels=False)
            named = {i.name: i for c in m.computations for i in c.instructions if i.opcode == "fusion"}
            err = None
        except Exception as e:  # noqa: BLE001 - a module fusegen cannot read fails its rows, not the run
            err, named, ex = f"{mf} does not parse/plan: {type(e).__name__}: {str(e)[:300]}", {}, None
        for name, frows in fusions.items():
            inst = named.get(name)
            fail, emitted, rep = err, None, None
            if fail is None and inst is None:
                fail = f"no fusion {name} in fusegen's parse of {mf}"
            elif fail is None:
                try:
                    emitted, rep = ex.plan_fusion(inst)
                except Exception as e:  # noqa: BLE001
                    fail = f"plan_fusion({name}) raised {type(e).__name__}: {str(e)[:300]}"
                else:
                    if emitted is None or not emitted.kernels:
                        fail = f"no fusegen kernel ({rep.kind} {rep.emitter} on {rep.backend}: {rep.reason})"[:300]
            kind = xla_kind(frows[0])
            if rep is not None and rep.kind:
                kind = TRITON_KINDS.get(rep.emitter, f"kTriton.{rep.emitter}") if rep.kind == "kTriton" else rep.kind
            elems = max(1, sum(s.numel for s in inst.shape.leaves() if s.is_array)) if inst is not None else 1
            pairs = pair_launches(frows, emitted) if fail is None else [(None, "")] * len(frows)
            for r, (ks, how) in zip(frows, pairs):
                out.append(Launch(row=r, kind=kind, emitter=getattr(rep, "emitter", "") or "", kernel=ks, how=how,
                                  failure=fail, output_elements=elems, fusion=inst))
        log(f"  planned {mf}: {sum(len(v) for v in fusions.values())} launches")
    return out
