"""The cuBLASLt backend: the ``gemm-rewriter`` pass, an autotunable codegen backend and a GPU execution backend.

* ``gemm-rewriter`` turns the dots the ``gemm-fusion`` pass left into library calls, mirroring XLA's
  ``GemmRewriter`` (``xla/service/gpu/transforms/gemm_rewriter.cc``): ``__cublas$lt$matmul`` for floating-point
  GEMMs with the epilogues XLA folds in (a vector bias along the output's trailing, rhs non-contracting
  dimensions: ``BIAS``; then ``RELU`` = ``maximum(x, 0)`` or ``GELU`` = the tanh approximation
  ``0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))``), ``__cublas$gemm`` for the rest (integer and complex GEMMs).
  The result is ``(D, s8[workspace])`` as XLA builds it, read back with ``get-tuple-element``; the config is
  XLA's ``gemm_backend_config`` JSON. A bias along any other axis (bug B13 in the corpus: a bias indexed by
  the output *row* of a dot whose result is then transposed) is left as an ``add``.
* :class:`CublasLtBackend` (XLA ``CublasLtBackend``, ``backends/gpu/autotuner/cublaslt.cc``): the configs are
  the cuBLASLt heuristic's algorithms, at most ``xla_gpu_blas_max_algorithms`` (0 means 128), each with its
  workspace bytes as scratch; default config = algorithm 0 with 4 MiB workspace. Trusted
  (``CanProduceWrongResults() == false``).
* :class:`CublasLtFissionBackend` (XLA ``FissionBackend`` over cuBLASLt, ``CUBLASLT_FISSION``): the cuBLAS
  fallback of a Triton GEMM fusion (``xla_gpu_cublas_fallback``), the fusion's dot as a cuBLASLt call
  (:func:`fission_module`) competing with the Triton configs.
* An execution backend ``cublaslt`` runs these custom calls on the GPU; without one the host backend runs them
  with numpy. It also runs the GEMM fusions the fission backend won (:func:`execute_fission`).

Library choice: **nvmath-python** (``nvmath.linalg.advanced.Matmul``) — it exposes cuBLASLt's heuristic
enumeration (``plan(preferences=MatmulPlanPreferences(limit=n))`` returns the algorithms), epilogues
(``BIAS``, ``RELU_BIAS``, ``GELU_BIAS``...) and workspace sizes, and accepts CuPy arrays; CuPy itself only wraps
legacy cuBLAS (no ``cublasLt`` module), so it cannot enumerate Lt algorithms. Without a GPU every cuBLASLt call
fails; this backend then says once why (``"cuBLASLt unavailable: libcuda.so.1 not found"``) and offers no
configs, and the rest of the pipeline goes on.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import math
from typing import Any

from fusegen.codegen_backend import CodegenBackend, CompilationFailed, Config, Executable
from fusegen.hlo.ir import Instruction, Module, Shape
from fusegen.passes.hlo_edit import NameUniquer, fusible_computations, insert_before, remove_dead, replace_all_uses, topo_sort
from fusegen.plugin_manager import hookimpl
from fusegen.registry import ExecutionBackend, HloPass

log = logging.getLogger("fusegen.cublaslt")

LT_TARGET = "__cublas$lt$matmul"
GEMM_TARGET = "__cublas$gemm"
WORKSPACE_BYTES = 4 * 1024 * 1024  # XLA's deviceless/default cuBLASLt workspace (the corpus shows s8[4194304])
K_NUM_ALGORITHMS = 128  # GemmConfig::kNumAlgorithms

_LT_TYPES = ("f16", "bf16", "f32", "f64", "f8e4m3fn", "f8e5m2")


# ================================================================================================ availability
@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """``None`` when cuBLASLt can run here, else the one-line reason (``"cuBLASLt unavailable: ..."``)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "cuBLASLt unavailable: libcuda.so.1 not found"
    try:
        import nvmath  # noqa: F401
        import nvmath.linalg.advanced  # noqa: F401
    except Exception as e:  # ImportError or a broken install
        return f"cuBLASLt unavailable: nvmath-python not importable ({type(e).__name__}: {e}); pip install 'fusegen[gpu]'"
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "cuBLASLt unavailable: no CUDA device"
    except Exception as e:
        return f"cuBLASLt unavailable: CuPy cannot reach a CUDA device ({type(e).__name__}: {e})"
    return None


_SAID: set[str] = set()


def say_once(msg: str) -> None:
    """Log ``msg`` once per process (the "backend cannot run here" notice)."""
    if msg not in _SAID:
        _SAID.add(msg)
        log.warning(msg)


