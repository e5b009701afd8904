"""Loading plugins and collecting their registries (pluggy, entry points).

Built-in emitters and backends are found through the same entry-point groups a third-party plugin
uses (:data:`ENTRY_POINT_GROUPS`); the only plugins registered directly are core's own dispatch
questions (:mod:`fusegen.analysis.matchers`).

Environment:
    ``FUSEGEN_TRACE_PLUGINS=1``: print every hook call, its arguments and result to stderr.
    ``FUSEGEN_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry points (only ``FUSEGEN_LOAD_PLUGINS``).
    ``FUSEGEN_LOAD_PLUGINS=a,b``: with autoload off, the entry-point names to load.
    ``FUSEGEN_AUTOLOAD_DISTRIBUTIONS=fusegen,x``: autoload only entry points these distributions install
    (names compared as pip does); entry points named by ``FUSEGEN_LOAD_PLUGINS`` or ``enable`` still load.
    fusegen's own tests set ``fusegen`` so that whatever else is installed cannot change their results.

Configuration: ``PluginManager(config=cfg)`` (a :class:`fusegen.config.loader.ResolvedConfig`, or its
``.plugins``) applies ``[plugins] enable/disable``: a disabled *plugin* name is not registered (or is
unregistered) and everything it registers disappears; a disabled matcher, emitter-factory or execution
backend name drops just that entry from the registries. ``enable`` names entry points to load even when
autoload is off. Without ``config`` nothing changes (the default constructor behaviour). Names are compared
normalized as pip compares distributions (:func:`fusegen.registry.normalize_name`: ``input-slices`` is
``input_slices``).
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import os
import sys
from typing import Any, Callable

import attrs
import pluggy

from fusegen import hookspecs
from fusegen.registry import EmitterFactory, ExecutionBackend, HloPass, KindMatcher, normalize_name

hookimpl = pluggy.HookimplMarker("fusegen")

ENTRY_POINT_GROUPS = ("fusegen.emitters", "fusegen.backends", "fusegen.plugins")


class PluginError(Exception):
    """A plugin failed (raised, or returned something malformed). The message names the plugin."""

    def __init__(self, plugin: str, what: str, exc: BaseException | None = None):
        self.plugin = plugin
        detail = f": {type(exc).__name__}: {exc}" if exc is not None else ""
        super().__init__(f"plugin {plugin!r} {what}{detail}")


@attrs.define
class PluginInfo:
    """What ``fusegen plugins`` reports for one plugin."""

    name: str
    module: str
    group: str
    distribution: str
    version: str
    hooks: list[str]


def _trace(msg: str) -> None:
    print(f"[fusegen-trace] {msg}", file=sys.stderr)


def tracing() -> bool:
    return os.environ.get("FUSEGEN_TRACE_PLUGINS", "") not in ("", "0")


class PluginManager:
    """A typed facade over ``pluggy.PluginManager`` holding the ranked registries.

    Raises:
        PluginError: a plugin that fails to import, raises in a hook, or returns the wrong type.
    """

    def __init__(self, autoload: bool | None = None, extra_plugins: list[tuple[str, Any]] = (), config: Any = None):
        self.pm = pluggy.PluginManager("fusegen")
        self.pm.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self.disabled: frozenset[str] = frozenset()
        enabled: set[str] = set()
        if config is not None:
            opts = getattr(config, "plugins", config)
            self.disabled = frozenset(map(normalize_name, getattr(opts, "disable", ()) or ()))
            enabled = set(map(normalize_name, getattr(opts, "enable", ()) or ()))
        from fusegen.analysis import matchers  # core's own questions

        self.register(matchers, "fusegen.matchers", group="builtin", dist="fusegen")
        from fusegen.passes import builtin as builtin_passes  # core's own `fusion` pass

        self.register(builtin_passes, "fusegen.passes", group="builtin", dist="fusegen")
        if autoload is None:
            autoload = os.environ.get("FUSEGEN_DISABLE_PLUGIN_AUTOLOAD", "") in ("", "0")
        wanted = {normalize_name(s.strip()) for s in os.environ.get("FUSEGEN_LOAD_PLUGINS", "").split(",") if s.strip()}
        wanted |= enabled
        dists = {normalize_name(s.strip()) for s in os.environ.get("FUSEGEN_AUTOLOAD_DISTRIBUTIONS", "").split(",")
                 if s.strip()}
        for group in ENTRY_POINT_GROUPS:
            for ep in md.entry_points(group=group):
                named = normalize_name(ep.name) in wanted
                if not autoload and not named:
                    continue
                if dists and not named and normalize_name(ep.dist.name if ep.dist is not None else "") not in dists:
                    continue
                if ep.name in self.infos or normalize_name(ep.name) in self.disabled:
                    continue
                try:
                    obj = ep.load()
                except Exception as e:  # a broken plugin is reported by name
                    raise PluginError(ep.name, f"failed to load from entry point {ep.value!r}", e) from e
                dist = ep.dist.name if ep.dist is not None else "?"
                self.register(obj, ep.name, group=group, dist=dist)
        for name, obj in extra_plugins:
            if normalize_name(name) not in self.disabled:
                self.register(obj, name, group="explicit", dist="?")
        if tracing():
            self.pm.trace.root.setwriter(lambda s: sys.stderr.write("[fusegen-trace] " + s))
            self.pm.enable_tracing()

    def apply_config(self, config: Any) -> None:
        """Apply ``[plugins] disable`` of a resolved config (or its ``.plugins``) to this manager.

        Disabled plugin names are unregistered; disabled matcher / emitter-factory / execution-backend
        names are filtered out of the registries. ``enable`` cannot load entry points after the fact:
        pass ``config`` to the constructor for that.
        """
        opts = getattr(config, "plugins", config)
        self.disabled = frozenset(self.disabled | set(map(normalize_name, getattr(opts, "disable", ()) or ())))
        for name in list(self.infos):
            if normalize_name(name) in self.disabled:
                plugin = self.pm.get_plugin(name)
                if plugin is not None:
                    self.pm.unregister(plugin, name=name)
                del self.infos[name]
        self._clear_caches()

    def lookup(self, name: str) -> str | None:
        """The registered plugin name that ``name`` means (compared normalized), or None."""
        key = normalize_name(name)
        return next((n for n in self.infos if normalize_name(n) == key), None)

    def _clear_caches(self) -> None:
        for attr in ("_matchers", "_factories", "_backends", "_passes", "_codegen_backends"):
            self.__dict__.pop(attr, None)

    def register(self, obj: Any, name: str, group: str = "explicit", dist: str = "?") -> None:
        """Register a plugin object under ``name``."""
        self.pm.register(obj, name=name)
        version = "?"
        if dist not in ("?", ""):
            try:
                version = md.version(dist)
            except md.PackageNotFoundError:
                pass
        hooks = sorted(h.name for h in self.pm.get_hookcallers(obj) or [])
        self.infos[name] = PluginInfo(name, getattr(obj, "__name__", type(obj).__name__), group, dist, version, hooks)
        self._clear_caches()

    def _collect_objects(self, hook_name: str, kind: type, reverse: bool = False) -> list[tuple[str, Any]]:
        """``(plugin name, item)`` of every plugin's list for ``hook_name``; checks each item's type.

        ``reverse`` gives registration order (pluggy calls the last registered first).
        """
        out = []
        impls = getattr(self.pm.hook, hook_name).get_hookimpls()
        for impl in (reversed(impls) if reverse else impls):
            try:
                res = impl.function()
            except Exception as e:
                raise PluginError(impl.plugin_name, f"raised in {hook_name}", e) from e
            if tracing():
                _trace(f"{hook_name}() from {impl.plugin_name} -> {res!r}")
            for item in res or []:
                if not isinstance(item, kind):
                    raise PluginError(impl.plugin_name, f"returned {type(item).__name__} from {hook_name}, expected {kind.__name__}")
                out.append((impl.plugin_name, item))
        return out

    def _collect(self, hook_name: str, kind: type) -> list:
        """Registry descriptors of ``hook_name``, stamped with their plugin, minus ``[plugins] disable``."""
        return [attrs.evolve(item, plugin=plugin) for plugin, item in self._collect_objects(hook_name, kind)
                if normalize_name(getattr(item, "name", None) or "") not in self.disabled]

    @functools.cached_property
    def _matchers(self) -> list[KindMatcher]:
        return sorted(self._collect("fusegen_fusion_kind_matchers", KindMatcher), key=lambda m: m.rank)

    @functools.cached_property
    def _factories(self) -> list[EmitterFactory]:
        return sorted(self._collect("fusegen_emitter_factories", EmitterFactory), key=lambda f: f.rank)

    @functools.cached_property
    def _backends(self) -> list[ExecutionBackend]:
        return sorted(self._collect("fusegen_execution_backends", ExecutionBackend), key=lambda b: b.rank)

    @functools.cached_property
    def _passes(self) -> dict[str, HloPass]:
        out: dict[str, HloPass] = {}
        for p in self._collect("fusegen_passes", HloPass):
            if p.name in out:
                raise PluginError(p.plugin, f"registers pass {p.name!r}, already registered by {out[p.name].plugin!r}")
            out[p.name] = p
        return out

    @functools.cached_property
    def _codegen_backends(self) -> list:
        from fusegen.codegen_backend import CodegenBackend

        return [item for _, item in self._collect_objects("fusegen_codegen_backends", CodegenBackend, reverse=True)]


    def codegen_backends(self) -> list:
        """Autotunable codegen backends (:class:`fusegen.codegen_backend.CodegenBackend`), plugin order."""
        return list(self._codegen_backends)

    def kind_matchers(self) -> list[KindMatcher]:
        """Dispatch questions in asking order."""
        return list(self._matchers)

    def emitter_factories(self, kind: str | None = None) -> list[EmitterFactory]:
        """Emitter factories in trying order, optionally only those of ``kind``."""
        return [f for f in self._factories if kind is None or f.kind == kind]

    def execution_backends(self) -> list[ExecutionBackend]:
        return list(self._backends)

    def passes(self) -> dict[str, HloPass]:
        return dict(self._passes)

    def call_plugin(self, plugin: str, what: str, fn: Callable, *args: Any) -> Any:
        """Call a plugin-provided callable; wrap anything it raises in :class:`PluginError`."""
        try:
            res = fn(*args)
        except PluginError:
            raise
        except Exception as e:
            raise PluginError(plugin, f"raised in {what}", e) from e
        if tracing():
            _trace(f"{what} [{plugin}]({', '.join(_short(a) for a in args)}) -> {_short(res)}")
        return res


def _short(x: Any) -> str:
    s = repr(x)
    return s if len(s) < 120 else s[:117] + "..."


@functools.lru_cache(maxsize=1)
def default_plugin_manager() -> PluginManager:
    """The process-wide plugin manager (entry points loaded once)."""
    return PluginManager()
