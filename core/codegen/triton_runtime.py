"""Running generated Triton kernels on numpy buffers (interpreter) and compiling them for sm_90 (no GPU).

* :func:`load_kernel` writes a :class:`~fusegen.codegen.kernel.KernelSource` to a file under the kernel
  directory (named by the source's hash) and imports it: Triton's ``@jit`` needs real source files. The
  directory is private (:func:`kernel_dir`: the user's cache directory, ``0700``, refused when another
  user owns it or others may write it), and a kernel is always compiled from its source after the file's
  content is checked against the generated text: no ``__pycache__`` bytecode is read or written.
* :func:`run_interpreted` runs a kernel with ``triton.runtime.interpreter.InterpretedFunction`` on 1-D
  numpy buffers (through :class:`NpPtr`, which gives numpy arrays the torch-like surface the interpreter
  wants), a 1-D grid's programs several at a time (:mod:`fusegen.codegen.interpreter_batch`: the same bits
  as one by one). ``TRITON_INTERPRET`` stays unset so the same process can also compile. The kernel runs with
  fusegen's interpreter patches, applied for the run only and restored afterwards
  (:func:`~fusegen.codegen.interpreter_patches.patched_interpreter`): float downcasts to bf16/fp8 round
  to nearest even like the GPU, ``tl.reduce`` with fusegen's combine functions (:data:`COMBINE_PREFIX`)
  folds vectorised, boolean ``&``/``|``/``^`` stay boolean; loads and stores into the run's buffers
  (registered with ``host_buffers``) are numpy gathers and scatters.
* :func:`compile_for_target` compiles the same ``JITFunction`` for ``GPUTarget("cuda", 90, 32)`` and
  returns PTX and sizes.
* :func:`run_fusion` runs an :class:`~fusegen.codegen.kernel.EmittedFusion` on logical operand values:
  physical-order conversion, in-place output aliases, memcpy copies, every kernel's scalar launches in
  order, scratch buffers shared by index.

Environment:
    ``FUSEGEN_KERNEL_DIR``: where generated kernel modules are written (default:
    ``platformdirs.user_cache_dir("fusegen")/kernels``, e.g. ``~/.cache/fusegen/kernels``).
    ``TRITON_CACHE_DIR``: set to ``<kernel dir>/triton`` when unset. ``TRITON_DEFAULT_FP_FUSION`` is set
    to ``1`` when unset (Triton's default, made explicit so compiling prints no warning).
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import attrs
import numpy as np

from fusegen.codegen import triton_source
from fusegen.codegen.interpreter_batch import like, run_grid
from fusegen.codegen.interpreter_fast_paths import host_buffers
from fusegen.codegen.interpreter_patches import COMBINE_PREFIX, patched_interpreter, program_id_map
from fusegen.codegen.kernel_dir import KernelDirError, kernel_dir, kernel_dir_path, private_dir, read_regular
from fusegen.codegen.kernel import EmittedFusion, KernelParam, KernelSource, constant_buffer
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction, Shape
from fusegen.hlo.layout_util import from_physical, to_physical


def _setup_env() -> None:
    # Triton's own cache sits inside the private kernel directory unless the user chose one; nothing is
    # created at import time (kernel_dir() checks the directory when a kernel is written).
    if not os.environ.get("TRITON_CACHE_DIR"):
        os.environ["TRITON_CACHE_DIR"] = str(kernel_dir_path() / "triton")
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


_setup_env()


# --------------------------------------------------------------------------------------------------
# numpy adapter for the interpreter
# --------------------------------------------------------------------------------------------------
class NpPtr:
    """A numpy array dressed as the tensor the Triton 3.9 interpreter expects.

    The interpreter reads ``data_ptr()`` and ``dtype`` (a numpy dtype, ml_dtypes included, is accepted
    by Triton's type mangling) and "copies to host" through ``untyped_storage``/``cpu``/``copy_``/``set_``;
    host memory already is the host, so those are identities.
    """

    def __init__(self, arr: np.ndarray | None = None):
        if arr is not None and not arr.flags.c_contiguous:
            raise ValueError("kernel buffers must be C-contiguous")
        self.arr = arr
        self.dtype = None if arr is None else arr.dtype

    def data_ptr(self) -> int:
        return self.arr.ctypes.data

    def untyped_storage(self) -> "NpPtr":
        return self

    def cpu(self) -> "NpPtr":
        return self

    def storage_offset(self) -> int:
        return 0

    def size(self) -> tuple[int, ...]:
        return self.arr.shape

    def stride(self) -> tuple[int, ...]:
        return tuple(s // self.arr.itemsize for s in self.arr.strides)

    def new_empty(self, *a: Any, **k: Any) -> "NpPtr":
        return NpPtr.__new__(NpPtr)

    def set_(self, storage: "NpPtr", offset: int, size: Any, stride: Any) -> "NpPtr":
        self.arr = storage.arr
        self.dtype = storage.dtype
        return self

    def copy_(self, other: "NpPtr") -> "NpPtr":
        if other.arr is not self.arr:
            np.copyto(self.arr, other.arr)
        return self


def _round_afz(x: np.ndarray) -> np.ndarray:
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t).astype(x.dtype)


def _erf(x: np.ndarray) -> np.ndarray:
    from triton.runtime.interpreter import np_erf_fp32, np_erf_fp64

    return (np_erf_fp64(x) if x.dtype == np.float64 else np_erf_fp32(x)).astype(x.dtype)


def _popc(x: np.ndarray) -> np.ndarray:
    # numpy counts the bits of |x| for signed ints; the hardware counts the two's-complement pattern
    return np.bitwise_count(x.view(np.dtype(f"u{x.dtype.itemsize}"))).astype(np.int32)


def _clz(x: np.ndarray) -> np.ndarray:
    bits = x.dtype.itemsize * 8
    u = x.view(np.dtype(f"u{x.dtype.itemsize}")).astype(np.uint64)
    out = np.full(x.shape, bits, dtype=np.int32)
    for b in range(bits):
        hit = (u >> np.uint64(b)) & np.uint64(1)
        out = np.where(hit.astype(bool), bits - 1 - b, out)
    return out.astype(np.int32)


#: libdevice name -> numpy implementation used under the interpreter (which cannot call libdevice).
_NP_LIBDEVICE: dict[str, Any] = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log1p": np.log1p, "expm1": np.expm1,
    "sqrt": np.sqrt, "rsqrt": lambda x: (1 / np.sqrt(x)).astype(x.dtype), "cbrt": np.cbrt,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "sinh": np.sinh, "cosh": np.cosh,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "atan2": np.arctan2, "pow": np.power, "erf": _erf, "fmod": np.fmod,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint, "round": _round_afz,
    "popc": lambda x: _popc(x), "popcll": lambda x: _popc(x),
    "clz": _clz, "clzll": _clz,
}


class _NumpyLibdevice:
    """Stands in for ``triton.language.extra.cuda.libdevice`` inside interpreted kernels."""

    def __getattr__(self, name: str) -> Any:
        fn = _NP_LIBDEVICE.get(name)
        if fn is None:
            raise AttributeError(f"libdevice.{name} has no interpreter implementation in fusegen")

        def call(*args: Any) -> Any:
            import triton.language as tl
            from triton.runtime.interpreter import TensorHandle

            datas = [a.handle.data for a in args]
            with np.errstate(all="ignore"):
                out = np.asarray(fn(*datas))
            first = args[0]
            handles = [a.handle for a in args]  # a batch's value stays one (fusegen.codegen.interpreter_batch)
            if out.dtype == np.int32 and first.dtype.scalar != tl.int32:
                return tl.tensor(like(TensorHandle(out, tl.int32), handles),
                                 tl.block_type(tl.int32, first.shape) if first.shape else tl.int32)
            out = out.astype(datas[0].dtype, copy=False)
            return tl.tensor(like(TensorHandle(out, first.dtype.scalar), handles), first.type)

        return call


# --------------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------------
_LOCK = threading.Lock()
_MODULES: dict[tuple[str, bool], Any] = {}


def source_hash(ks: KernelSource) -> str:
    return hashlib.sha256(ks.source.encode("utf-8")).hexdigest()[:24]


def load_kernel(ks: KernelSource, interpret: bool = False) -> Any:
    """Import ``ks.source`` from a cache file and return its ``@triton.jit`` function ``ks.entry``.

    ``interpret=True`` loads a separate copy of the module whose ``libdevice`` is the numpy stand-in
    (the interpreter cannot call libdevice), so the compile path keeps the real one.

    Raises:
        ValueError: ``ks.entry`` is not a plain identifier or not defined by the source.
        SyntaxError: the generated source is not valid Python (a fusegen bug).
    """
    if not ks.entry.isidentifier() or not ks.entry.isascii():
        raise ValueError(f"kernel entry {ks.entry!r} is not a valid identifier")
    h = source_hash(ks)
    key = (h, interpret)
    with _LOCK:
        if key in _MODULES:
            return getattr(_MODULES[key], ks.entry)
        kdir = kernel_dir()
        if kdir == kernel_dir_path() and os.environ.get("TRITON_CACHE_DIR") == str(kdir / "triton"):
            private_dir(kdir / "triton", "Triton cache directory")
        path = kdir / f"k_{h}.py"
        source = read_regular(path)
        if source != ks.source:
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(ks.source)
            os.replace(tmp, path)
            source = read_regular(path)
            if source != ks.source:
                raise KernelDirError(f"kernel file {path} changed while it was written; refusing to import it")
        modname = f"fusegen_kernel_{h}{'_interp' if interpret else ''}"
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        # Compiled from the text just checked against the generated source: a `__pycache__/*.pyc` beside
        # it is never read (nor written), so planted bytecode cannot stand in for the kernel.
        code = compile(source, str(path), "exec", dont_inherit=True)
        sys.modules[modname] = mod
        exec(code, mod.__dict__)  # noqa: S102 - our generated, content-checked kernel module
        if interpret:
            mod.libdevice = _NumpyLibdevice()
        _MODULES[key] = mod
        fn = getattr(mod, ks.entry, None)
        if fn is None:
            raise ValueError(f"generated kernel {ks.name!r} defines no {ks.entry!r}")
        return fn


# --------------------------------------------------------------------------------------------------
# interpreter
# --------------------------------------------------------------------------------------------------
def _widened(ks: KernelSource, max_programs: int | None) -> tuple[tuple[int, ...], dict[str, int]]:
    """Grid and constexprs for an interpreted run.

    Kernels written over a linear index (constexprs ``BLOCK`` and ``N``, grid ``cdiv(N, BLOCK)``) compute
    the same values for any power-of-two ``BLOCK``; the interpreter's cost is per program, so such kernels
    are run with fewer, wider programs (at most ``max_programs``, ``BLOCK`` <= 65536).
    """
    grid = tuple(ks.launch.grid)
    cx = dict(ks.constexprs)
    if max_programs and "BLOCK" in cx and "N" in cx and len(grid) == 1:
        n, b = cx["N"], cx["BLOCK"]
        if grid[0] == max(1, -(-n // b)) and grid[0] > max_programs:
            want = 1 << max(0, math.ceil(math.log2(max(1, -(-n // max_programs)))))
            nb = min(max(b, want), 1 << 16)
            cx["BLOCK"] = nb
            grid = (max(1, -(-n // nb)),)
    return grid, cx


def run_interpreted(ks: KernelSource, buffers: Sequence[np.ndarray], scalars: Sequence[Any] = (),
                    max_programs: int | None = None) -> None:
    """Run ``ks`` in Triton's interpreter on 1-D storage buffers (outputs written in place).

    Args:
        ks: the kernel.
        buffers: one C-contiguous 1-D numpy array per ``ks.params`` entry, in order, already in the
            kernel's storage dtype (:func:`to_storage`).
        scalars: extra non-constexpr arguments after the pointers.
        max_programs: if set, linear-index kernels run with at most this many (wider) programs.

    Raises:
        triton.runtime.errors.InterpreterError: the kernel failed while running.
        fusegen.codegen.interpreter_patches.TritonInternalsError: the installed Triton lacks an internal that
            fusegen's patches override.
    """
    if ks.interpret_variant is not None and ks.interpret_variant.params == ks.params:
        ks = ks.interpret_variant
    grid, cx = _widened(ks, max_programs)
    _interpret(ks, buffers, scalars, grid, cx)


def run_programs(ks: KernelSource, buffers: Sequence[np.ndarray], program_ids: Sequence[tuple[int, int, int]],
                 scalars: Sequence[Any] = ()) -> None:
    """Run the programs ``program_ids`` of ``ks`` as compiled (its own source, constexprs and grid: never its
    interpreter variant nor a widened block), in that order, on 1-D storage buffers (written in place).

    Args:
        ks: the kernel; ``buffers`` and ``scalars`` as for :func:`run_interpreted`.
        program_ids: ``(x, y, z)`` ids within ``ks.launch.grid``; each program sees its id and the launch's
            grid (:func:`~fusegen.codegen.interpreter_patches.program_id_map`).

    Raises:
        ValueError: an id outside the grid; otherwise as :func:`run_interpreted`.
    """
    if program_ids:
        with program_id_map(program_ids, ks.launch.grid):
            _interpret(ks, buffers, scalars, (len(program_ids),), dict(ks.constexprs))


def _interpret(ks: KernelSource, buffers: Sequence[np.ndarray], scalars: Sequence[Any], grid: tuple[int, ...],
               cx: dict[str, int]) -> None:
    if len(buffers) != len(ks.params):
        raise ValueError(f"kernel {ks.name} takes {len(ks.params)} buffers, got {len(buffers)}")
    jitfn = load_kernel(ks, interpret=True)
    fn = getattr(jitfn, "fn", jitfn)
    args = [NpPtr(np.ascontiguousarray(b)) if not b.flags.c_contiguous else NpPtr(b) for b in buffers]
    with np.errstate(all="ignore"), host_buffers([a.arr for a in args]), patched_interpreter():
        run_grid(fn, grid, [*args, *scalars], cx)  # Triton's grid loop, its programs in batches


# --------------------------------------------------------------------------------------------------
# compiling
# --------------------------------------------------------------------------------------------------
@attrs.frozen
class CompileResult:
    """A kernel compiled for an NVIDIA target.

    Attributes:
        ptx: the PTX text (``.target sm_90a`` for capability 90).
        cubin_bytes: size of the cubin, bytes.
        num_warps: warps per program in the compiled kernel.
        shared_bytes: static shared memory, bytes.
        seconds: wall time of the compilation (0 when served from fusegen's in-process cache).
        registers: registers per thread ``ptxas`` allocated (the cubin's ``EIATTR_REGCOUNT``:
            :func:`fusegen.codegen.launch_limits.cubin_registers`); 0 when unknown.
    """

    ptx: str
    cubin_bytes: int
    num_warps: int
    shared_bytes: int
    seconds: float
    registers: int = 0


_COMPILED: dict[tuple, CompileResult] = {}


def signature_of(ks: KernelSource, scalar_types: Sequence[str] = ()) -> dict[str, str]:
    """Triton signature of ``ks``: ``*<storage>`` per buffer, then scalars, then ``constexpr``s."""
    import inspect

    jitfn = load_kernel(ks)
    names = list(inspect.signature(jitfn.fn).parameters)
    sig: dict[str, str] = {}
    for name, p in zip(names, ks.params):
        sig[name] = "*" + triton_source.storage_type(p.shape.element_type)
    rest = names[len(ks.params):]
    for name, t in zip(rest, scalar_types):
        sig[name] = t
    for name in rest[len(scalar_types):]:
        sig[name] = "constexpr"
    return sig


def launch_options(ks: KernelSource) -> dict[str, int]:
    """Compile options beyond warps and stages that ``ks`` asks for (``maxnreg``), as ``triton.compile`` and a
    launch (``fn[grid](..., **options)``) take them."""
    return {"maxnreg": ks.max_registers} if ks.max_registers else {}


def compile_for_target(ks: KernelSource, capability: int = 90, num_warps: int | None = None,
                       scalar_types: Sequence[str] = (), pointer_alignment: int = 0) -> CompileResult:
    """Compile ``ks`` for ``GPUTarget("cuda", capability, 32)`` without a GPU.

    Args:
        ks: the kernel (its ``launch.num_warps`` and ``num_stages`` are used unless overridden).
        capability: SM version as an int (90 -> sm_90a PTX).
        num_warps: override of the warps per program.
        scalar_types: Triton types of non-constexpr scalar arguments (default ``ks.scalar_types``).
        pointer_alignment: when > 0, every buffer argument is declared divisible by this many bytes, as
            Triton's JIT specialises 16-byte aligned pointers at launch (XLA's buffers are aligned), so the
            PTX shows the vectorised loads and stores the launched kernel gets.

    Raises:
        triton.compiler.errors.CompilationError: the generated kernel does not compile.
    """
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    import triton

    warps = int(num_warps or ks.launch.num_warps)
    scalar_types = tuple(scalar_types) or tuple(ks.scalar_types)
    # the buffers' types are part of the signature, not of the source: a bf16 and an f16 kernel share a text
    key = (source_hash(ks), capability, warps, ks.num_stages, pointer_alignment, scalar_types,
           tuple(sorted(ks.constexprs.items())),
           tuple(triton_source.storage_type(p.shape.element_type) for p in ks.params), ks.max_registers)
    if key in _COMPILED:
        return attrs.evolve(_COMPILED[key], seconds=0.0)
    jitfn = load_kernel(ks)
    sig = signature_of(ks, scalar_types)
    t0 = time.perf_counter()
    attrs_ = {(i,): [["tt.divisibility", pointer_alignment]] for i in range(len(ks.params))} if pointer_alignment else None
    ck = triton.compile(ASTSource(fn=jitfn, signature=sig, constexprs=dict(ks.constexprs), attrs=attrs_),
                        target=GPUTarget("cuda", capability, 32),
                        options={"num_warps": warps, "num_stages": ks.num_stages, **launch_options(ks)})
    dt = time.perf_counter() - t0
    md = ck.metadata
    from fusegen.codegen.launch_limits import cubin_registers

    cubin = ck.asm.get("cubin", b"")
    res = CompileResult(ptx=ck.asm.get("ptx", ""), cubin_bytes=len(cubin),
                        num_warps=int(getattr(md, "num_warps", warps)), shared_bytes=int(getattr(md, "shared", 0)),
                        seconds=dt, registers=cubin_registers(cubin) if isinstance(cubin, bytes) else 0)
    _COMPILED[key] = res
    return res


# --------------------------------------------------------------------------------------------------
# storage conversions and whole fusions
# --------------------------------------------------------------------------------------------------
_BIT_FLOATS = triton_source.BIT_FLOAT_TYPES


def to_storage(flat: np.ndarray, element_type: str) -> np.ndarray:
    """A physical 1-D buffer in the dtype kernels load/store (``pred`` -> ``uint8``, ``s4`` -> ``int8``,
    ``c64`` -> ``float32`` pairs)."""
    if element_type == "pred":
        return np.ascontiguousarray(np.asarray(flat).astype(np.bool_)).view(np.uint8)
    if element_type in ("s4", "s2"):
        return np.ascontiguousarray(np.asarray(flat).astype(np.int8))
    if element_type in ("u4", "u2"):
        return np.ascontiguousarray(np.asarray(flat).astype(np.uint8))
    if element_type in _BIT_FLOATS:  # float types Triton lacks: their storage bytes
        if np.asarray(flat).dtype == np.uint8:
            return np.ascontiguousarray(flat)
        return np.ascontiguousarray(np.asarray(flat).astype(dtypes.numpy_dtype(element_type))).view(np.uint8)
    if element_type in ("c64", "c128"):  # interleaved (re, im) parts
        part = np.float32 if element_type == "c64" else np.float64
        if np.asarray(flat).dtype == part:  # already a storage buffer (aliases, copies)
            return np.ascontiguousarray(flat)
        return np.ascontiguousarray(np.asarray(flat).astype(dtypes.numpy_dtype(element_type))).reshape(-1).view(part)
    return np.ascontiguousarray(np.asarray(flat).astype(dtypes.numpy_dtype(element_type), copy=False))


def from_storage(flat: np.ndarray, element_type: str) -> np.ndarray:
    """Inverse of :func:`to_storage`."""
    if element_type == "pred":
        return flat.view(np.bool_) if flat.dtype == np.uint8 else flat.astype(np.bool_)
    if element_type in ("s4", "s2", "u4", "u2"):
        return flat.astype(dtypes.numpy_dtype(element_type))
    if element_type in _BIT_FLOATS and flat.dtype == np.uint8:
        return flat.view(dtypes.numpy_dtype(element_type))
    if element_type in ("c64", "c128") and flat.dtype.kind == "f":
        return flat.view(dtypes.numpy_dtype(element_type))
    return flat


def _tuple_leaves(v: Any) -> list[Any]:
    if isinstance(v, (tuple, list)):
        out: list[Any] = []
        for x in v:
            out.extend(_tuple_leaves(x))
        return out
    return [v]


def _fusion_shapes(where: Any) -> tuple[list[Shape], Shape]:
    fusion = getattr(where, "fusion", where)
    if isinstance(fusion, Instruction):
        return [o.shape for o in fusion.operands], fusion.shape
    if isinstance(where, tuple) and len(where) == 2:
        ops, out = where
        return list(ops), out
    raise TypeError("run_fusion needs a FusionAnalysis, a fusion Instruction or (operand_shapes, output_shape)")


def run_fusion(emitted: EmittedFusion, operand_values: Sequence[Any], fusion: Any,
               *, interpret_max_programs: int | None = 16,
               before_kernel: Callable[[KernelSource, KernelSource, list[np.ndarray]], None] | None = None
               ) -> list[np.ndarray]:
    """Run an emitted fusion in the interpreter on logical values.

    Args:
        emitted: what the emitter produced.
        operand_values: one logical numpy array per fusion operand (``shape.dimensions`` order); a
            tuple-shaped operand is a (nested) tuple of them, and kernels read its leaves as separate
            buffers (parameters of kind ``"operand_leaf"``: ``index`` = operand, ``value`` = flat leaf).
        fusion: the FusionAnalysis, the fusion :class:`Instruction`, or ``(operand_shapes, output_shape)``;
            gives the layouts for the physical conversions.
        interpret_max_programs: see :func:`run_interpreted` (``None`` keeps the emitted launch).
        before_kernel: called as ``before_kernel(kernel, runner, buffers)`` before each kernel's launches:
            ``runner`` is what runs (``kernel`` or its interpreter variant), ``buffers`` its live storage buffers,
            one per parameter, which the launches then write (:mod:`fusegen.runtime.compiled_program`).

    Returns:
        The output leaves (one logical array per leaf of the fusion's shape, in order).

    Raises:
        ValueError: wrong number of operands; a kernel failing raises the interpreter's error.
    """
    op_shapes, out_shape = _fusion_shapes(fusion)
    if len(operand_values) != len(op_shapes):
        raise ValueError(f"fusion takes {len(op_shapes)} operands, got {len(operand_values)}")
    leaves = out_shape.leaves()
    phys_ops: dict[int, np.ndarray] = {}

    def operand_buffer(i: int) -> np.ndarray:
        if i not in phys_ops:
            v = operand_values[i]
            if isinstance(v, tuple):
                raise ValueError(f"fusion operand {i} is a tuple: its kernel parameters are per leaf "
                                 "(kind 'operand_leaf')")
            s = op_shapes[i]
            phys_ops[i] = to_storage(to_physical(np.asarray(v), s), s.element_type)
        return phys_ops[i]

    phys_leaves: dict[tuple[int, int], np.ndarray] = {}

    def leaf_buffer(i: int, k: int) -> np.ndarray:
        """Buffer of flat leaf ``k`` of the tuple-shaped operand ``i`` (XLA passes each leaf's buffer)."""
        if (i, k) not in phys_leaves:
            v = operand_values[i]
            s = op_shapes[i]
            vals = _tuple_leaves(v)
            shapes = s.leaves()
            if len(vals) != len(shapes) or not 0 <= k < len(vals):
                raise ValueError(f"fusion operand {i} has {len(vals)} leaves; the kernel reads leaf {k} "
                                 f"of {len(shapes)}")
            ls = shapes[k]
            phys_leaves[(i, k)] = to_storage(to_physical(np.asarray(vals[k]), ls), ls.element_type)
        return phys_leaves[(i, k)]

    scratch: dict[int, np.ndarray] = {}

    def scratch_buffer(p: KernelParam) -> np.ndarray:
        """Scratch ``p.index``: one zeroed buffer per fusion, shared by all its kernels and launches."""
        if p.index not in scratch:
            z = np.zeros(p.shape.numel, dtype=dtypes.numpy_dtype(p.shape.element_type))
            scratch[p.index] = to_storage(z, p.shape.element_type)
        return scratch[p.index]

    outs: list[np.ndarray] = []
    for k, s in enumerate(leaves):
        if k in emitted.output_aliases:
            src = operand_buffer(emitted.output_aliases[k])
            outs.append(to_storage(src, s.element_type).copy())
        else:
            outs.append(to_storage(np.zeros(s.numel, dtype=dtypes.numpy_dtype(s.element_type)), s.element_type))
    for op, leaf in emitted.copies:
        outs[leaf][...] = to_storage(operand_buffer(op), leaves[leaf].element_type)
    for ks in emitted.kernels:
        bufs: list[np.ndarray] = []
        for p in ks.params:
            if p.kind == "operand":
                bufs.append(operand_buffer(p.index))
            elif p.kind == "operand_leaf":
                bufs.append(leaf_buffer(p.index, int(p.value)))
            elif p.kind == "output":
                bufs.append(outs[p.index])
            elif p.kind == "constant":
                bufs.append(to_storage(constant_buffer(np.asarray(p.value), p.shape), p.shape.element_type))
            elif p.kind == "scratch":
                bufs.append(scratch_buffer(p))
            else:
                raise ValueError(f"unknown kernel parameter kind {p.kind!r}")
        variant = ks.interpret_variant
        runner = variant if variant is not None and variant.params == ks.params else ks
        if before_kernel is not None:
            before_kernel(ks, runner, bufs)
        for args in runner.launch_args:  # a variant may merge launches (the same steps, in order)
            run_interpreted(runner, bufs, scalars=args, max_programs=interpret_max_programs)
    return [from_physical(from_storage(b, s.element_type), s) for b, s in zip(outs, leaves)]


__all__ = [
    "COMBINE_PREFIX", "NpPtr", "CompileResult", "load_kernel", "run_interpreted", "run_programs", "compile_for_target",
    "run_fusion",
    "to_storage", "from_storage", "kernel_dir", "KernelParam",
]