# ================================================================================================ gemm-rewriter
def _dims(dot: Instruction, key: str) -> tuple[int, ...]:
    return tuple(int(x) for x in (dot.attrs.get(key) or ()))


def is_rewritable(dot: Instruction, threshold: int) -> bool:
    """Whether GemmRewriter would turn ``dot`` into a library call (``IsMatrixMultiplication`` and not tiny)."""
    from fusegen_plugins.backends.triton_gemm_fusion import is_matmul_tiny, supported_by_classical_emitters

    if dot.shape.is_tuple:
        return False
    lhs, rhs = dot.operands[0].shape, dot.operands[1].shape
    out = dot.shape.element_type
    ok_types = (out in ("f16", "bf16", "f32", "f64", "c64", "c128") and lhs.element_type in
                ("f16", "bf16", "f32", "f64", "c64", "c128", "f8e4m3fn", "f8e5m2", "s8")) or \
               (out == "s32" and lhs.element_type == "s8" and rhs.element_type == "s8")
    if not ok_types:
        return False
    if len(_dims(dot, "lhs_contracting_dims")) != 1 or len(_dims(dot, "rhs_contracting_dims")) != 1:
        return False
    if len(_dims(dot, "lhs_batch_dims")) > 1:
        return False
    if is_matmul_tiny(dot, threshold) and supported_by_classical_emitters(dot):
        return False
    return True


def _output_dims_of_rhs_noncontracting(dot: Instruction) -> tuple[int, ...]:
    lb = _dims(dot, "lhs_batch_dims")
    lc = _dims(dot, "lhs_contracting_dims")
    rb, rc = _dims(dot, "rhs_batch_dims"), _dims(dot, "rhs_contracting_dims")
    n_lhs_nc = dot.operands[0].shape.rank - len(lb) - len(lc)
    n_rhs_nc = dot.operands[1].shape.rank - len(rb) - len(rc)
    start = len(lb) + n_lhs_nc
    return tuple(range(start, start + n_rhs_nc))


def _row_major(shape: Shape) -> bool:
    return tuple(shape.minor_to_major()) == tuple(range(shape.rank - 1, -1, -1))


def _match_bias(dot: Instruction) -> tuple[Instruction, Instruction] | None:
    """``add(dot, broadcast(vector))`` with the vector along the rhs non-contracting dims: ``(add, vector)``."""
    users = dot.users
    if len(users) != 1 or users[0].opcode != "add":
        return None
    add = users[0]
    other = add.operands[1] if add.operands[0] is dot else add.operands[0]
    if other is dot or other.opcode != "broadcast" or add.shape.element_type != dot.shape.element_type:
        return None
    vec = other.operands[0]
    bdims = tuple(int(x) for x in other.attrs.get("dimensions") or ())
    want = _output_dims_of_rhs_noncontracting(dot)
    # the bias runs along the trailing logical dims of a row-major output (cuBLASLt's BIAS is per column of the
    # column-major D^T XLA emits); any other axis stays an add (corpus bug B13)
    if bdims != want or not _row_major(dot.shape) or vec.shape.rank != len(want):
        return None
    if dot.shape.element_type not in ("f16", "bf16", "f32"):
        return None
    return add, vec


def _const_value(inst: Instruction) -> float | None:
    while inst.opcode in ("broadcast", "reshape", "bitcast", "convert") and inst.operands:
        inst = inst.operands[0]
    if inst.opcode != "constant" or inst.shape.numel != 1:
        return None
    try:
        from fusegen.codegen.elemental import parse_constant

        return float(parse_constant(inst).reshape(-1)[0])
    except Exception:
        return None


def _is_const(inst: Instruction, value: float, rtol: float = 1e-3) -> bool:
    v = _const_value(inst)
    return v is not None and math.isclose(v, value, rel_tol=rtol, abs_tol=1e-6)


def _other(inst: Instruction, x: Instruction) -> Instruction | None:
    if len(inst.operands) != 2:
        return None
    a, b = inst.operands
    if a is x:
        return b
    if b is x:
        return a
    return None


def _match_relu(x: Instruction) -> Instruction | None:
    us = x.users
    if len(us) == 1 and us[0].opcode == "maximum":
        o = _other(us[0], x)
        if o is not None and _is_const(o, 0.0):
            return us[0]
    return None


def _match_cube(c: Instruction, x: Instruction) -> bool:
    if c.opcode == "power":
        return c.operands[0] is x and _is_const(c.operands[1], 3.0)
    if c.opcode == "multiply":
        a, b = c.operands
        for sq, lone in ((a, b), (b, a)):
            if lone is x and sq.opcode == "multiply" and sq.operands[0] is x and sq.operands[1] is x:
                return True
    return False


