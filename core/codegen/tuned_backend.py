"""Where a fusion's tuned winner says "run me on an execution backend" (fusegen, beyond XLA).

XLA's autotuner picks among *kernel* implementations; fusegen also offers the host backend (the
reference evaluator) as a trusted candidate. When such a backend wins, its ``apply_config`` writes the
backend's name into the fusion's ``fusion_backend_config`` under :data:`EXECUTION_BACKEND_FIELD`
(``{"fusion_backend_config": {"kind": "__triton_gemm", ..., "fusegen_execution_backend": "host"}}``)
and the executor (:mod:`fusegen.runtime.executor`) runs that fusion on the execution backend of that
name instead of generating a kernel. A kernel backend's ``apply_config`` clears the field, so the
last applied winner always decides. The field is not part of the autotune cache key (fusion backend
configs are dropped from the canonical HLO). Codegen backends write it, the executor and the performance model
read it: it stands in codegen, below both (docs/layers.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.hlo.ir import Instruction

#: Key inside ``fusion_backend_config`` naming the execution backend that runs the fusion.
EXECUTION_BACKEND_FIELD = "fusegen_execution_backend"
#: Key inside ``fusion_backend_config`` holding a library-call winner of a GEMM fusion (XLA's cuBLAS fallback: the
#: ``cublaslt_fission`` backend's config, ``{"backend": "cublaslt_fission", "algorithm": 0, "workspace_bytes": N}``);
#: set beside :data:`EXECUTION_BACKEND_FIELD`, cleared by a kernel backend's ``apply_config`` with it. Where XLA
#: inlines the library call in place of the fusion, fusegen keeps the fusion and runs and estimates it as the call.
LIBRARY_CALL_FIELD = "fusegen_library_call"


def _fbc(instr: "Instruction") -> dict:
    bc = instr.attrs.get("backend_config")
    if not isinstance(bc, dict):
        return {}
    fbc = bc.get("fusion_backend_config")
    return fbc if isinstance(fbc, dict) else {}


def tuned_execution_backend(instr: "Instruction") -> str | None:
    """The execution backend a tuned winner assigned to the fusion ``instr``, or ``None``."""
    if instr.opcode != "fusion":
        return None
    name = _fbc(instr).get(EXECUTION_BACKEND_FIELD)
    return name if isinstance(name, str) and name else None


def library_call(instr: "Instruction") -> dict | None:
    """The library-call winner (:data:`LIBRARY_CALL_FIELD`) a tuning wrote into the fusion ``instr``, or ``None``."""
    if instr.opcode != "fusion":
        return None
    v = _fbc(instr).get(LIBRARY_CALL_FIELD)
    return v if isinstance(v, dict) and isinstance(v.get("backend"), str) else None


def set_execution_backend(instr: "Instruction", name: str | None, library: dict | None = None) -> None:
    """Write (``name``) or clear (``None``) the field, in place, keeping the rest of the backend config; ``library``
    (with ``name``) also writes :data:`LIBRARY_CALL_FIELD`, which any other write clears."""
    bc = instr.attrs.get("backend_config")
    bc = dict(bc) if isinstance(bc, dict) else {}
    fbc = dict(bc.get("fusion_backend_config") or {})
    if name:
        fbc[EXECUTION_BACKEND_FIELD] = name
        fbc.pop(LIBRARY_CALL_FIELD, None)
        if library is not None:
            fbc[LIBRARY_CALL_FIELD] = dict(library)
    else:
        if EXECUTION_BACKEND_FIELD not in fbc and LIBRARY_CALL_FIELD not in fbc:
            return
        fbc.pop(EXECUTION_BACKEND_FIELD, None)
        fbc.pop(LIBRARY_CALL_FIELD, None)
    bc["fusion_backend_config"] = fbc
    instr.attrs["backend_config"] = bc
