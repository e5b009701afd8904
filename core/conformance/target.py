"""The plugin under test: what it registers and what it declares it can do (its capabilities).

Capabilities come from, first that exists: the plugin's ``fusegen_conformance_capabilities()`` hook, a
module attribute ``FUSEGEN_CONFORMANCE`` (a dict), :data:`BUILTIN_CAPABILITIES` (declared here on behalf
of fusegen's own plugins), or inference from what the plugin registers (kinds of its emitter factories,
``f32``, both devices).
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import attrs

from fusegen.config.options import PluginsOptions
from fusegen.plugin_manager import PluginError, PluginManager

#: Devices a plugin may declare: outputs checked in Triton's interpreter; kernels compiled for Hopper
#: (no GPU needed); a real CUDA GPU (library backends such as cuBLASLt and cuDNN).
KNOWN_DEVICES = ("cpu-interpreter", "sm_90", "cuda-gpu")
DEFAULT_DEVICES = ("cpu-interpreter", "sm_90")
DEFAULT_DTYPES = ("f32",)
CAPABILITY_KEYS = ("kinds", "dtypes", "devices", "generators", "tolerances", "corpus")

#: Capabilities of fusegen's built-in plugins (they predate the hook; a third-party plugin declares its own).
BUILTIN_CAPABILITIES: dict[str, dict[str, Any]] = {
    "loop": {"kinds": ["kLoop"], "dtypes": ["f32", "f16", "bf16", "s32", "pred"],
             "devices": ["cpu-interpreter", "sm_90"], "generators": {"kLoop": "elementwise"}},
    "memcpy": {"kinds": ["kLoop"], "dtypes": ["f32", "s32", "bf16"], "devices": ["cpu-interpreter", "sm_90"],
               "generators": {"kLoop": "copy"}},
    "in_place_dus": {"kinds": ["kLoop"], "dtypes": ["f32", "s32"], "devices": ["cpu-interpreter", "sm_90"],
                     "generators": {"kLoop": "dynamic-update-slice"}},
    "reduction": {"kinds": ["kReduction"], "dtypes": ["f32"], "devices": ["cpu-interpreter", "sm_90"],
                  "tolerances": {"*": {"rtol": 1e-4, "atol": 1e-4}}},
    "transpose": {"kinds": ["kTranspose"], "dtypes": ["f32", "f16", "s32"], "devices": ["cpu-interpreter", "sm_90"]},
    "concatenate": {"kinds": ["kConcatenate"], "dtypes": ["f32", "s32"], "devices": ["cpu-interpreter", "sm_90"]},
    "scatter": {"kinds": ["kScatter"], "dtypes": ["f32"], "devices": ["cpu-interpreter", "sm_90"]},
    "sort": {"kinds": ["kSort"], "dtypes": ["f32", "s32"], "devices": ["cpu-interpreter", "sm_90"]},
    "host": {"devices": ["cpu-interpreter"], "corpus": ["xla/cases/hfa__*.hlo", "jax/reduce.pre.hlo"]},
    "triton": {"kinds": ["kTriton"], "dtypes": ["f32"], "devices": ["cpu-interpreter", "sm_90"],
               "corpus": ["xla/cases/lit_triton__dot__*.hlo"], "tolerances": {"*": {"rtol": 1e-2, "atol": 1e-2}}},
    "cublaslt": {"devices": ["cuda-gpu"], "corpus": ["jax/gpu_mlp_bf16.notritongemm.h100_opt.hlo"]},
    "cudnn": {"devices": ["cuda-gpu"], "corpus": ["xla/cases/cudnn__*.hlo"]},
    "custom_fusion": {"kinds": ["kCustomFusion"], "dtypes": ["f32"], "devices": ["cpu-interpreter", "sm_90"],
                      "corpus": ["xla/cases/custom__*.hlo"]},
}


class CapabilityError(ValueError):
    """A plugin declared malformed capabilities (the message names the plugin and the key)."""


@attrs.frozen
class Capabilities:
    """What the plugin under test declares.

    Attributes:
        kinds: fusion kinds its emitter factories / matchers serve.
        dtypes: HLO element types generated fusions may use.
        devices: ``cpu-interpreter``, ``sm_90`` (compile target), or ``cuda-gpu`` (needs a real GPU).
        generators: kind -> generator name (:mod:`fusegen.conformance.generators`).
        tolerances: test-id pattern -> ``{"rtol", "atol"}``.
        corpus: glob patterns (relative to the corpus root) of files backend checks use.
        source: where they came from (``hook``, ``module attribute``, ``built-in table``, ``inferred``).
    """

    kinds: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = DEFAULT_DTYPES
    devices: tuple[str, ...] = DEFAULT_DEVICES
    generators: dict[str, str] = attrs.field(factory=dict)
    tolerances: dict[str, dict[str, float]] = attrs.field(factory=dict)
    corpus: tuple[str, ...] = ()
    source: str = "inferred"

    def to_json(self) -> dict:
        return {"kinds": list(self.kinds), "dtypes": list(self.dtypes), "devices": list(self.devices),
                "generators": dict(self.generators), "tolerances": dict(self.tolerances),
                "corpus": list(self.corpus), "source": self.source}


def parse_capabilities(plugin: str, raw: Any, source: str) -> Capabilities:
    """Validate a declared capabilities dict.

    Raises:
        CapabilityError: not a dict, an unknown key, or a value of the wrong type.
    """
    if not isinstance(raw, dict):
        raise CapabilityError(f"plugin {plugin!r}: capabilities ({source}) must be a dict, got {type(raw).__name__}")
    for k in raw:
        if k not in CAPABILITY_KEYS:
            raise CapabilityError(f"plugin {plugin!r}: unknown capability key {k!r} ({source}); "
                                  f"known: {', '.join(CAPABILITY_KEYS)}")

    def strs(key: str, default: tuple) -> tuple[str, ...]:
        v = raw.get(key, default)
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
            raise CapabilityError(f"plugin {plugin!r}: capability {key!r} must be a list of strings, got {v!r}")
        return tuple(v)

    for d in raw.get("devices", ()) or ():
        if d not in KNOWN_DEVICES:
            raise CapabilityError(f"plugin {plugin!r}: unknown device {d!r}; known: {', '.join(KNOWN_DEVICES)}")
    gens = raw.get("generators", {})
    if not isinstance(gens, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in gens.items()):
        raise CapabilityError(f"plugin {plugin!r}: capability 'generators' must map kind -> generator name")
    tols = raw.get("tolerances", {})
    if not isinstance(tols, dict):
        raise CapabilityError(f"plugin {plugin!r}: capability 'tolerances' must map test-id pattern -> {{rtol, atol}}")
    for pat, t in tols.items():
        if not isinstance(t, dict) or not set(t) <= {"rtol", "atol"} or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in t.values()):
            raise CapabilityError(f"plugin {plugin!r}: tolerance for {pat!r} must be {{'rtol': float, 'atol': float}}, "
                                  f"got {t!r}")
    return Capabilities(kinds=strs("kinds", ()), dtypes=strs("dtypes", DEFAULT_DTYPES),
                        devices=strs("devices", DEFAULT_DEVICES), generators=dict(gens),
                        tolerances={p: {k: float(v) for k, v in t.items()} for p, t in tols.items()},
                        corpus=strs("corpus", ()), source=source)


class PluginNotFound(LookupError):
    """``--fusegen-plugin NAME`` names no installed plugin."""


def _distributions_for(name: str) -> Any:
    """``fusegen`` and the distribution(s) providing entry point ``name``; None (the environment decides)
    when ``FUSEGEN_AUTOLOAD_DISTRIBUTIONS`` is set."""
    import importlib.metadata as md
    import os

    from fusegen.plugin_manager import ENTRY_POINT_GROUPS
    from fusegen.config.names import normalize_name

    if os.environ.get("FUSEGEN_AUTOLOAD_DISTRIBUTIONS", "").strip():
        return None
    return {"fusegen"} | {ep.dist.name for g in ENTRY_POINT_GROUPS for ep in md.entry_points(group=g)
                          if ep.dist is not None and normalize_name(ep.name) == normalize_name(name)}


class Target:
    """The plugin under test, inside a plugin manager holding fusegen's own plugins and the plugin's.

    Args:
        name: the plugin's entry-point name (as ``fusegen plugins`` lists it; ``-``/``_``/case as pip compares).
        pm: a plugin manager (default: a fresh one loading fusegen's own plugins and the distribution of the
            plugin under test, even when autoload is off; ``FUSEGEN_AUTOLOAD_DISTRIBUTIONS`` names others to load).

    Raises:
        PluginNotFound: no such plugin (the message lists the installed ones).
        PluginError: the plugin fails to load or its hooks fail.
        CapabilityError: its declared capabilities are malformed.
    """

    def __init__(self, name: str, pm: PluginManager | None = None):
        # the plugin under test is loaded even with FUSEGEN_DISABLE_PLUGIN_AUTOLOAD=1; beside fusegen's own
        # only its distribution's (another installed plugin failing is not this plugin's failure)
        self.pm = pm if pm is not None else PluginManager(config=PluginsOptions(enable=[name]),
                                                          distributions=_distributions_for(name))
        name = self.pm.lookup(name) or name  # input-slices == input_slices, as pip compares names
        from fusegen.config.names import normalize_name

        broken = next((b for b in self.pm.broken if normalize_name(b) == normalize_name(name)), None)
        if broken is not None and name not in self.pm.infos:  # quarantined while loading: say why
            raise PluginError(broken, f"was quarantined when it loaded: {self.pm.broken[broken].reason}")
        if name not in self.pm.infos:
            from fusegen.config.xla_flags import did_you_mean

            installed = sorted(n for n, i in self.pm.infos.items() if i.group != "builtin")
            raise PluginNotFound(f"fusegen plugin {name!r} is not installed{did_you_mean(name, installed)}; "
                                 f"installed: {', '.join(installed) or '(none)'}")
        self.name = name
        self.info = self.pm.infos[name]
        self.module = self.pm.pm.get_plugin(name)
        self.matchers = [m for m in self.pm.kind_matchers() if m.plugin == name]
        self.factories = [f for f in self.pm.emitter_factories() if f.plugin == name]
        self.execution_backends = [b for b in self.pm.execution_backends() if b.plugin == name]
        self.codegen_backends = self._codegen_backends()
        self.passes = [p for p in self.pm.passes().values() if p.plugin == name]
        self.capabilities = self._capabilities()
        self.generators = self._generators()

    def _codegen_backends(self) -> list:
        caller = getattr(self.pm.pm.hook, "fusegen_codegen_backends", None)
        out: list = []
        if caller is None:
            return out
        for impl in caller.get_hookimpls():
            if impl.plugin_name != self.name:
                continue
            try:
                out.extend(impl.function() or [])
            except Exception as e:
                raise PluginError(self.name, "raised in fusegen_codegen_backends", e) from e
        return out

    def _capabilities(self) -> Capabilities:
        caller = getattr(self.pm.pm.hook, "fusegen_conformance_capabilities", None)
        for impl in (caller.get_hookimpls() if caller is not None else []):
            if impl.plugin_name == self.name:
                try:
                    raw = impl.function()
                except Exception as e:
                    raise PluginError(self.name, "raised in fusegen_conformance_capabilities", e) from e
                return parse_capabilities(self.name, raw, "hook fusegen_conformance_capabilities")
        attr = getattr(self.module, "FUSEGEN_CONFORMANCE", None)
        if attr is not None:
            return parse_capabilities(self.name, attr, "module attribute FUSEGEN_CONFORMANCE")
        if self.info.distribution == "fusegen" and self.name in BUILTIN_CAPABILITIES:
            return parse_capabilities(self.name, BUILTIN_CAPABILITIES[self.name], "built-in table")
        kinds = tuple(dict.fromkeys(f.kind for f in self.factories))
        return Capabilities(kinds=kinds, source="inferred")

    def _generators(self) -> dict[str, Any]:
        """The plugin's ``fusegen_conformance_generators()`` answer, validated (``{}`` without the hook)."""
        caller = getattr(self.pm.pm.hook, "fusegen_conformance_generators", None)
        for impl in (caller.get_hookimpls() if caller is not None else []):
            if impl.plugin_name != self.name:
                continue
            try:
                raw = impl.function()
            except Exception as e:
                raise PluginError(self.name, "raised in fusegen_conformance_generators", e) from e
            if not isinstance(raw, dict) or not all(isinstance(k, str) and k and callable(v) for k, v in raw.items()):
                raise CapabilityError(f"plugin {self.name!r}: fusegen_conformance_generators() must return a dict "
                                      f"of generator name -> make(dtypes), got {raw!r}")
            return dict(raw)
        return {}

    def generator_for(self, kind: str) -> tuple[str | None, Any]:
        """``(name, make)`` of the generator for ``kind``: the ``generators`` capability's name, else the
        plugin's own generator named ``kind``, else the suite's default for ``kind``; ``make`` is the plugin's
        generator of that name, else the suite's, else None (no such generator)."""
        from fusegen.conformance.generators import DEFAULT_FOR_KIND, GENERATORS

        name = self.capabilities.generators.get(kind) or (kind if kind in self.generators else None) \
            or DEFAULT_FOR_KIND.get(kind)
        if name is None:
            return None, None
        return name, self.generators.get(name) or GENERATORS.get(name)

    @property
    def is_emitter_plugin(self) -> bool:
        return bool(self.factories or self.matchers)

    @property
    def is_backend_plugin(self) -> bool:
        return bool(self.execution_backends or self.codegen_backends)

    @property
    def version(self) -> str:
        v = self.info.version
        if v in ("?", ""):
            v = str(getattr(self.module, "__version__", "?"))
        return v

    def tolerance_for(self, test_id: str, overrides: dict[str, dict[str, float]] | None = None) -> dict[str, float] | None:
        """The ``{"rtol", "atol"}`` override for a test id: command line first, then the capability; None if none."""
        for table in (overrides or {}, self.capabilities.tolerances):
            for pat, tol in table.items():
                if fnmatch.fnmatchcase(test_id, pat):
                    return tol
        return None

    def describe(self) -> dict:
        """JSON-serialisable description for the report."""
        d = {"name": self.name, "version": self.version, "distribution": self.info.distribution,
             "module": self.info.module, "group": self.info.group, "hooks": list(self.info.hooks),
             "matchers": [f"{m.name}@{m.rank}" for m in self.matchers],
             "emitter_factories": [f"{f.name}:{f.kind}@{f.rank}" for f in self.factories],
             "execution_backends": [f"{b.name}@{b.rank}" for b in self.execution_backends],
             "codegen_backends": [getattr(b, "name", type(b).__name__) for b in self.codegen_backends],
             "passes": [f"{p.name} (error_budget={p.error_budget:g})" for p in self.passes],
             "capabilities": self.capabilities.to_json()}
        json.dumps(d)
        return d


def available_devices() -> tuple[str, ...]:
    """Devices this machine offers the suite: always the interpreter and the sm_90 compile target; ``cuda-gpu``
    when a CUDA driver reports a device."""
    out = ["cpu-interpreter", "sm_90"]
    if cuda_device_count() > 0:
        out.append("cuda-gpu")
    return tuple(out)


def cuda_device_count() -> int:
    """CUDA devices the driver reports (0 without ``libcuda.so.1``)."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    n = ctypes.c_int(0)
    try:
        if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(n)) != 0:
            return 0
    except AttributeError:
        return 0
    return int(n.value)