def _match_gelu(x: Instruction) -> tuple[Instruction, list[Instruction]] | None:
    """The tanh-approximate GELU on ``x``: ``(final multiply, pattern instructions)``."""
    for top in x.users:
        if top.opcode != "multiply":
            continue
        y = _other(top, x)
        if y is None or y.opcode != "multiply":
            continue
        # y = (1 + tanh(...)) * 0.5
        for onep, half in ((y.operands[0], y.operands[1]), (y.operands[1], y.operands[0])):
            if not _is_const(half, 0.5) or onep.opcode != "add":
                continue
            for th, one in ((onep.operands[0], onep.operands[1]), (onep.operands[1], onep.operands[0])):
                if th.opcode != "tanh" or not _is_const(one, 1.0):
                    continue
                inner = th.operands[0]
                if inner.opcode != "multiply":
                    continue
                for s, k in ((inner.operands[0], inner.operands[1]), (inner.operands[1], inner.operands[0])):
                    if not _is_const(k, math.sqrt(2 / math.pi)) or s.opcode != "add":
                        continue
                    t = _other(s, x)
                    if t is None or t.opcode != "multiply":
                        continue
                    for cube, c in ((t.operands[0], t.operands[1]), (t.operands[1], t.operands[0])):
                        if _is_const(c, 0.044715) and _match_cube(cube, x):
                            pattern = [top, y, onep, th, inner, s, t, cube]
                            if cube.opcode == "multiply":
                                pattern.extend(o for o in cube.operands if o is not x)
                            return top, pattern
    return None


def _pattern_closed(x: Instruction, pattern: list[Instruction], final: Instruction) -> bool:
    """Every use of ``x`` and of the pattern's intermediates stays inside the pattern."""
    ids = {id(p) for p in pattern}
    for u in x.users:
        if id(u) not in ids:
            return False
    for p in pattern:
        if p is final:
            continue
        for u in p.users:
            if id(u) not in ids:
                return False
    return True


def gemm_backend_config(dot: Instruction, epilogue: str, beta: float = 0.0) -> dict:
    """XLA's ``GpuBackendConfig`` with ``gemm_backend_config`` for ``dot`` (see the corpus module
    ``gpu_mlp_bf16.notritongemm.h100_opt.hlo``); ``selected_algorithm`` is left for the autotuner."""
    lb, rb = _dims(dot, "lhs_batch_dims"), _dims(dot, "rhs_batch_dims")
    lhs, rhs = dot.operands[0].shape, dot.operands[1].shape

    def stride(shape: Shape, batch: tuple[int, ...]) -> int:
        n = 1
        for d, s in enumerate(shape.dimensions):
            if d not in batch:
                n *= s
        return n

    prec = str(dot.attrs.get("operand_precision", "") or "")
    precs = [p.strip().upper() for p in prec.strip("{}").split(",") if p.strip()] or ["DEFAULT", "DEFAULT"]
    algorithm = str(dot.attrs.get("algorithm", "") or "ALG_UNSET").upper()
    if not algorithm.startswith("ALG_"):
        algorithm = "ALG_" + algorithm
    return {
        "operation_queue_id": "0",
        "gemm_backend_config": {
            "alpha_real": 1, "beta": beta,
            "dot_dimension_numbers": {
                "lhs_contracting_dimensions": [str(d) for d in _dims(dot, "lhs_contracting_dims")],
                "rhs_contracting_dimensions": [str(d) for d in _dims(dot, "rhs_contracting_dims")],
                "lhs_batch_dimensions": [str(d) for d in lb],
                "rhs_batch_dimensions": [str(d) for d in rb],
            },
            "alpha_imag": 0,
            "precision_config": {"operand_precision": precs, "algorithm": algorithm},
            "epilogue": epilogue,
            "lhs_stride": str(stride(lhs, lb)), "rhs_stride": str(stride(rhs, rb)),
            "grad_x": False, "grad_y": False, "damax_output": False, "scale_mode": 0,
        },
        "force_earliest_schedule": False, "reification_cost": [], "device_type": "DEVICE_TYPE_INVALID",
    }


