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
import re
from typing import TYPE_CHECKING, Any

import attrs

from fusegen.hlo.canonical import canonical_hlo, shape_text  # noqa: F401  (shape_text: part of the key's text)

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.hlo.ir import Instruction

#: ``AutotuneCacheKey::kCurrentVersion`` ("Triton integration 1.36").
CURRENT_VERSION = 50

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
