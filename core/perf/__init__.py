"""fusegen's GPU performance model: an estimated time per kernel and per module without a GPU.

::

    import fusegen
    from fusegen import perf

    m = fusegen.load("model.hlo")
    est = fusegen.api.estimate_module(m)             # ModuleEstimate on the H200 (default device), planned by api
    est.us, [(f.name, f.us, f.model) for f in est.ranked()]
    perf.estimate_fusion(m.fusion_instructions()[0], emitted=..., sass=...)   # one fusion

The model mirrors XLA's ``GpuPerformanceModel`` / ``GpuIndexingPerformanceModel`` / dot fusion cost model
(:mod:`fusegen.perf.base`, :mod:`~fusegen.perf.fusion_model`, :mod:`~fusegen.perf.tiled`,
:mod:`~fusegen.perf.dot_model`) and adds what the sm_90 machine code says (:mod:`~fusegen.perf.machine_code`).
Its terms are listed in :mod:`fusegen.perf.estimate` and ``docs/perf-model.md``.
"""

from fusegen.perf.base import KERNEL_LAUNCH_OVERHEAD_S, RunTimeData
from fusegen.perf.device_rates import PerfDevice
from fusegen.perf.estimate import (LABEL, MODEL_VERSION, FusionEstimate, ModuleEstimate, estimate_fusion,
                                   estimate_rows, library_calls, roofline_instruction)
from fusegen.perf.report import estimate_planned

__all__ = ["KERNEL_LAUNCH_OVERHEAD_S", "LABEL", "MODEL_VERSION", "FusionEstimate", "ModuleEstimate", "PerfDevice",
           "RunTimeData", "estimate_fusion", "estimate_planned", "estimate_rows", "library_calls",
           "roofline_instruction"]