def rewrite_dot(module: Module, dot: Instruction, uniq: NameUniquer, lt_epilogues: bool = True) -> Instruction:
    """Replace ``dot`` (and the bias/activation it feeds, where fusible) by a cuBLAS custom call.

    Returns:
        the ``get-tuple-element`` that now stands for the result.
    """
    comp = dot.parent
    lt = dot.shape.element_type in _LT_TYPES and dot.operands[0].shape.element_type in _LT_TYPES
    operands = list(dot.operands)
    epilogue = "DEFAULT"
    replaced = dot
    if lt and lt_epilogues:
        bias = _match_bias(dot)
        x = dot
        if bias is not None:
            add, vec = bias
            operands.append(vec)
            epilogue = "BIAS"
            replaced = x = add
        relu = _match_relu(x)
        gelu = _match_gelu(x) if relu is None else None
        if relu is not None:
            epilogue = "BIAS_RELU" if epilogue == "BIAS" else "RELU"
            replaced = relu
        elif gelu is not None and _pattern_closed(x, gelu[1], gelu[0]):
            epilogue = "BIAS_GELU" if epilogue == "BIAS" else "GELU"
            replaced = gelu[0]
    target = LT_TARGET if lt else GEMM_TARGET
    out_shape = Shape(replaced.shape.element_type, replaced.shape.dimensions, replaced.shape.layout)
    ws = Shape("s8", (WORKSPACE_BYTES,))
    attrs: dict[str, Any] = {"custom_call_target": target}
    if dot.attrs.get("metadata"):
        attrs["metadata"] = dot.attrs["metadata"]
    attrs["backend_config"] = gemm_backend_config(dot, epilogue)
    call = Instruction(name=uniq.get("cublas-lt-matmul" if lt else "cublas-gemm"), opcode="custom-call",
                       shape=Shape("tuple", tuple_shapes=(out_shape, ws)), operands=operands, attrs=attrs)
    insert_before(comp, call, replaced)
    gte = Instruction(name=uniq.get("get-tuple-element"), opcode="get-tuple-element", shape=out_shape,
                      operands=[call], attrs={"index": 0})
    insert_before(comp, gte, replaced)
    replace_all_uses(comp, replaced, gte)
    return gte


def run_gemm_rewriter(module: Module, options: Any = None) -> bool:
    """The ``gemm-rewriter`` pass over every fusible computation (in place); returns whether anything changed.

    Options: ``epilogues`` (bool, default true) folds bias and activation epilogues into ``__cublas$lt$matmul``.
    """
    from fusegen.passes.pipeline import pass_options

    opts = pass_options(options)
    threshold = int(opts.debug_options.xla_gpu_gemm_rewrite_size_threshold)
    epi = bool(opts.options.get("epilogues", True))
    uniq = NameUniquer(module)
    changed = False
    for comp in list(fusible_computations(module)):
        for dot in [i for i in comp.post_order() if i.opcode == "dot"]:
            if dot not in comp.instructions or not is_rewritable(dot, threshold):
                continue
            rewrite_dot(module, dot, uniq, epi)
            changed = True
        if changed:
            remove_dead(comp)
            topo_sort(comp)
    return changed


# ================================================================================================ codegen backend
def _is_cublas_call(instr: Instruction) -> bool:
    return instr.opcode == "custom-call" and str(instr.attrs.get("custom_call_target", "")) in (LT_TARGET, GEMM_TARGET)


class CublasLtBackend(CodegenBackend):
    """XLA's ``CublasLtBackend``: one config per heuristic algorithm (index + workspace bytes)."""

    name = "cublaslt"
    rank = 300  # XLA's order (factory_cuda.cc:85-100): cuDNN, Triton, cuBLASLt; level 0 takes the first
    version = "1"
    compiles_in_process = True

    def __init__(self, max_algorithms: int = 0):
        self.max_algorithms = int(max_algorithms)

    def _limit(self) -> int:
        return self.max_algorithms if self.max_algorithms > 0 else K_NUM_ALGORITHMS

    def can_produce_wrong_results(self) -> bool:
        return False

    def get_supported_configs(self, instr: Instruction) -> list[Config]:
        """The heuristic's algorithms for ``instr`` (a cuBLAS custom call); ``[]`` (said once) without a GPU."""
        if not _is_cublas_call(instr):
            return []
        why = unavailable_reason()
        if why is not None:
            say_once(why)
            return []
        algos = _gpu_algorithms(instr, self._limit())
        return [Config(self.name, {"algorithm": i, "workspace_bytes": int(ws)}) for i, ws in algos]

    def get_default_config(self, instr: Instruction) -> Config | None:
        """Algorithm 0 with the 4 MiB workspace (XLA's cuBLASLt default config)."""
        if not _is_cublas_call(instr):
            return None
        return Config(self.name, {"algorithm": 0, "workspace_bytes": WORKSPACE_BYTES})

    def scratch_bytes(self, config: Config) -> int:
        return int(config.values.get("workspace_bytes", 0))

    def compile(self, instr: Instruction, config: Config) -> Executable:
        why = unavailable_reason()
        if why is not None:
            raise CompilationFailed(why)
        return _GpuGemm(instr, int(config.values.get("algorithm", 0)))

    def validate_config(self, instr: Instruction, config: Config) -> None:
        """Value ranges, then the default check (a damaged cache entry must not size a workspace)."""
        _check_values(config)
        super().validate_config(instr, config)

    def apply_config(self, instr: Instruction, config: Config) -> None:
        """Write ``selected_algorithm`` and the workspace size (``autotune_workspace_size`` and the ``s8[...]``
        tuple element) into the custom call."""
        bc = dict(instr.backend_config)
        g = dict(bc.get("gemm_backend_config") or {})
        g["selected_algorithm"] = str(int(config.values.get("algorithm", 0)))
        ws = int(config.values.get("workspace_bytes", WORKSPACE_BYTES))
        g["autotune_workspace_size"] = str(ws)
        bc["gemm_backend_config"] = g
        instr.attrs["backend_config"] = bc
        if instr.shape.is_tuple and instr.shape.tuple_shapes:
            shapes = list(instr.shape.tuple_shapes)
            shapes[-1] = Shape("s8", (ws,))
            instr.shape = Shape("tuple", tuple_shapes=tuple(shapes))


