"""Where a tuned figure came from: measured on a named device, estimated by a model, or timed on the CPU.

Every cache entry (format 2), tuning record and report row carries a :class:`Source`. XLA's autotuner only
ever stores measurements; fusegen can also tune without the target GPU, so it says which kind each figure is:

* ``measured``: CUDA-event time on ``device`` (the GPU's name) with profiler ``cuda-events``;
* ``estimated``: ``model`` (``fusegen.perf`` or ``backend:<name>`` for a backend's own estimate) at
  ``model_version``, for ``device`` (a description, not a measurement);
* ``cpu-interpreter``: wall time in Triton's interpreter or numpy on this CPU (``--measure-on-cpu``), which says
  nothing about the GPU;
* ``untimed``: one config only, or none could be timed (``note`` says why);
* ``unknown``: an entry of cache format 1, written before fusegen recorded this.

Anything but ``measured`` is a *hint* to a run on the GPU: it re-measures the instruction unless asked not to.
"""

from __future__ import annotations

from typing import Any

import attrs

KINDS = ("measured", "estimated", "cpu-interpreter", "untimed", "unknown")


class SourceError(ValueError):
    """A serialised source is malformed (the message names the field)."""


@attrs.frozen
class Source:
    """Where one figure came from (see the module docstring).

    Attributes:
        kind: one of :data:`KINDS`.
        device: the device measured on (``measured``) or estimated for (``estimated``), e.g. ``NVIDIA H200 141GB
            HBM3e``; ``cpu-interpreter``: the host.
        profiler: ``cuda-events`` or ``cpu-wall-time`` (timed kinds).
        model: ``fusegen.perf`` or ``backend:<name>`` (``estimated``).
        model_version: the model's version (``estimated``), e.g. ``fusegen.perf.MODEL_VERSION``.
        note: a sentence for ``untimed`` / ``unknown``.
    """

    kind: str = attrs.field(validator=attrs.validators.in_(KINDS))
    device: str = ""
    profiler: str = ""
    model: str = ""
    model_version: int | None = None
    note: str = ""

    @property
    def is_measurement(self) -> bool:
        """A GPU measurement (the only kind a GPU run keeps without re-measuring)."""
        return self.kind == "measured"

    @property
    def label(self) -> str:
        """One phrase for tables: ``measured on NVIDIA H200``, ``estimated by fusegen.perf v1``..."""
        if self.kind == "measured":
            return f"measured on {self.device or 'the GPU'}"
        if self.kind == "estimated":
            v = f" v{self.model_version}" if self.model_version is not None else ""
            return f"estimated by {self.model or 'a model'}{v}"
        if self.kind == "cpu-interpreter":
            return "CPU interpreter time (not a GPU figure)"
        if self.kind == "untimed":
            return f"not timed ({self.note})" if self.note else "not timed"
        return "unknown (cache format 1)"

    def to_json(self) -> dict:
        out: dict[str, Any] = {"kind": self.kind, "label": self.label}
        for k in ("device", "profiler", "model", "note"):
            if getattr(self, k):
                out[k] = getattr(self, k)
        if self.model_version is not None:
            out["model_version"] = self.model_version
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str = "source") -> "Source":
        """Inverse of :meth:`to_json` (``label`` is derived and ignored).

        Raises:
            SourceError: not an object, an unknown ``kind``, or a field of the wrong type (named).
        """
        if not isinstance(obj, dict):
            raise SourceError(f"{where} must be a JSON object, got {type(obj).__name__}")
        kind = obj.get("kind")
        if kind not in KINDS:
            raise SourceError(f"{where}.kind must be one of {', '.join(KINDS)}, got {kind!r}")
        kw: dict[str, Any] = {"kind": kind}
        for k in ("device", "profiler", "model", "note"):
            v = obj.get(k, "")
            if not isinstance(v, str):
                raise SourceError(f"{where}.{k} must be a string, got {type(v).__name__}")
            kw[k] = v
        mv = obj.get("model_version")
        if mv is not None and (not isinstance(mv, int) or isinstance(mv, bool)):
            raise SourceError(f"{where}.model_version must be an integer or null")
        kw["model_version"] = mv
        return cls(**kw)


#: What a format-1 entry's figure is taken to be.
UNKNOWN = Source("unknown", note="cache format 1 did not record where its figure came from")


def estimated(device: str, model: str = "fusegen.perf", version: int | None = None) -> Source:
    """An estimate by ``model`` (default ``fusegen.perf`` at its current version) for ``device``."""
    if version is None and model == "fusegen.perf":
        from fusegen.perf import MODEL_VERSION

        version = MODEL_VERSION
    return Source("estimated", device=device, model=model, model_version=version)


def measured(device: str, profiler: str = "cuda-events") -> Source:
    return Source("measured", device=device, profiler=profiler)


def cpu_interpreter(profiler: str = "cpu-wall-time") -> Source:
    import platform

    return Source("cpu-interpreter", device=platform.processor() or platform.machine() or "cpu", profiler=profiler)


def untimed(note: str) -> Source:
    return Source("untimed", note=note)
