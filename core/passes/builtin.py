"""Core's own module passes, registered as the plugin ``fusegen.passes`` (like :mod:`fusegen.analysis.matchers`).

* ``fusion``: producer-consumer fusion of unoptimized HLO (:mod:`fusegen.passes.fusion`).
* ``dot-decomposer``: dots into XLA's canonical ``[batch, m, k]`` form (:mod:`fusegen.passes.dot_decomposer`).

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


def _run_dot_decomposer(module, options=None) -> bool:
    from fusegen.passes import dot_decomposer

    return dot_decomposer.run(module, options)


@hookimpl
def fusegen_passes():
    from fusegen.config.options import ConfigOption

    return [HloPass(name="fusion", run=_run_fusion,
                    options=[ConfigOption("multi_output", bool, True, "Merge sibling reductions into one fusion.")]),
            HloPass(name="dot-decomposer", run=_run_dot_decomposer)]