# ================================================================================================ fission backend
def _threshold(context: Any) -> int:
    """``xla_gpu_gemm_rewrite_size_threshold`` of the plugin's configuration (XLA's fission passes the user's debug
    options to its GemmRewriter), else XLA's default 100."""
    dbg = getattr(getattr(context, "config", None), "debug_options", None)
    return int(getattr(dbg, "xla_gpu_gemm_rewrite_size_threshold", 100))


def _inline_body(body: Any, args: list[Instruction], uniq: NameUniquer, out: list[Instruction]) -> Instruction:
    """Clone ``body``'s instructions into ``out`` with its parameters standing for ``args``, nested fusions inlined;
    returns the clone of its root."""
    from fusegen.passes.hlo_edit import clone_attrs

    clones: dict[int, Instruction] = {}
    for p in body.parameters:
        clones[id(p)] = args[p.parameter_number]
    for inst in body.post_order():
        if id(inst) in clones:
            continue
        ops = [clones[id(o)] for o in inst.operands]
        if inst.opcode == "fusion":  # a nested fusion (__triton_nested_gemm_fusion's operands): its ops, inlined
            clones[id(inst)] = _inline_body(inst.fused_computation, ops, uniq, out)
            continue
        c = Instruction(name=uniq.get(inst.name), opcode=inst.opcode, shape=inst.shape, operands=ops,
                        attrs=clone_attrs(inst))
        out.append(c)
        clones[id(inst)] = c
    return clones[id(body.root)]


def fission_module(fusion: Instruction, threshold: int = 100) -> Module | None:
    """The module XLA's cuBLASLt fission backend makes of a Triton GEMM fusion (``FissionBackend::
    GetFissionedAndRewrittenModule`` with the ``GemmRewriter`` pipeline, then ``PriorityFusion``): the fused
    computation as an entry computation (nested fusions inlined), every dot a ``__cublas$lt$matmul`` call (with the
    bias and activation epilogues it folds in), the remaining ops in loop fusions. ``None`` when ``fusion`` is not a
    Triton GEMM fusion or a dot stays out of cuBLASLt (its types, a tiny dot under ``threshold``): XLA finds no
    supported instruction there and the backend offers no config."""
    from fusegen.hlo.ir import Computation
    from fusegen.passes.fusion import fuse_computation
    from fusegen_plugins.backends.triton_gemm_emitter import GEMM_KINDS

    if fusion.opcode != "fusion" or fusion.fusion_backend_kind not in GEMM_KINDS:
        return None
    module = Module(name=f"{fusion.name}.fission")
    uniq = NameUniquer(module)
    body = fusion.fused_computation
    params = [Instruction(name=uniq.get(p.name), opcode="parameter", shape=p.shape,
                          attrs={"parameter_number": p.parameter_number}) for p in body.parameters]
    insts: list[Instruction] = []
    root = _inline_body(body, params, uniq, insts)
    comp = Computation(name=uniq.get(f"{fusion.name}.fission"), instructions=params + insts, root=root, is_entry=True)
    module.computations.append(comp)
    module.entry = comp
    dots = [i for i in comp.instructions if i.opcode == "dot"]
    if not dots:
        return None
    for d in dots:
        lt = d.shape.element_type in _LT_TYPES and d.operands[0].shape.element_type in _LT_TYPES
        if not lt or not is_rewritable(d, threshold):
            return None
    for d in dots:
        rewrite_dot(module, d, uniq)
    remove_dead(comp)
    topo_sort(comp)
    fuse_computation(module, comp, uniq)
    return module


