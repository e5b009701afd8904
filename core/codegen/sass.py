"""Machine-code statistics of a kernel for sm_90, without a GPU: ``ptxas -v`` and ``cuobjdump -sass``.

:func:`kernel_sass_stats` compiles a fusegen :class:`~fusegen.codegen.kernel.KernelSource` to PTX through
:func:`fusegen.codegen.triton_runtime.compile_for_target` (buffers declared 16-byte aligned, as XLA's are and as
Triton's JIT specialises them at launch), assembles it with the Triton wheel's ``ptxas -arch=sm_90a -v`` and
disassembles the cubin with its ``cuobjdump -sass``. :func:`ptx_sass_stats` does the same from PTX text (XLA's
``NAME.xla.ptx``: the module holding the entry is assembled whole), so both sides are measured alike. Both return
a :class:`SassStats` (registers, spills, stack, shared memory, tensor-core / global / shared-memory instruction
counts, loops); :meth:`SassStats.occupancy` turns it into resident blocks per SM
(:func:`fusegen.codegen.occupancy.occupancy`).

The assembler is Triton's own for the capability (``triton.backends.nvidia.compiler.get_ptxas``: the wheel's
``ptxas-blackwell``, CUDA 13, since Triton's PTX is ``.version 9.x``); XLA's PTX (``.version 8.8``) goes through
the same one. ``FUSEGEN_PTXAS`` / ``FUSEGEN_CUOBJDUMP`` choose other binaries.

Results are cached on disk as JSON (the raw ``ptxas`` log and SASS text; statistics are recomputed from them on
every read, so a parser change needs no recompile), one file per content hash of what was assembled (PTX module
text, or kernel source + constexprs + argument types + warps + stages + alignment), the Triton version and the
``ptxas`` version. Directory: ``cache_dir``, else ``FUSEGEN_SASS_CACHE``, else ``platformdirs.user_cache_dir(
"fusegen")/sass``. Concurrent processes are safe: a per-entry file lock (``filelock``) makes one of them compile
while the others wait, and files are replaced atomically. A damaged entry is recompiled. Failures are not cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import attrs

from fusegen.codegen.occupancy import Occupancy, occupancy
from fusegen.codegen.sass_text import parse_ptxas_info, ptx_module_of, sass_counts, split_sass
from fusegen.device import DeviceDescription

__all__ = ["SassError", "SassStats", "SassTools", "sass_tools", "tools_unavailable_reason", "kernel_sass_stats",
           "ptx_sass_stats", "stats_from_text", "assemble", "default_cache_dir", "CACHE_SCHEMA"]

#: part of every cache key: bump when what is assembled, or how, changes
CACHE_SCHEMA = "fusegen-sass-1"
_TIMEOUT_S = 900


class SassError(RuntimeError):
    """``ptxas`` / ``cuobjdump`` are missing or failed, or a kernel did not compile for the target; the message
    names the kernel."""


def _int_keys(d: dict) -> dict[int, int]:
    return {int(k): int(v) for k, v in d.items()}


@attrs.frozen
class SassStats:
    """Static statistics of one kernel's sm_90 machine code (``ptxas -v`` + ``cuobjdump -sass``).

    Counts are static: a loop body counts once (``has_loop`` says whether there is one).

    Attributes:
        kernel: the kernel: its ``.entry`` name (:func:`ptx_sass_stats`) or ``KernelSource.name``
            (:func:`kernel_sass_stats`).
        registers: 32-bit registers per thread.
        spill_store_bytes, spill_load_bytes: bytes of register spills per thread.
        stack_frame_bytes: per-thread stack frame, bytes.
        static_shared_bytes: ``.shared`` memory declared in the PTX, bytes (``ptxas``'s ``bytes smem``).
        dynamic_shared_bytes: shared memory given at launch, bytes (a Triton kernel's ``shared``: Triton's
            shared memory is dynamic; for PTX, what the caller passes, e.g. XLA's thunk ``shared_memory``).
        threads_per_block: threads per block (Triton: 32 x ``num_warps``; PTX: its ``.reqntid`` /
            ``.maxntid``), ``None`` when the PTX does not say.
        num_warps: warps per program of a compiled Triton kernel, ``None`` for PTX.
        sass_instructions: SASS instructions (no ``NOP``, no final branch-to-self).
        tensor_core_ops: tensor-core instructions by opcode (``HMMA.16816.F32.BF16``: n).
        global_loads, global_stores, global_atomics: global memory instructions by access width in bytes per
            thread (``{16: 2, 2: 8}``).
        tma_ops: TMA / bulk copy instructions by opcode.
        shared_ops: shared-memory instructions by base opcode (``LDS``, ``STS``, ``LDSM``, ``STSM``, ``ATOMS``,
            ``LDGSTS``).
        barriers: ``BAR`` instructions.
        backward_branches: branches to a lower address (runtime loops).
    """

    kernel: str
    registers: int
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_frame_bytes: int = 0
    static_shared_bytes: int = 0
    dynamic_shared_bytes: int = 0
    threads_per_block: int | None = None
    num_warps: int | None = None
    sass_instructions: int = 0
    tensor_core_ops: dict[str, int] = attrs.field(factory=dict)
    global_loads: dict[int, int] = attrs.field(factory=dict, converter=_int_keys)
    global_stores: dict[int, int] = attrs.field(factory=dict, converter=_int_keys)
    global_atomics: dict[int, int] = attrs.field(factory=dict, converter=_int_keys)
    tma_ops: dict[str, int] = attrs.field(factory=dict)
    shared_ops: dict[str, int] = attrs.field(factory=dict)
    barriers: int = 0
    backward_branches: int = 0

    @property
    def spill_bytes(self) -> int:
        """Spill stores + spill loads, bytes."""
        return self.spill_store_bytes + self.spill_load_bytes

    @property
    def shared_bytes(self) -> int:
        """Static + dynamic shared memory per block, bytes."""
        return self.static_shared_bytes + self.dynamic_shared_bytes

    @property
    def tensor_core_instructions(self) -> int:
        """Tensor-core instructions (HMMA / IMMA / HGMMA / QGMMA / ...)."""
        return sum(self.tensor_core_ops.values())

    @property
    def global_memory_instructions(self) -> int:
        """Global loads + stores + atomics + TMA copies."""
        return (sum(self.global_loads.values()) + sum(self.global_stores.values())
                + sum(self.global_atomics.values()) + sum(self.tma_ops.values()))

    @property
    def mean_global_access_bytes(self) -> float:
        """Bytes per thread per global load / store / atomic instruction (16.0: all 128-bit), 0 when none."""
        n = sum(self.global_loads.values()) + sum(self.global_stores.values()) + sum(self.global_atomics.values())
        moved = sum(w * c for d in (self.global_loads, self.global_stores, self.global_atomics) for w, c in d.items())
        return moved / n if n else 0.0

    @property
    def shared_memory_instructions(self) -> int:
        """``LDS`` / ``STS`` / ``LDSM`` / ``STSM`` / ``ATOMS`` (``LDGSTS`` is counted as a global load)."""
        return sum(v for k, v in self.shared_ops.items() if k != "LDGSTS")

    @property
    def has_loop(self) -> bool:
        """The kernel branches backwards (a runtime loop)."""
        return self.backward_branches > 0

    def occupancy(self, device: DeviceDescription, threads_per_block: int | None = None) -> Occupancy:
        """Resident blocks per SM of ``device`` (:func:`fusegen.codegen.occupancy.occupancy`) with this kernel's
        registers and shared memory; ``threads_per_block`` defaults to the kernel's own.

        Raises:
            ValueError: threads per block unknown (PTX without ``.reqntid``) and not given.
        """
        t = threads_per_block or self.threads_per_block
        if not t:
            raise ValueError(f"kernel {self.kernel}: threads per block unknown; pass threads_per_block")
        return occupancy(device, self.registers, t, self.shared_bytes)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (width keys as strings) with the derived figures added."""
        d = attrs.asdict(self)
        for k in ("global_loads", "global_stores", "global_atomics"):
            d[k] = {str(w): n for w, n in sorted(d[k].items())}
        d.update(spill_bytes=self.spill_bytes, shared_bytes=self.shared_bytes,
                 tensor_core_instructions=self.tensor_core_instructions,
                 global_memory_instructions=self.global_memory_instructions,
                 mean_global_access_bytes=self.mean_global_access_bytes,
                 shared_memory_instructions=self.shared_memory_instructions, has_loop=self.has_loop)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SassStats":
        """The inverse of :meth:`to_json` (derived keys ignored)."""
        names = {a.name for a in attrs.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def stats_from_text(entry: str, ptxas_log: str, sass: str, dynamic_shared_bytes: int = 0,
                    threads_per_block: int | None = None, num_warps: int | None = None) -> SassStats:
    """:class:`SassStats` of function ``entry`` from a ``ptxas -v`` log and that function's SASS text.

    Raises:
        SassError: the log has no ``Compiling entry function 'ENTRY'``.
    """
    info = parse_ptxas_info(ptxas_log)
    if entry not in info:
        raise SassError(f"kernel {entry}: ptxas reported no function of that name (reported: {sorted(info)[:8]})")
    return SassStats(kernel=entry, **info[entry], **sass_counts(sass), dynamic_shared_bytes=int(dynamic_shared_bytes),
                     threads_per_block=threads_per_block, num_warps=num_warps)


# --------------------------------------------------------------------------------------------------
# tools
# --------------------------------------------------------------------------------------------------
@attrs.frozen
class SassTools:
    """The assembler and disassembler used (paths) and the ``ptxas`` version (part of cache keys)."""

    ptxas: str
    cuobjdump: str
    ptxas_version: str


def sass_tools(capability: int = 90) -> SassTools:
    """Triton's ``ptxas`` for ``sm_<capability>`` and the wheel's ``cuobjdump`` (or ``FUSEGEN_PTXAS`` /
    ``FUSEGEN_CUOBJDUMP``).

    Raises:
        SassError: Triton's NVIDIA backend is missing, or a binary is absent or not executable.
    """
    ptxas = os.environ.get("FUSEGEN_PTXAS")
    version = ""
    bin_dir = None
    try:
        import triton

        bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
        if not ptxas:
            from triton.backends.nvidia.compiler import get_ptxas

            tool = get_ptxas(capability)
            ptxas, version = tool.path, str(tool.version)
    except Exception as e:  # noqa: BLE001 - no NVIDIA backend, or its ptxas does not run
        if not ptxas:
            raise SassError(f"no ptxas for sm_{capability}: Triton's NVIDIA backend gave none "
                            f"({type(e).__name__}: {e}); install the triton wheel, or set FUSEGEN_PTXAS") from None
    cuobjdump = os.environ.get("FUSEGEN_CUOBJDUMP") or (str(bin_dir / "cuobjdump") if bin_dir else "")
    for what, path in (("ptxas", ptxas), ("cuobjdump", cuobjdump)):
        if not path or not (os.path.isfile(path) and os.access(path, os.X_OK)) and not shutil.which(path):
            raise SassError(f"{what} not found or not executable at {path or '(none)'}: install the triton wheel "
                            f"(it ships both), or set FUSEGEN_{what.upper()}")
    if not version:
        p = subprocess.run([ptxas, "--version"], capture_output=True, text=True, timeout=60)
        version = (re.findall(r"release ([\d.]+)", p.stdout) or [p.stdout.strip()[-40:]])[0]
    return SassTools(ptxas=ptxas, cuobjdump=cuobjdump, ptxas_version=version)


def tools_unavailable_reason(capability: int = 90) -> str | None:
    """``None`` when ``ptxas`` and ``cuobjdump`` can run, else why not (one line, for a test's skip reason)."""
    try:
        sass_tools(capability)
    except (SassError, OSError, subprocess.SubprocessError) as e:
        return str(e)
    return None


def _arch_of(ptx: str) -> str:
    m = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.M)
    return m.group(1) if m else "sm_90a"


def assemble(ptx: str, name: str, tools: SassTools | None = None, arch: str | None = None) -> tuple[str, dict[str, str]]:
    """Run ``ptxas -arch=ARCH -v`` on one PTX module, then ``cuobjdump -sass`` on the cubin (no cache).

    Args:
        ptx: one PTX module (``.version`` ... ); ``arch`` defaults to its ``.target`` (else ``sm_90a``).
        name: the kernel this is for, named in errors.

    Returns:
        ``(ptxas log, {function name: SASS text})``.

    Raises:
        SassError: a tool is missing, failed or timed out (message names ``name`` and quotes the tool's output).
    """
    tools = tools or sass_tools()
    arch = arch or _arch_of(ptx)
    with tempfile.TemporaryDirectory(prefix="fusegen-sass-") as d:
        src, cubin = Path(d) / "k.ptx", Path(d) / "k.cubin"
        src.write_text(ptx)
        steps = ((tools.ptxas, [tools.ptxas, f"-arch={arch}", "-v", "-o", str(cubin), str(src)]),
                 (tools.cuobjdump, [tools.cuobjdump, "-sass", str(cubin)]))
        outs = []
        for tool, cmd in steps:
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise SassError(f"kernel {name}: {Path(tool).name} did not run: {type(e).__name__}: {e}") from None
            if p.returncode != 0:
                tail = (p.stderr or p.stdout).strip()[-800:]
                raise SassError(f"kernel {name}: {Path(tool).name} -arch={arch} failed (exit {p.returncode}): {tail}")
            outs.append(p.stdout + "\n" + p.stderr)
    return outs[0], split_sass(outs[1])


# --------------------------------------------------------------------------------------------------
# cache
# --------------------------------------------------------------------------------------------------
def default_cache_dir() -> Path:
    """``FUSEGEN_SASS_CACHE``, else ``platformdirs.user_cache_dir("fusegen")/sass`` (not created here)."""
    env = os.environ.get("FUSEGEN_SASS_CACHE")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("fusegen", appauthor=False)) / "sass"


def _cached(cache_dir: Path | None, key: str, make) -> dict:
    """The JSON entry ``key`` under ``cache_dir`` (``None``: no cache), made by ``make()`` under a file lock."""
    if cache_dir is None:
        return make()
    from filelock import FileLock

    path = cache_dir / key[:2] / f"{key}.json"

    def read() -> dict | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("schema") == CACHE_SCHEMA else None

    if (hit := read()) is not None:
        return hit
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=2 * _TIMEOUT_S):
        if (hit := read()) is not None:
            return hit
        data = {"schema": CACHE_SCHEMA, **make()}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    return data


