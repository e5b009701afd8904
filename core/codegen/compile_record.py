"""What an sm_90 compile of a kernel reported, kept beside the kernels so that later processes can read it.

XLA launches a Triton fusion with the compiled kernel's shared memory (``TritonWrapper`` result's
``shmem_bytes``, from the Triton compile's ``shared`` metadata, becomes the thunk's ``shared_memory``;
``xla/backends/gpu/codegen/triton/fusion.cc``: ``TritonFusion::Emit``). fusegen knows that number only after
compiling the kernel, so :func:`record` stores it per compile key and :func:`lookup` answers it without a
compile (``fusegen explain`` reads it; ``None`` where the kernels were never compiled here).

Files: ``<kernel dir>/compiled/<key>.json`` holding ``{"shared": [N, ...], "target": "sm_90", "triton":
VERSION}``, one ``N`` per kernel of a fusion. The key (:func:`compile_key`) hashes what makes fusions compile
alike (``fusegen.runtime.compile_jobs.fusion_fingerprint``: canonical HLO, backend config, shapes, each
kernel's constexprs, warps and stages; identical fusions share one record as they share one compile) and the
Triton version; the records are of sm_90 compiles, the only target ``run`` compiles for.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Sequence

from fusegen.codegen.kernel_dir import KernelDirError, kernel_dir, private_dir, read_regular


def _triton_version() -> str:
    try:
        import triton

        return str(triton.__version__)
    except Exception:  # noqa: BLE001 - no Triton: nothing was compiled by it either
        return "none"


#: Part of every key: bump when what the kernels of a fusion compile to changes for the same fusion (an emitter
#: writing another program, another pointer alignment): "2" = buffers declared 16-byte aligned, GEMMs as XLA's.
RECORD_SCHEMA = "2"


def compile_key(parts: Any) -> str:
    """A file-name-safe hash of ``parts`` (what decides a compile's result: JSON-able, ``str`` for the rest),
    :data:`RECORD_SCHEMA` and the Triton version (another Triton compiles another kernel)."""
    text = json.dumps([parts, RECORD_SCHEMA, _triton_version()], default=str, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def record(key: str, shared: Sequence[int], capability: int) -> None:
    """Store the shared memory (bytes) of each kernel of a compile under ``key``; a directory that cannot be
    written leaves nothing behind (the record is a convenience, never needed for correctness)."""
    try:
        d = private_dir(kernel_dir() / "compiled", "compile record directory")
        path = d / f"{key}.json"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"shared": [int(x) for x in shared], "target": f"sm_{capability}",
                       "triton": _triton_version()}, f)
        os.replace(tmp, path)
    except (OSError, KernelDirError):  # an unsafe or read-only directory is not written to
        return


def lookup(key: str) -> list[int] | None:
    """The shared memory per kernel recorded under ``key``, or ``None`` when those kernels were not compiled
    with this kernel directory (or the record is unreadable)."""
    try:
        text = read_regular(kernel_dir() / "compiled" / f"{key}.json")
    except (OSError, KernelDirError):  # an unsafe or missing directory holds no record
        return None
    if text is None:
        return None
    try:
        rec = json.loads(text)
    except ValueError:
        return None
    shared = rec.get("shared") if isinstance(rec, dict) else None
    if not isinstance(shared, list) or not all(isinstance(x, int) for x in shared):
        return None
    return shared