def fission_calls(module: Module) -> list[Instruction]:
    """The cuBLASLt calls of a :func:`fission_module`."""
    return [i for i in module.entry.instructions if i.opcode == "custom-call" and
            str(i.attrs.get("custom_call_target", "")) == LT_TARGET]


def _lone_call(module: Module) -> Instruction | None:
    """The call when the fission is one cuBLASLt call on the fusion's parameters, in order, and its result: nothing
    else to run."""
    calls = fission_calls(module)
    entry = module.entry
    if len(calls) != 1 or len(entry.instructions) != len(entry.parameters) + 2:
        return None
    call = calls[0]
    root = entry.root
    if root is None or root.opcode != "get-tuple-element" or root.operands[0] is not call:
        return None
    return call if list(call.operands) == entry.parameters else None


class CublasLtFissionBackend(CodegenBackend):
    """XLA's ``FissionBackend`` over cuBLASLt (``CUBLASLT_FISSION``, ``factory_cuda.cc``): the cuBLAS fallback of a
    Triton GEMM fusion. Its configs are cuBLASLt's for the call the fusion's dot becomes
    (:func:`fission_module`): on a GPU the heuristic's algorithms; without one a single config, algorithm 0 (the
    heuristic's first, XLA's cuBLASLt default) with the 4 MiB workspace, which ``fusegen.perf`` estimates as the
    call and the fusions of the rest (:meth:`fissioned`), so the library call competes with the Triton configs as
    XLA's autotuner times it beside them. ``xla_gpu_cublas_fallback=false`` leaves the backend out
    (:attr:`library_fallback`). XLA inlines the winning call in place of the fusion; fusegen keeps the fusion and
    writes the call into its backend config (:data:`fusegen.codegen.tuned_backend.LIBRARY_CALL_FIELD`): the
    ``cublaslt`` execution backend runs it (cuBLASLt on a GPU, the reference evaluator on the CPU, as a cuBLAS call
    runs there) and ``fusegen.perf`` estimates it as the call. Trusted (``CanProduceWrongResults() == false``)."""

    name = "cublaslt_fission"
    rank = 400  # XLA's order (factory_cuda.cc:85-100): cuDNN, Triton, cuBLASLt, fission
    version = "1"
    compiles_in_process = True
    modelled_by_fusegen = True  # fusegen.perf estimates fissioned(): the library call and the fusions of the rest
    library_fallback = True

    def __init__(self, max_algorithms: int = 0):
        self.max_algorithms = int(max_algorithms)

    def can_produce_wrong_results(self) -> bool:
        return False

    def _module(self, instr: Instruction) -> Module | None:
        return fission_module(instr, _threshold(self.context))

    def get_supported_configs(self, instr: Instruction) -> list[Config]:
        module = self._module(instr)
        if module is None:
            return []
        if unavailable_reason() is None:
            limit = self.max_algorithms if self.max_algorithms > 0 else K_NUM_ALGORITHMS
            algos = _gpu_algorithms(fission_calls(module)[0], limit)
            return [Config(self.name, {"algorithm": i, "workspace_bytes": int(ws)}) for i, ws in algos]
        return [Config(self.name, {"algorithm": 0, "workspace_bytes": WORKSPACE_BYTES})]

    def fissioned(self, instr: Instruction, config: Config) -> Module | None:
        """:func:`fission_module` with ``config`` applied to its calls."""
        module = self._module(instr)
        if module is None:
            return None
        lt = CublasLtBackend()
        for call in fission_calls(module):
            lt.apply_config(call, Config(lt.name, dict(config.values)))
        return module

    def scratch_bytes(self, config: Config) -> int:
        return int(config.values.get("workspace_bytes", 0))

    def compile(self, instr: Instruction, config: Config) -> Executable:
        """On a GPU the cuBLASLt call (a fission that is the call alone: prologue or epilogue kernels are not run on
        the GPU by fusegen); without one the fusion on the reference evaluator, what fusegen runs a cuBLAS call with
        on the CPU.

        Raises:
            CompilationFailed: not a GEMM fusion cuBLASLt runs, or a fission with other kernels on a GPU.
        """
        module = self.fissioned(instr, config)
        if module is None:
            raise CompilationFailed(f"%{instr.name} is not a Triton GEMM fusion whose dot cuBLASLt runs")
        if unavailable_reason() is not None:
            from fusegen_plugins.backends.host import HostExecutable

            return HostExecutable(instr)
        call = _lone_call(module)
        if call is None:
            raise CompilationFailed(f"the cuBLASLt fission of %{instr.name} has prologue or epilogue kernels; fusegen "
                                    "times only a lone cuBLASLt call on the GPU")
        return _GpuGemm(call, int(config.values.get("algorithm", 0)))

    def validate_config(self, instr: Instruction, config: Config) -> None:
        """Value ranges, then the default check."""
        _check_values(config)
        super().validate_config(instr, config)

    def apply_config(self, instr: Instruction, config: Config) -> None:
        """Name the ``cublaslt`` execution backend and the call's config in the fusion's ``fusion_backend_config``
        (:data:`~fusegen.codegen.tuned_backend.LIBRARY_CALL_FIELD`); the Triton config stays, unused.

        Raises:
            ValueError: ``instr`` is not a fusion.
        """
        from fusegen.codegen.tuned_backend import set_execution_backend

        if instr.opcode != "fusion":
            raise ValueError(f"{self.name} applies to GEMM fusions, not {instr.opcode} %{instr.name}")
        set_execution_backend(instr, "cublaslt", {"backend": self.name,
                                                  "algorithm": int(config.values.get("algorithm", 0)),
                                                  "workspace_bytes": int(config.values.get("workspace_bytes",
                                                                                           WORKSPACE_BYTES))})


