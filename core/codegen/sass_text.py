"""Reading the CUDA tools' text: ``ptxas -v`` info lines, ``cuobjdump -sass`` listings, PTX modules.

Pure functions over text (no tools run here; :mod:`fusegen.codegen.sass` runs them). What is counted in a
function's SASS (:func:`sass_counts`), per instruction line ``/*ADDR*/ [@pred] OPCODE.MODS operands ;``:

* tensor-core instructions: ``HMMA`` / ``IMMA`` / ``DMMA`` / ``BMMA`` and the sm_90 warpgroup forms ``HGMMA`` /
  ``IGMMA`` / ``QGMMA`` (fp8) / ``BGMMA`` (and Blackwell's ``UTC*MMA`` / ``OMMA``), by full opcode;
* global memory instructions by access width in bytes: loads ``LDG`` / ``LDGSTS`` (global to shared, also
  counted as a shared-memory op) / generic ``LD``; stores ``STG`` / generic ``ST``; atomics ``ATOMG`` / ``ATOM`` /
  ``RED`` / ``REDG``. The width is the last size modifier (``.128`` = 16 B, ``.64`` = 8 B, ``.U16`` = 2 B, ``.U8``
  = 1 B; ``.F64`` / ``.S64`` / ``.U64`` on atomics = 8 B), 4 B when there is none;
* TMA bulk copies (``UTMALDG`` / ``UTMASTG`` / ``UTMAREDG`` / ``UBLKCP`` / ``UBLKRED``) by opcode;
* shared-memory instructions ``LDS`` / ``STS`` / ``LDSM`` / ``STSM`` / ``ATOMS`` (and ``LDGSTS``);
* ``BAR`` barriers; all instructions except ``NOP`` and the final branch-to-self after ``EXIT``;
* backward branches (``BRA``/``JMP`` to a lower address): the kernel has a runtime loop, whose body the static
  counts above see once.
"""

from __future__ import annotations

import re
from collections import Counter

__all__ = ["TENSOR_CORE", "parse_ptxas_info", "split_sass", "sass_counts", "ptx_modules", "ptx_module_of",
           "ptx_entries", "access_bytes"]

