"""The cuDNN backend: cuDNN graphs for ``__cudnn$fusion`` fusions (nvidia-cudnn-frontend), and their plans.

Mirrors XLA's ``CuDnnFusionCompiler`` graph conversion (``xla/backends/gpu/transforms/cudnn_fusion_compiler.cc``,
``HloToCudnn``) and ``CudnnBackend`` (``xla/backends/gpu/autotuner/cudnn.cc``):

* graph building (:func:`build_graph`) works on the CPU: parameters become graph tensors whose dimensions and
  strides come from the HLO layout (bitcasts, copies, transposes and reshapes of parameters are folded into the
  strides); the hero ``dot`` becomes ``matmul`` on ``[batch, M, K] x [batch, K, N]`` views (rank padded to 3); a
  ``convolution`` with ``convolution_kind=fprop`` becomes ``conv_fprop`` on NCHW views from ``dim_labels``; the
  pointwise prologue/epilogue ops XLA converts (abs, add, ceil, compare, convert, cos, divide, exp, floor, log,
  maximum, minimum, multiply, negate, power, rsqrt, select, sin, sqrt, subtract, tan, tanh; clamp as min/max) become
  pointwise nodes; broadcasts of parameters or scalar constants are expressed with size-1 dimensions. Anything else
  raises :class:`CudnnConversionError` with the reason (those fusions run on another backend).
* configs are the graph's execution plans (``create_execution_plans([heur_mode.A, heur_mode.FALLBACK])``, at most
  ``xla_gpu_cudnn_gemm_max_plans``), each with its workspace bytes; they need a GPU. ``can_produce_wrong_results()``
  is true. Without a GPU the backend says once why and offers no configs.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from fusegen.codegen_backend import CodegenBackend, CompilationFailed, Config, Executable
from fusegen.hlo.ir import Computation, Instruction
from fusegen.hlo.shape_util import physical_strides
from fusegen.plugin_manager import hookimpl

log = logging.getLogger("fusegen.cudnn")

CUDNN_KIND = "__cudnn$fusion"


class CudnnConversionError(Exception):
    """The fusion cannot be expressed as a cuDNN graph; the message says which instruction and why."""


_DTYPES = {"f32": "FLOAT", "f16": "HALF", "bf16": "BFLOAT16", "s8": "INT8", "s32": "INT32", "f64": "DOUBLE",
           "f8e4m3fn": "FP8_E4M3", "f8e5m2": "FP8_E5M2", "pred": "BOOLEAN", "s4": "INT4", "u8": "UINT8",
           "s64": "INT64", "f8e8m0fnu": "FP8_E8M0"}

_UNARY = {"abs": "abs", "ceil": "ceil", "cosine": "cos", "exponential": "exp", "floor": "floor", "log": "log",
          "negate": "neg", "rsqrt": "rsqrt", "sine": "sin", "sqrt": "sqrt", "tan": "tan", "tanh": "tanh"}
_BINARY = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "maximum": "max", "minimum": "min",
           "power": "pow"}
_CMP = {"EQ": "cmp_eq", "NE": "cmp_neq", "GT": "cmp_gt", "GE": "cmp_ge", "LT": "cmp_lt", "LE": "cmp_le"}


@functools.lru_cache(maxsize=1)
def frontend_missing() -> str | None:
    """``None`` when ``import cudnn`` (nvidia-cudnn-frontend) works, else why not."""
    try:
        import cudnn  # noqa: F401
    except Exception as e:
        return f"cuDNN frontend unavailable: {type(e).__name__}: {e} (pip install nvidia-cudnn-frontend==1.32.0)"
    return None


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """``None`` when cuDNN plans can be made here (a GPU and the cuDNN library), else the reason."""
    why = frontend_missing()
    if why:
        return why
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "cuDNN unavailable: libcuda.so.1 not found"
    try:
        import cudnn

        cudnn.backend_version()
    except Exception as e:
        return f"cuDNN unavailable: {type(e).__name__}: {e}"
    return None


def _dt(et: str):
    import cudnn

    name = _DTYPES.get(et)
    if name is None or not hasattr(cudnn.data_type, name):
        raise CudnnConversionError(f"element type {et} has no cuDNN data type")
    return getattr(cudnn.data_type, name)


def _row_major_strides(dims) -> list[int]:
    st = [0] * len(dims)
    s = 1
    for d in reversed(range(len(dims))):
        st[d] = s
        s *= dims[d]
    return st


class _Builder:
    """Walks one fused computation and emits its cuDNN graph."""

    def __init__(self, comp: Computation, fusion_name: str):
        import cudnn

        self.cudnn = cudnn
        self.comp = comp
        self.name = fusion_name
        self.g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT,
                               compute_data_type=cudnn.data_type.FLOAT)
        self.cache: dict[tuple, Any] = {}
        self.rank = 3
        self.uid = 0

    # -- leaf views --------------------------------------------------------------------------------------
    def view(self, inst: Instruction) -> tuple[Instruction, list[int]] | None:
        """(parameter, element strides of ``inst``'s logical dims in that parameter's buffer), if ``inst`` is a
        data-movement-free view of a parameter."""
        op = inst.opcode
        if op == "parameter":
            return inst, physical_strides(inst.shape)
        if op in ("bitcast", "copy", "transpose", "reshape") and inst.operands:
            base = self.view(inst.operands[0])
            if base is None:
                return None
            p, st = base
            src = inst.operands[0]
            if op == "copy":
                return p, st
            if op == "transpose":
                perm = [int(x) for x in inst.attrs.get("dimensions") or ()]
                return p, [st[q] for q in perm]
            if op == "bitcast":
                if st != physical_strides(src.shape):
                    return None
                return p, physical_strides(inst.shape)
            if st != _row_major_strides(src.shape.dimensions):
                return None
            return p, _row_major_strides(inst.shape.dimensions)
        return None

    def _pad(self, dims: list[int], strides: list[int]) -> tuple[list[int], list[int]]:
        while len(dims) < self.rank:
            dims = [1] + dims
            strides = [strides[0] * (dims[1] if len(dims) > 1 else 1) if strides else 1] + strides
        return dims, strides

    def leaf(self, inst: Instruction, perm: tuple[int, ...], merge: tuple[tuple[int, ...], ...] | None = None):
        v = self.view(inst)
        if v is None:
            return None
        p, st = v
        groups = merge or tuple((d,) for d in perm)
        dims, strides = [], []
        for grp in groups:
            size = 1
            for d in grp:
                size *= inst.shape.dimensions[d]
            # a merged group must be contiguous: each dim's stride = next dim's stride * its size
            for a, b in zip(grp, grp[1:]):
                if inst.shape.dimensions[b] != 1 and st[a] != st[b] * inst.shape.dimensions[b]:
                    raise CudnnConversionError(f"%{inst.name}: dimensions {grp} are not contiguous in memory")
            dims.append(size)
            strides.append(st[grp[-1]] if grp else 1)
        dims, strides = self._pad(dims, strides)
        key = ("leaf", id(p), tuple(dims), tuple(strides))
        if key not in self.cache:
            self.uid += 1
            self.cache[key] = self.g.tensor(name=f"{p.name}_{self.uid}", dim=dims, stride=strides,
                                            data_type=_dt(p.shape.element_type))
        return self.cache[key]

    # -- values in a dimension order -------------------------------------------------------------------------
    def value(self, inst: Instruction, perm: tuple[int, ...], merge=None):
        key = (id(inst), perm, merge)
        if key in self.cache:
            return self.cache[key]
        t = self._value(inst, perm, merge)
        self.cache[key] = t
        return t

    def _value(self, inst: Instruction, perm: tuple[int, ...], merge):
        g = self.g
        op = inst.opcode
        lf = self.leaf(inst, perm, merge)
        if lf is not None:
            return lf
        if op == "constant":
            if inst.shape.numel != 1:
                raise CudnnConversionError(f"%{inst.name}: non-scalar constants are not supported")
            from fusegen.codegen.elemental import parse_constant

            v = parse_constant(inst).reshape(-1)[0]
            return g.tensor_scalar(v.item(), _dt(inst.shape.element_type), name=inst.name)
        if op == "broadcast":
            src = inst.operands[0]
            bdims = [int(x) for x in inst.attrs.get("dimensions") or ()]
            if src.shape.numel == 1:
                return self.value(src, (), None)
            v = self.view(src)
            if v is None:
                raise CudnnConversionError(f"%{inst.name}: broadcast of a computed value is not supported")
            p, st = v
            full = [0] * inst.shape.rank
            dims_full = [1] * inst.shape.rank
            for k, d in enumerate(bdims):
                full[d] = st[k]
                dims_full[d] = src.shape.dimensions[k]
            groups = merge or tuple((d,) for d in perm)
            dims = [int(_prod([dims_full[d] for d in grp])) for grp in groups]
            strides = [full[grp[-1]] if grp else 0 for grp in groups]
            dims, strides = self._pad(dims, strides)
            self.uid += 1
            return g.tensor(name=f"{p.name}_b{self.uid}", dim=dims, stride=[s if d > 1 else 1 for s, d in zip(strides, dims)],
                            data_type=_dt(p.shape.element_type))
        if op == "convert" or op == "copy":
            x = self.value(inst.operands[0], perm, merge)
            out = g.identity(x, name=f"{inst.name}")
            out.set_data_type(_dt(inst.shape.element_type))
            return out
        if op in _UNARY:
            return getattr(g, _UNARY[op])(self.value(inst.operands[0], perm, merge), name=inst.name)
        if op in _BINARY:
            a, b = (self.value(o, perm, merge) for o in inst.operands)
            return getattr(g, _BINARY[op])(a, b, name=inst.name)
        if op == "compare":
            d = str(inst.attrs.get("direction", "EQ")).upper()
            a, b = (self.value(o, perm, merge) for o in inst.operands)
            out = getattr(g, _CMP[d])(a, b, name=inst.name)
            out.set_data_type(self.cudnn.data_type.BOOLEAN)
            return out
        if op == "select":
            m, a, b = (self.value(o, perm, merge) for o in inst.operands)
            return g.binary_select(a, b, m, name=inst.name)
        if op == "clamp":
            lo, x, hi = (self.value(o, perm, merge) for o in inst.operands)
            return g.max(g.min(x, hi, name=inst.name + "_min"), lo, name=inst.name)
        if op == "dot":
            return self._dot(inst, perm)
        if op == "convolution":
            return self._conv(inst, perm)
        raise CudnnConversionError(f"%{inst.name}: opcode {op!r} has no cuDNN graph conversion")

    def _dot(self, dot: Instruction, perm: tuple[int, ...]):
        n = dot.shape.rank
        if perm != tuple(range(n)):
            raise CudnnConversionError(f"%{dot.name}: the dot result is used in a transposed order")
        lb = tuple(int(x) for x in dot.attrs.get("lhs_batch_dims") or ())
        rb = tuple(int(x) for x in dot.attrs.get("rhs_batch_dims") or ())
        lc = tuple(int(x) for x in dot.attrs.get("lhs_contracting_dims") or ())
        rc = tuple(int(x) for x in dot.attrs.get("rhs_contracting_dims") or ())
        if dot.attrs.get("algorithm") and str(dot.attrs.get("algorithm")).upper() not in ("ALG_UNSET", "UNSET"):
            raise CudnnConversionError(f"%{dot.name}: dot algorithm {dot.attrs['algorithm']} is not supported by cuDNN")
        lhs, rhs = dot.operands
        lnc = tuple(d for d in range(lhs.shape.rank) if d not in lb + lc)
        rnc = tuple(d for d in range(rhs.shape.rank) if d not in rb + rc)
        if len(lb) > 1:
            raise CudnnConversionError(f"%{dot.name}: more than one batch dimension")
        a_m = ((lb,) if lb else ()) + (lnc, lc)
        b_m = ((rb,) if rb else ()) + (rc, rnc)
        a = self.value(lhs, lb + lnc + lc, a_m)
        b = self.value(rhs, rb + rc + rnc, b_m)
        out = self.g.matmul(a, b, compute_data_type=self.cudnn.data_type.FLOAT if dot.shape.element_type != "s32"
                            else self.cudnn.data_type.INT32, name=dot.name)
        if len(lnc) > 1 or len(rnc) > 1 or len(lb) + 2 != n:
            raise CudnnConversionError(f"%{dot.name}: split non-contracting dimensions in the output")
        return out

    def _conv(self, conv: Instruction, perm: tuple[int, ...]):
        kind = str(conv.attrs.get("convolution_kind", "fprop"))
        if kind != "fprop":
            raise CudnnConversionError(f"%{conv.name}: convolution_kind={kind} (only fprop graphs are built)")
        labels = str(conv.attrs.get("dim_labels", ""))
        try:
            lhs_l, rest = labels.split("_")
            rhs_l, out_l = rest.split("->")
        except ValueError:
            raise CudnnConversionError(f"%{conv.name}: cannot read dim_labels={labels!r}") from None
        nsp = len(lhs_l) - 2

        def order(lab: str, a: str, b: str) -> tuple[int, ...]:
            return (lab.index(a), lab.index(b)) + tuple(lab.index(str(k)) for k in range(nsp))

        self.rank = 2 + nsp
        x = self.value(conv.operands[0], order(lhs_l, "b", "f"))
        w = self.value(conv.operands[1], order(rhs_l, "o", "i"))
        win = conv.attrs.get("window") or {}
        pad = [int(p[0]) for p in win.get("pad", [(0, 0)] * nsp)]
        stride = [int(s) for s in win.get("stride", [1] * nsp)]
        dil = [int(s) for s in win.get("rhs_dilate", [1] * nsp)]
        out = self.g.conv_fprop(x, w, padding=pad, stride=stride, dilation=dil, name=conv.name)
        if perm != order(out_l, "b", "f"):
            raise CudnnConversionError(f"%{conv.name}: convolution output used in another dimension order")
        return out

    def build(self) -> Any:
        root = self.comp.root
        if root.shape.is_tuple:
            raise CudnnConversionError(f"%{root.name}: multi-output cuDNN fusions are not supported")
        heroes = [i for i in self.comp.instructions if i.opcode in ("dot", "convolution", "scaled-dot")]
        if not heroes:
            raise CudnnConversionError(f"fusion {self.name}: no dot or convolution hero")
        hero = heroes[0]
        if hero.opcode == "scaled-dot":
            raise CudnnConversionError(f"%{hero.name}: block-scaled dots need cuDNN's block_scale_dequantize "
                                       "lowering, not built here")
        if hero.opcode == "convolution":
            labels = str(hero.attrs.get("dim_labels", ""))
            out_l = labels.split("->")[-1] if "->" in labels else ""
            nsp = max(0, len(out_l) - 2)
            perm = (out_l.index("b"), out_l.index("f")) + tuple(out_l.index(str(k)) for k in range(nsp)) \
                if out_l else tuple(range(root.shape.rank))
        else:
            perm = tuple(range(root.shape.rank))
            if root.shape.rank < 3:
                self.rank = 3
        out_inst = root
        strides_src = root
        # a trailing copy/bitcast of the result only changes the output strides
        while out_inst.opcode in ("copy", "bitcast") and out_inst.operands and \
                out_inst.operands[0].shape.dimensions == out_inst.shape.dimensions and out_inst.opcode == "copy":
            out_inst = out_inst.operands[0]
        t = self.value(out_inst, perm)
        st = physical_strides(strides_src.shape)
        dims = [strides_src.shape.dimensions[d] for d in perm]
        strides = [st[d] for d in perm]
        dims, strides = self._pad(dims, strides)
        t.set_output(True).set_data_type(_dt(root.shape.element_type))
        try:
            t.set_dim(dims)
            t.set_stride(strides)
        except Exception:
            pass
        return self.g


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= int(x)
    return n


def build_graph(fusion: Instruction) -> Any:
    """Build the cuDNN graph of a ``__cudnn$fusion`` fusion (no GPU needed).

    Returns:
        the ``cudnn.pygraph``.

    Raises:
        CudnnConversionError: the fusion has something cuDNN graphs cannot express here (the reason names it),
            or nvidia-cudnn-frontend is not installed.
    """
    why = frontend_missing()
    if why:
        raise CudnnConversionError(why)
    if fusion.opcode != "fusion":
        raise CudnnConversionError(f"%{fusion.name} is not a fusion")
    try:
        return _Builder(fusion.fused_computation, fusion.name).build()
    except CudnnConversionError:
        raise
    except Exception as e:  # the frontend rejecting a node
        raise CudnnConversionError(f"fusion {fusion.name}: cuDNN frontend rejected the graph: "
                                   f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None


# ================================================================================================ backend
_SAID: set[str] = set()


def _say_once(msg: str) -> None:
    if msg not in _SAID:
        _SAID.add(msg)
        log.warning(msg)


class _CudnnExecutable(Executable):
    def __init__(self, graph: Any, plan: int):
        self.graph = graph
        self.plan = plan

    def run(self, inputs, outputs, scratch) -> None:  # pragma: no cover - needs a GPU
        raise NotImplementedError("cuDNN execution: variant pack binding of CuPy buffers is left to the GPU check")


class CudnnBackend(CodegenBackend):
    """XLA's ``CudnnBackend`` for ``__cudnn$fusion`` fusions: configs are execution plans (index + workspace)."""

    name = "cudnn"
    rank = 100  # XLA's order (factory_cuda.cc:85-100): cuDNN, Triton, cuBLASLt; level 0 takes the first
    version = "1"
    compiles_in_process = True

    def __init__(self, max_plans: int = 5):
        self.max_plans = int(max_plans)

    def can_produce_wrong_results(self) -> bool:
        return True

    @staticmethod
    def _is_cudnn(instr: Instruction) -> bool:
        return instr.opcode == "fusion" and instr.fusion_backend_kind == CUDNN_KIND

    def get_supported_configs(self, instr: Instruction) -> list[Config]:
        if not self._is_cudnn(instr):
            return []
        why = unavailable_reason()
        if why is not None:
            _say_once(why)
            return []
        import cudnn

        g = build_graph(instr)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        n = min(g.get_execution_plan_count(), self.max_plans)
        out = []
        for i in range(n):
            try:
                g.build_plan_at_index(i)
                ws = g.get_workspace_size_plan_at_index(i)
            except Exception:
                continue
            out.append(Config(self.name, {"plan_id": i, "workspace_bytes": int(ws)}))
        return out

    def get_default_config(self, instr: Instruction) -> Config | None:
        return Config(self.name, {"plan_id": 0, "workspace_bytes": 0}) if self._is_cudnn(instr) else None

    def scratch_bytes(self, config: Config) -> int:
        return int(config.values.get("workspace_bytes", 0))

    def compile(self, instr: Instruction, config: Config) -> Executable:
        why = unavailable_reason()
        if why is not None:
            raise CompilationFailed(why)
        try:
            g = build_graph(instr)
        except CudnnConversionError as e:
            raise CompilationFailed(str(e)) from None
        return _CudnnExecutable(g, int(config.values.get("plan_id", 0)))

    def validate_config(self, instr: Instruction, config: Config) -> None:
        """Value ranges, then the default check (a damaged cache entry must not size a workspace)."""
        from fusegen.codegen_backend import ConfigError

        v = config.values.get("plan_id", 0)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 16:
            raise ConfigError(f"plan_id={v!r} is not an integer in 0..65535")
        super().validate_config(instr, config)

    def apply_config(self, instr: Instruction, config: Config) -> None:
        """Write ``cudnn_fusion_config.plan_id`` (XLA ``CudnnBackend::ApplyConfig``)."""
        bc = dict(instr.backend_config)
        fbc = dict(bc.get("fusion_backend_config") or {})
        fbc["kind"] = CUDNN_KIND
        fbc["cudnn_fusion_config"] = {"plan_id": str(int(config.values.get("plan_id", 0)))}
        bc["fusion_backend_config"] = fbc
        instr.attrs["backend_config"] = bc


@hookimpl
def fusegen_codegen_backends():
    return [CudnnBackend()]
