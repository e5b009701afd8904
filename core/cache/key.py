"""Autotune cache keys: device model string, canonical HLO, version, options fingerprint.

Mirrors XLA's ``AutotuneCacheKey`` (``xla/service/gpu/autotuning/autotune_cache_key.{h,cc}``):
``model_str`` from ``DeviceDescriptionToCacheKey`` (55-98), ``hlo_canonical`` (34-53: for a fusion the
fused computation printed canonically with operand shapes and no ids, for any other instruction the
instruction with its sorted backend config), ``kCurrentVersion = 50``. Beyond XLA the key also holds a
fingerprint of the autotuner options that change results, so two runs with different options never
recover each other's results, and a fusion's backend kind (``__triton_gemm``...), so a config tuned
for one backend family is never applied to another.

The canonical text renames every instruction ``tmp_<n>`` and every called computation ``comp_<n>`` in
order of appearance and drops metadata, ids and control dependencies, so identically shaped layers of
a model share one entry.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.hlo.ir import Computation, Instruction, Shape

#: ``AutotuneCacheKey::kCurrentVersion`` ("Triton integration 1.36").
CURRENT_VERSION = 50
#: Attributes never part of the canonical text.
_DROPPED = {"metadata", "control-predecessors", "sharding", "statistics", "origin", "parameter_number", "literal",
            "backend_config"}
#: Constants with at most this many elements keep their literal ("only essential constants").
_MAX_LITERAL_ELEMENTS = 8


class CacheKeyError(ValueError):
    """A key could not be formed (no model string for the device, malformed key JSON)."""


# --------------------------------------------------------------------------------------------
# Device model string
# --------------------------------------------------------------------------------------------

def format_model_string(platform: str, version: str, cores: int, clock_ghz: float, bandwidth_bytes_per_s: float,
                        l2_bytes: int, dnn_version: str = "0.0.0") -> str:
    """XLA's ``DeviceDescriptionToCacheKey`` string.

    Example: ``format_model_string("CUDA", "8.0", 108, 1.41, 1555.2e9, 40 << 20)`` gives
    ``"CUDA: 8.0, Cores: 108, GPU clock: 1.41 GHz, Memory bandwidth: 1555 GB/s, L2 cache: 40 MB,
    DNN version: 0.0.0"`` (bandwidth rounded to GB/s, L2 in MiB, clock as ``%g``).
    """
    return (f"{platform}: {version}, Cores: {int(cores)}, GPU clock: {float(clock_ghz):g} GHz, "
            f"Memory bandwidth: {round(bandwidth_bytes_per_s / 1e9)} GB/s, "
            f"L2 cache: {round(l2_bytes / (1024 * 1024))} MB, DNN version: {dnn_version}")


#: oneAPI architecture name in a target-config spec -> the name XLA prints (the B580 die is BMG-G21).
from fusegen.device import ONEAPI_ARCH_NAMES  # noqa: E402  (re-exported: the cache key reads it here)


def model_string_from_target_config(text: str) -> str:
    """The model string of an XLA ``GpuTargetConfigProto`` text (``specs/*.txtpb``), DNN version 0.0.0.

    CUDA prints ``major.minor`` of ``cuda_compute_capability``, ROCm the ``gcn_arch_name`` before the
    first ``:``, SYCL ``oneAPI: <architecture>`` (see :data:`ONEAPI_ARCH_NAMES`).

    Raises:
        CacheKeyError: a field the string needs is missing.
    """
    # One reader of spec files: the device description's (it knows CUDA, ROCm and SYCL).
    from fusegen.device import from_target_config_text, model_string

    try:
        return model_string(from_target_config_text(text))
    except (ValueError, KeyError) as e:
        raise CacheKeyError(f"target config cannot be described: {e}") from None


def model_string_for(device: Any) -> str:
    """The model string of ``device``: a ``str`` as is, else ``fusegen.device.model_string(device)``.

    Raises:
        CacheKeyError: ``device`` is neither a string nor something ``fusegen.device`` can describe.
    """
    if isinstance(device, str):
        return device
    try:
        from fusegen.device import model_string
    except ImportError:
        model_string = None
    if model_string is not None:
        return model_string(device)
    ms = getattr(device, "model_string", None)
    if isinstance(ms, str):
        return ms
    raise CacheKeyError(f"cannot form an autotune cache model string for device {device!r}")


# --------------------------------------------------------------------------------------------
# Canonical HLO
# --------------------------------------------------------------------------------------------

def shape_text(shape: "Shape") -> str:
    """``f32[2,3]{1,0}``, tuples ``(f32[2]{0}, s32[])``; layouts always printed (they change kernels)."""
    if shape.is_tuple:
        return "(" + ", ".join(shape_text(s) for s in shape.tuple_shapes or ()) + ")"
    dims = ",".join(f"<={d}" if (i < len(shape.dynamic) and shape.dynamic[i]) else str(d)
                    for i, d in enumerate(shape.dimensions))
    out = f"{shape.element_type}[{dims}]"
    if shape.element_type != "token" and shape.rank:
        lay = shape.layout
        m2m = ",".join(str(d) for d in shape.minor_to_major())
        extra = ""
        if lay is not None:
            if lay.tiles:
                extra += "".join("T(" + ",".join("*" if t == -1 else str(t) for t in tile) + ")" for tile in lay.tiles)
            if lay.memory_space:
                extra += f"S({lay.memory_space})"
            for e in lay.extra:
                extra += str(e)
        out += "{" + m2m + (":" + extra if extra else "") + "}"
    return out


def _ints(v) -> str:
    return "{" + ",".join(str(int(x)) for x in v) + "}"


class _Canonicalizer:
    def __init__(self) -> None:
        self.comp_names: dict[int, str] = {}
        self.comp_texts: list[str] = []

    def comp(self, c: "Computation") -> str:
        if id(c) not in self.comp_names:
            name = f"comp_{len(self.comp_names)}"
            self.comp_names[id(c)] = name
            self.comp_texts.append(self.computation(c, name))
        return self.comp_names[id(c)]

    def value(self, key: str, v: Any) -> str:
        from fusegen.hlo.ir import Computation

        if isinstance(v, Computation):
            return "%" + self.comp(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return str(v)
        if isinstance(v, str):
            return json.dumps(v) if key == "custom_call_target" else v
        if isinstance(v, dict):
            if key == "window":
                parts = []
                for k, x in v.items():
                    if x and isinstance(x, (list, tuple)) and isinstance(x[0], (list, tuple)):
                        parts.append(f"{k}=" + "x".join("_".join(str(int(a)) for a in p) for p in x))
                    elif isinstance(x, (list, tuple)):
                        parts.append(f"{k}=" + "x".join(str(int(a)) for a in x))
                    else:
                        parts.append(f"{k}={x}")
                return "{" + " ".join(parts) + "}"
            return json.dumps(v, sort_keys=True, separators=(",", ":"))
        if isinstance(v, (list, tuple)):
            if v and all(isinstance(x, Computation) for x in v):
                return "{" + ", ".join("%" + self.comp(x) for x in v) + "}"
            if key == "padding":
                return "x".join("_".join(str(int(a)) for a in p) for p in v)
            if key == "slice":
                return "{" + ", ".join(f"[{a}:{b}:{c}]" if c != 1 else f"[{a}:{b}]" for a, b, c in v) + "}"
            if all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                return _ints(v)
            return json.dumps(v, sort_keys=True, default=str, separators=(",", ":"))
        return str(v)

    def instruction(self, inst: "Instruction", names: dict[int, str], root: bool, with_backend_config: bool) -> str:
        ops = ", ".join(f"{shape_text(o.shape)} {names.get(id(o), '?')}" for o in inst.operands)
        head = f"{'ROOT ' if root else ''}{names[id(inst)]} = {shape_text(inst.shape)} {inst.opcode}("
        if inst.opcode == "parameter":
            head += str(inst.attrs.get("parameter_number", 0))
        elif inst.opcode == "constant":
            lit = inst.attrs.get("literal")
            if lit is not None and not isinstance(lit, str):
                import numpy as np

                lit = json.dumps(np.asarray(lit).tolist())
            head += lit if (lit is not None and inst.shape.numel <= _MAX_LITERAL_ELEMENTS) else "{...}"
        else:
            head += ops
        head += ")"
        parts = []
        for k in sorted(inst.attrs):
            if k in _DROPPED:
                continue
            parts.append(f"{k}={self.value(k, inst.attrs[k])}")
        if with_backend_config and inst.attrs.get("backend_config") not in (None, "", {}):
            bc = inst.attrs["backend_config"]
            parts.append("backend_config=" + (json.dumps(bc, sort_keys=True, separators=(",", ":"))
                                              if isinstance(bc, dict) else json.dumps(str(bc))))
        return head + ("".join(", " + p for p in parts))

    def computation(self, comp: "Computation", name: str) -> str:
        names = {id(i): f"tmp_{k}" for k, i in enumerate(comp.instructions)}
        lines = [f"{name} {{"]
        for i in comp.instructions:
            lines.append("  " + self.instruction(i, names, i is comp.root, with_backend_config=False))
        lines.append("}")
        return "\n".join(lines)


def canonical_hlo(instr: "Instruction") -> str:
    """Canonical text of ``instr`` for the cache key (see the module docstring).

    A fusion: ``fusion kind=<kind> backend=<fusion backend kind>`` then every called computation
    (``comp_<n>``) and the fused computation (``fused_computation``), instructions ``tmp_<n>`` with
    operand shapes, no metadata, no backend configs inside. Anything else: the instruction with its
    operands ``tmp_0..`` and its backend config with sorted keys.
    """
    cz = _Canonicalizer()
    if instr.opcode == "fusion":
        body = cz.computation(instr.fused_computation, "fused_computation")
        head = f"fusion kind={instr.attrs.get('kind', '')} backend={instr.fusion_backend_kind or ''}"
        return "\n".join([head, *cz.comp_texts, body])
    names = {id(o): f"tmp_{k}" for k, o in enumerate(instr.operands)}
    names[id(instr)] = f"tmp_{len(instr.operands)}"
    text = cz.instruction(instr, names, True, with_backend_config=True)
    return "\n".join([*cz.comp_texts, text])


# --------------------------------------------------------------------------------------------
# The key
# --------------------------------------------------------------------------------------------

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@attrs.frozen
class CacheKey:
    """One cache key. ``digest`` (sha256 hex of :meth:`to_string`) names the cache file.

    Attributes:
        model: device model string (XLA format).
        hlo: canonical HLO text (:func:`canonical_hlo`).
        version: ``CURRENT_VERSION`` (50) unless testing.
        options_fingerprint: sha256 hex of the result-changing autotune options ("" = unspecified).
    """

    model: str
    hlo: str
    version: int = CURRENT_VERSION
    options_fingerprint: str = ""

    def to_string(self) -> str:
        """``<key model='...', hlo='...', version=50, options='...'>`` (XLA's ToString plus options)."""
        return (f"<key model='{self.model}', hlo='{self.hlo}', version={self.version}, "
                f"options='{self.options_fingerprint}'>")

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_string().encode()).hexdigest()

    def to_json(self) -> dict:
        return {"model": self.model, "hlo": self.hlo, "version": self.version,
                "options_fingerprint": self.options_fingerprint}

    @classmethod
    def from_json(cls, obj: Any) -> "CacheKey":
        """Raises CacheKeyError naming the bad field."""
        if not isinstance(obj, dict):
            raise CacheKeyError("key must be a JSON object")
        for f, t in (("model", str), ("hlo", str), ("version", int), ("options_fingerprint", str)):
            if not isinstance(obj.get(f), t) or isinstance(obj.get(f), bool):
                raise CacheKeyError(f"key field {f!r} must be {t.__name__}")
        return cls(obj["model"], obj["hlo"], obj["version"], obj["options_fingerprint"])


def make_key(instr: "Instruction", device: Any, options_fingerprint: str = "", version: int = CURRENT_VERSION) -> CacheKey:
    """The cache key of ``instr`` on ``device`` (a device description or a model string)."""
    return CacheKey(model_string_for(device), canonical_hlo(instr), version, options_fingerprint)


def is_digest(text: str) -> bool:
    return bool(_HEX64.match(text))