def execute_fission(fusion: Instruction, operands: list[Any]) -> Any:
    """Run a GEMM fusion a tuning gave to cuBLASLt (logical numpy operands, logical result): its fission's call
    through cuBLASLt with the tuned algorithm and the fusions of the rest on the reference evaluator on a GPU; the
    fusion itself on the reference evaluator without one."""
    import numpy as np

    from fusegen.codegen.tuned_backend import library_call
    from fusegen.evaluator.evaluator import evaluate_instruction

    call = library_call(fusion) or {}
    module = None
    if unavailable_reason() is None:
        values = {k: v for k, v in call.items() if k != "backend"}
        module = CublasLtFissionBackend().fissioned(fusion, Config(CublasLtFissionBackend.name, values))
    if module is None:
        return evaluate_instruction(fusion, list(operands))
    vals: dict[int, Any] = {}
    calls = {id(c) for c in fission_calls(module)}
    for p in module.entry.parameters:
        vals[id(p)] = operands[p.parameter_number]
    for inst in module.entry.post_order():
        if id(inst) in vals:
            continue
        ops = [vals[id(o)] for o in inst.operands]
        if id(inst) in calls:
            res = execute_on_gpu(inst, ops, algorithm=int(call.get("algorithm", 0)))
            ws = inst.shape.tuple_shapes[-1]
            vals[id(inst)] = (res.get() if hasattr(res, "get") else np.asarray(res), np.zeros(ws.dimensions, np.int8))
        else:
            vals[id(inst)] = evaluate_instruction(inst, ops)
    return vals[id(module.entry.root)]


def _check_values(config: Config) -> None:
    """``algorithm`` and ``workspace_bytes`` are integers in range.

    Raises:
        fusegen.codegen_backend.ConfigError: naming the field.
    """
    from fusegen.codegen_backend import ConfigError

    for f, lo, hi in (("algorithm", -1, 1 << 16), ("workspace_bytes", 0, 1 << 32)):
        v = config.values.get(f, 0)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ConfigError(f"{f}={v!r} is not an integer in {lo}..{hi}")


# ------------------------------------------------------------------------------------------------ GPU path
_EPILOG_NAMES = {"DEFAULT": None, "BIAS": "BIAS", "RELU": "RELU", "BIAS_RELU": "RELU_BIAS", "GELU": "GELU",
                 "BIAS_GELU": "GELU_BIAS"}


def _matmul_problem(instr: Instruction, ops: list[Any]):
    """(a, b, bias, epilog name, batch) as 2-D/3-D CuPy arrays in ``[batch,] M, K`` x ``[batch,] K, N`` form."""
    import cupy as cp

    g = instr.backend_config.get("gemm_backend_config") or {}
    dn = g.get("dot_dimension_numbers") or {}
    lc = [int(x) for x in dn.get("lhs_contracting_dimensions", [])]
    rc = [int(x) for x in dn.get("rhs_contracting_dimensions", [])]
    lb = [int(x) for x in dn.get("lhs_batch_dimensions", [])]
    rb = [int(x) for x in dn.get("rhs_batch_dimensions", [])]
    a, b = cp.asarray(ops[0]), cp.asarray(ops[1])
    a = cp.moveaxis(a, lb + [d for d in range(a.ndim) if d not in lb + lc] + lc, list(range(a.ndim)))
    b = cp.moveaxis(b, rb + rc + [d for d in range(b.ndim) if d not in rb + rc], list(range(b.ndim)))
    nb = len(lb)
    a = a.reshape(a.shape[:nb] + (-1, a.shape[-1]))
    b = b.reshape(b.shape[:nb] + (b.shape[nb], -1))
    epi = str(g.get("epilogue", "DEFAULT")).upper()
    bias = cp.asarray(ops[2]).reshape(-1, 1) if epi.startswith("BIAS") and len(ops) > 2 else None
    return cp.ascontiguousarray(a), cp.ascontiguousarray(b), bias, _EPILOG_NAMES.get(epi), epi