_COMPILING = re.compile(r"Compiling (?:entry )?function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)\s*\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, "
                    r"(\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_FUNCTION = re.compile(r"^\s*Function : (\S+)\s*$")
_INST = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+([^;]*?)\s*;")
_PRED = re.compile(r"^@!?U?P(?:T|\d+)$")
_ENTRY = re.compile(r"\.entry\s+([\w$.]+)\s*\(")

#: tensor-core instruction bases (sm_70..sm_90 MMA, sm_90 warpgroup MMA, Blackwell tcgen05 / OMMA)
TENSOR_CORE = re.compile(r"^(?:[HIDBQ]G?MMA|UTC\w*MMA|OMMA)$")
_LOADS = frozenset({"LDG", "LDGSTS", "LD"})
_STORES = frozenset({"STG", "ST"})
_ATOMICS = frozenset({"ATOMG", "ATOM", "RED", "REDG"})
_TMA = frozenset({"UTMALDG", "UTMASTG", "UTMAREDG", "UBLKCP", "UBLKRED"})
_SHARED = frozenset({"LDS", "STS", "LDSM", "STSM", "ATOMS", "LDGSTS"})
_SIZE_BYTES = {"8": 1, "U8": 1, "S8": 1, "16": 2, "U16": 2, "S16": 2, "32": 4, "64": 8, "F64": 8, "S64": 8,
               "U64": 8, "128": 16, "256": 32}


def parse_ptxas_info(log: str) -> dict[str, dict[str, int]]:
    """Per function of a ``ptxas -v`` log: ``{"registers", "spill_store_bytes", "spill_load_bytes",
    "stack_frame_bytes", "static_shared_bytes"}`` (bytes; registers are 32-bit registers per thread).

    Reads ``Compiling entry function 'NAME'``, the ``Function properties for NAME`` block and the ``Used N
    registers, ... M bytes smem`` line that follows (the ``ptxas`` / ``ptxas-blackwell`` prefix does not matter).
    A function without a ``Used`` line keeps 0 registers.
    """
    out: dict[str, dict[str, int]] = {}

    def entry(name: str) -> dict[str, int]:
        return out.setdefault(name, {"registers": 0, "spill_store_bytes": 0, "spill_load_bytes": 0,
                                     "stack_frame_bytes": 0, "static_shared_bytes": 0})

    current = None
    for line in log.splitlines():
        if m := _COMPILING.search(line):
            current = m.group(1)
            entry(current)
        elif (m := _USED.search(line)) and current is not None:
            entry(current)["registers"] = int(m.group(1))
            s = _SMEM.search(line)
            entry(current)["static_shared_bytes"] = int(s.group(1)) if s else 0
    for m in _PROPS.finditer(log):
        entry(m.group(1)).update(stack_frame_bytes=int(m.group(2)), spill_store_bytes=int(m.group(3)),
                                 spill_load_bytes=int(m.group(4)))
    return out


def split_sass(listing: str) -> dict[str, str]:
    """``cuobjdump -sass`` output cut into one text per ``Function : NAME`` (in listing order)."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in listing.splitlines():
        if m := _FUNCTION.match(line):
            current = out.setdefault(m.group(1), [])
        elif current is not None:
            current.append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def access_bytes(modifiers: list[str]) -> int:
    """Bytes one thread moves in a memory instruction with these opcode modifiers (4 when none gives a size)."""
    size = 4
    for m in modifiers:
        size = _SIZE_BYTES.get(m, size)
    return size


def sass_counts(sass: str) -> dict:
    """Static counts over one function's SASS (see the module docstring for what is counted).

    Returns ``{"sass_instructions", "tensor_core_ops": {opcode: n}, "global_loads": {bytes: n},
    "global_stores": {bytes: n}, "global_atomics": {bytes: n}, "tma_ops": {opcode: n}, "shared_ops": {base: n},
    "barriers", "backward_branches"}``.
    """
    total = barriers = back = 0
    tc: Counter = Counter()
    loads: Counter = Counter()
    stores: Counter = Counter()
    atomics: Counter = Counter()
    tma: Counter = Counter()
    shared: Counter = Counter()
    for line in sass.splitlines():
        m = _INST.match(line)
        if m is None:
            continue
        addr = int(m.group(1), 16)
        toks = m.group(2).split()
        if toks and _PRED.match(toks[0]):
            toks = toks[1:]
        if not toks:
            continue
        opcode = toks[0]
        base, *mods = opcode.split(".")
        if base == "NOP":
            continue
        if base in ("BRA", "JMP") and len(toks) > 1:
            try:
                target = int(toks[-1].rstrip(","), 16)
            except ValueError:
                target = None
            if target == addr:
                continue  # the branch-to-self that ends every function
            if target is not None and target < addr:
                back += 1
        total += 1
        if TENSOR_CORE.match(base):
            tc[opcode] += 1
        if base in _LOADS:
            loads[access_bytes(mods)] += 1
        elif base in _STORES:
            stores[access_bytes(mods)] += 1
        elif base in _ATOMICS:
            atomics[access_bytes(mods)] += 1
        elif base in _TMA:
            tma[opcode] += 1
        if base in _SHARED:
            shared[base] += 1
        barriers += base == "BAR"
    return {"sass_instructions": total, "tensor_core_ops": dict(tc), "global_loads": dict(sorted(loads.items())),
            "global_stores": dict(sorted(stores.items())), "global_atomics": dict(sorted(atomics.items())),
            "tma_ops": dict(tma), "shared_ops": dict(shared), "barriers": barriers, "backward_branches": back}


def ptx_modules(ptx: str) -> list[str]:
    """The PTX modules in ``ptx``: one per ``.version`` directive, each from it to the next one.

    XLA's dumps concatenate several modules (``NAME.xla.ptx``), each with its own ``.version`` / ``.target``
    header; ``ptxas`` takes one module at a time. A text without ``.version`` is returned whole.
    """
    starts = [m.start() for m in re.finditer(r"^[ \t]*\.version\b", ptx, re.M)]
    if not starts:
        return [ptx]
    return [ptx[a:b] for a, b in zip(starts, starts[1:] + [len(ptx)])]


def ptx_entries(ptx: str) -> list[str]:
    """Names of the ``.entry`` kernels defined in ``ptx``, in order."""
    return _ENTRY.findall(ptx)


def ptx_module_of(ptx: str, entry: str) -> str | None:
    """The PTX module of ``ptx`` that defines ``.entry ENTRY(``, or ``None``."""
    pat = re.compile(r"\.entry\s+" + re.escape(entry) + r"\s*\(")
    return next((m for m in ptx_modules(ptx) if pat.search(m)), None)
