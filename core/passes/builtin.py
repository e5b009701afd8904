"""Core's own module passes, registered as the plugin ``fusegen.passes`` (like :mod:`fusegen.analysis.matchers`).

* ``fusion``: producer-consumer fusion of unoptimized HLO (:mod:`fusegen.passes.fusion`).

The GEMM routing passes come from the backend plugins that own them: ``gemm-fusion`` from the Triton backend
(:mod:`fusegen_plugins.backends.triton`), ``gemm-rewriter`` from the cuBLASLt backend
(:mod:`fusegen_plugins.backends.cublaslt`).
"""

from __future__ import annotations

from fusegen.plugin_manager import hookimpl
from fusegen.registry import HloPass


def _run_fusion(module, options=None) -> bool:
    from fusegen.passes import fusion

    return fusion.run(module, options)


@hookimpl
def fusegen_passes():
    return [HloPass(name="fusion", run=_run_fusion)]
