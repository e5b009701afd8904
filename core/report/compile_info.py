"""Registers, spills and shared memory of a kernel's sm_90 compile, as ``ptxas -v`` reports them.

``triton.compile`` (through :func:`fusegen.codegen.triton_runtime.compile_for_target`) gives the PTX and
the shared memory Triton allocated; the register count and spills only exist after ``ptxas``, which
Triton ships. Without a GPU Triton never loads the cubin, so ``CompiledKernel.n_regs``/``n_spills``
stay unset: we ask ``ptxas -v`` (the same binary, ``-arch=sm_90a``) instead, as ``nvcc -Xptxas -v`` users do.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

_USED = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_STACK = re.compile(r"(\d+) bytes stack frame")


def parse_ptxas_verbose(text: str) -> dict[str, int]:
    """``{"registers", "spill_store_bytes", "spill_load_bytes", "stack_bytes"}`` from ``ptxas -v`` stderr.

    Keys whose line is absent are left out (an empty dict when ``text`` has none).
    """
    out: dict[str, int] = {}
    if m := _USED.search(text):
        out["registers"] = int(m.group(1))
    if m := _SPILL.search(text):
        out["spill_store_bytes"], out["spill_load_bytes"] = int(m.group(1)), int(m.group(2))
    if m := _STACK.search(text):
        out["stack_bytes"] = int(m.group(1))
    return out


def _ptxas_path(capability: int) -> str | None:
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        return get_ptxas(capability).path
    except Exception:  # Triton without its NVIDIA backend: no register counts, the rest still reported
        return None


def kernel_compile_info(kernel: Any, capability: int = 90) -> dict[str, Any]:
    """Compile one :class:`~fusegen.codegen.kernel.KernelSource` for ``sm_<capability>`` and describe it.

    Returns ``{"status": "ok", "shared_bytes", "num_warps", "registers", "spill_store_bytes",
    "spill_load_bytes", "stack_bytes", "seconds"}`` (register keys only when ``ptxas`` ran) or
    ``{"status": "failed", "error": one line}``. Never raises for a kernel that does not compile.
    """
    from fusegen.codegen import triton_runtime

    try:
        res = triton_runtime.compile_for_target(kernel, capability=capability, pointer_alignment=16)  # as launched
    except Exception as e:  # the report shows the failure on the fusion's card
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return {"status": "failed", "target": f"sm_{capability}", "error": f"{type(e).__name__}: {msg}"}
    info: dict[str, Any] = {"status": "ok", "target": f"sm_{capability}", "shared_bytes": res.shared_bytes,
                            "num_warps": res.num_warps, "seconds": round(res.seconds, 3)}
    ptxas = _ptxas_path(capability)
    if ptxas and res.ptx:
        arch = f"sm_{capability}a" if capability >= 90 else f"sm_{capability}"
        with tempfile.TemporaryDirectory() as d:
            src = Path(d) / "k.ptx"
            src.write_text(res.ptx)
            try:
                p = subprocess.run([ptxas, f"-arch={arch}", "-v", str(src), "-o", str(Path(d) / "k.cubin")],
                                   capture_output=True, text=True, timeout=120)
                info.update(parse_ptxas_verbose(p.stderr + p.stdout))
            except (OSError, subprocess.SubprocessError):
                pass  # registers unknown; the compile itself succeeded
    return info