def _resolve_cache(cache_dir: str | os.PathLike | None, use_cache: bool) -> Path | None:
    return (Path(cache_dir) if cache_dir is not None else default_cache_dir()) if use_cache else None


def _hash(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str, sort_keys=True).encode()).hexdigest()[:32]


# --------------------------------------------------------------------------------------------------
# the two entry points
# --------------------------------------------------------------------------------------------------
_NTID = re.compile(r"\.(?:reqntid|maxntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")


def _entry_threads(module: str, entry: str) -> int | None:
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\(", module)
    body_start = module.find("{", m.end()) if m else -1
    head = module[m.end():body_start] if m and body_start > 0 else ""
    if t := _NTID.search(head):
        n = 1
        for g in t.groups():
            n *= int(g or 1)
        return n
    return None


def ptx_sass_stats(ptx_text: str, entry: str, dynamic_shared_bytes: int = 0, *,
                   cache_dir: str | os.PathLike | None = None, use_cache: bool = True) -> SassStats:
    """:class:`SassStats` of kernel ``entry`` of PTX text (e.g. XLA's ``NAME.xla.ptx``, several modules).

    The PTX module defining ``.entry ENTRY(`` is assembled whole (once: its other kernels are then cache hits).

    Args:
        ptx_text: PTX, one module or a concatenation of modules.
        entry: the kernel's ``.entry`` name (XLA: the thunk's kernel name).
        dynamic_shared_bytes: the launch's dynamic shared memory (XLA's thunk ``shared_memory``), bytes.
        cache_dir: cache directory (default :func:`default_cache_dir`); ``use_cache=False``: no cache.

    Raises:
        SassError: no ``.entry ENTRY`` in the text, tools missing or failing.
    """
    module = ptx_module_of(ptx_text, entry)
    if module is None:
        raise SassError(f"kernel {entry}: no `.entry {entry}(` in the PTX")
    tools = sass_tools()
    key = _hash(CACHE_SCHEMA, "ptx", tools.ptxas_version, module)

    def make() -> dict:
        log, funcs = assemble(module, entry, tools)
        return {"ptxas_log": log, "sass": funcs}

    data = _cached(_resolve_cache(cache_dir, use_cache), key, make)
    if entry not in data["sass"]:
        raise SassError(f"kernel {entry}: cuobjdump listed no function of that name ({sorted(data['sass'])[:8]})")
    return stats_from_text(entry, data["ptxas_log"], data["sass"][entry], dynamic_shared_bytes,
                           threads_per_block=_entry_threads(module, entry))


def kernel_sass_stats(ks, *, capability: int = 90, pointer_alignment: int = 16, num_warps: int | None = None,
                      cache_dir: str | os.PathLike | None = None, use_cache: bool = True) -> SassStats:
    """Compile ``ks`` (a :class:`~fusegen.codegen.kernel.KernelSource`) for ``sm_<capability>`` and measure it.

    Args:
        ks: the kernel; its constexprs, scalar types, ``launch.num_warps`` and ``num_stages`` are compiled.
        pointer_alignment: bytes every buffer argument is declared divisible by (16: XLA's buffers, and what
            Triton's JIT specialises at launch; 0: none).
        num_warps: override of ``ks.launch.num_warps``.
        cache_dir: cache directory (default :func:`default_cache_dir`); ``use_cache=False``: no cache.

    Raises:
        SassError: the kernel does not compile for the target (Triton's error quoted), or the tools are missing or
            fail; the message names ``ks.name``.
    """
    import triton

    from fusegen.codegen import triton_runtime, triton_source

    tools = sass_tools(capability)
    warps = int(num_warps or ks.launch.num_warps)
    key = _hash(CACHE_SCHEMA, "triton", triton.__version__, tools.ptxas_version, capability, pointer_alignment, warps,
                ks.num_stages, list(ks.scalar_types), sorted(ks.constexprs.items()), ks.entry,
                [triton_source.storage_type(p.shape.element_type) for p in ks.params], ks.source,
                *([("maxnreg", ks.max_registers)] if ks.max_registers else []))  # uncapped keys stay as they were

    def make() -> dict:
        try:
            cr = triton_runtime.compile_for_target(ks, capability=capability, num_warps=warps,
                                                   pointer_alignment=pointer_alignment)
        except Exception as e:  # noqa: BLE001 - Triton raises many types; one error naming the kernel
            first = (str(e).strip().splitlines() or [""])[0][:400]
            raise SassError(f"kernel {ks.name}: sm_{capability} compile failed: {type(e).__name__}: {first}") from e
        m = re.search(r"\.entry\s+([\w$]+)\s*\(", cr.ptx)
        if m is None:
            raise SassError(f"kernel {ks.name}: Triton's PTX has no .entry")
        log, funcs = assemble(cr.ptx, ks.name, tools)
        if m.group(1) not in funcs:
            raise SassError(f"kernel {ks.name}: no SASS for entry {m.group(1)} (functions {sorted(funcs)})")
        return {"entry": m.group(1), "ptxas_log": log, "sass": funcs[m.group(1)], "num_warps": cr.num_warps,
                "shared_bytes": cr.shared_bytes}

    data = _cached(_resolve_cache(cache_dir, use_cache), key, make)
    st = stats_from_text(data["entry"], data["ptxas_log"], data["sass"], data["shared_bytes"],
                         threads_per_block=32 * data["num_warps"], num_warps=data["num_warps"])
    return attrs.evolve(st, kernel=ks.name)