def _gpu_algorithms(instr: Instruction, limit: int) -> list[tuple[int, int]]:
    """``(index, workspace bytes)`` of up to ``limit`` heuristic algorithms (GPU only)."""
    import cupy as cp
    import nvmath.linalg.advanced as nla

    ops = []
    for o in instr.operands:
        from fusegen.hlo import dtypes

        ops.append(cp.zeros(o.shape.dimensions, dtype=dtypes.numpy_dtype(o.shape.element_type)))
    a, b, bias, epilog, _ = _matmul_problem(instr, ops)
    with nla.Matmul(a, b) as mm:
        kw: dict[str, Any] = {"preferences": nla.MatmulPlanPreferences(limit=limit)}
        if epilog:
            kw["epilog"] = getattr(nla.MatmulEpilog, epilog)
            if bias is not None:
                kw["epilog_inputs"] = {"bias": bias}
        algos = mm.plan(**kw)
        out = []
        for i, alg in enumerate(algos):
            ws = getattr(alg, "workspace_size", None)
            out.append((i, int(ws) if ws is not None else WORKSPACE_BYTES))
        return out


class _GpuGemm(Executable):
    """Runs one cuBLAS custom call with algorithm ``index`` of the heuristic list (CuPy buffers)."""

    def __init__(self, instr: Instruction, index: int):
        self.instr = instr
        self.index = index

    def run(self, inputs, outputs, scratch) -> None:
        out = execute_on_gpu(self.instr, inputs, algorithm=self.index)
        outputs[0][...] = out.reshape(-1)


def execute_on_gpu(instr: Instruction, ops: list[Any], algorithm: int = 0):
    """Run a cuBLAS custom call through nvmath on CuPy arrays; returns the logical result (CuPy)."""
    import cupy as cp
    import nvmath.linalg.advanced as nla

    out_shape = instr.shape.tuple_shapes[0] if instr.shape.is_tuple else instr.shape
    a, b, bias, epilog, epi = _matmul_problem(instr, [cp.asarray(o) for o in ops])
    with nla.Matmul(a, b) as mm:
        kw: dict[str, Any] = {}
        if epilog:
            kw["epilog"] = getattr(nla.MatmulEpilog, epilog)
            if bias is not None:
                kw["epilog_inputs"] = {"bias": bias}
        algos = mm.plan(**kw)
        res = mm.execute(algorithm=algos[min(algorithm, len(algos) - 1)])
    from fusegen.hlo import dtypes

    return cp.asarray(res).astype(dtypes.numpy_dtype(out_shape.element_type)).reshape(out_shape.dimensions)


def _gpu_can_execute(inst: Instruction) -> bool:
    return _is_cublas_call(inst) and unavailable_reason() is None


def _gpu_execute(inst: Instruction, operands: list[Any], context: Any = None) -> Any:
    import numpy as np

    if inst.opcode == "fusion":  # a GEMM fusion tuned to cuBLASLt (the fission backend's winner)
        return execute_fission(inst, operands)
    out = execute_on_gpu(inst, operands)
    res = out.get() if hasattr(out, "get") else np.asarray(out)
    if inst.shape.is_tuple:
        ws = inst.shape.tuple_shapes[-1]
        return (res, np.zeros(ws.dimensions, dtype=np.int8))
    return res


# ================================================================================================ hooks
def _run_pass(module: Module, options: Any = None) -> bool:
    return run_gemm_rewriter(module, options)


@hookimpl
def fusegen_passes():
    from fusegen.config.options import ConfigOption

    return [HloPass(name="gemm-rewriter", run=_run_pass,
                    options=[ConfigOption("epilogues", bool, True,
                                          "Fold bias and activation epilogues into __cublas$lt$matmul.")])]


@hookimpl
def fusegen_codegen_backends():
    return [CublasLtBackend(), CublasLtFissionBackend()]


@hookimpl
def fusegen_execution_backends():
    return [ExecutionBackend(name="cublaslt", rank=500, can_execute=_gpu_can_execute, execute=_gpu_execute,
                             trusted=True)]
