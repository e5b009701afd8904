"""Kernel inspection for the emitter tests: count the global loads and stores of PTX by width, cut one kernel's
entry out of XLA's PTX for a launch-corpus module (``../shared/corpus/jax/launch/NAME.xla.ptx``), and plan
fusegen's kernel for the same fusion as ``Executor.plan_fusion`` does for an H200."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from conftest import CORPUS

from fusegen.device import get_device
from fusegen.hlo.parser import parse_module
from fusegen.runtime.executor import Executor

LAUNCH = CORPUS / "jax" / "launch"
_ACCESS = re.compile(r"\b(ld|st)\.global((?:\.\w+)*)")
_BYTES = {"8": 1, "16": 2, "32": 4, "64": 8}


def global_accesses(ptx: str) -> Counter:
    """``Counter`` of ``("ld" | "st", bytes)`` over the ``ld.global`` / ``st.global`` instructions of ``ptx``
    (``.v2`` / ``.v4`` multiply the element width: ``ld.global.v4.b32`` is a 16-byte load)."""
    out: Counter = Counter()
    for m in _ACCESS.finditer(ptx):
        mods = m.group(2).split(".")[1:]
        n = 4 if "v4" in mods else 2 if "v2" in mods else 1
        size = next((_BYTES[x[1:]] for x in mods if x[:1] in "bufs" and x[1:] in _BYTES), 4)
        out[(m.group(1), n * size)] += 1
    return out


def xla_entry(module_file: str, kernel: str, where: Path = LAUNCH) -> str:
    """The text of ``.entry KERNEL(`` in XLA's PTX of ``module_file`` (up to the next entry)."""
    text = (where / module_file.replace(".h200_opt.hlo", ".xla.ptx")).read_text()
    i = text.index(f".entry {kernel}(")
    j = text.find(".entry ", i + 1)
    return text[i:j if j > 0 else len(text)]


def fusegen_kernel(module_file: str, fusion: str, where: Path = LAUNCH):
    """``(fusion instruction, module, the primary KernelSource)`` as ``Executor.plan_fusion`` plans it for an H200."""
    if not (where / module_file).exists():
        pytest.skip(f"{where} is absent (the shared corpus is not checked out beside the project)")
    m = parse_module((where / module_file).read_text(), module_file)
    inst = next(i for c in m.computations for i in c.instructions if i.opcode == "fusion" and i.name == fusion)
    emitted, _ = Executor(m, get_device("h200"), compile_kernels=False).plan_fusion(inst)
    return inst, m, emitted.kernels[emitted.primary]
