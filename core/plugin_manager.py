"""Loading plugins and collecting their registries (pluggy, entry points).

Built-in emitters and backends are found through the same entry-point groups a third-party plugin
uses (:data:`ENTRY_POINT_GROUPS`); the only plugins registered directly are core's own dispatch
questions (:mod:`fusegen.analysis.matchers`) and passes (:mod:`fusegen.passes.builtin`), which the package
declares at its top (``fusegen/__init__``, :func:`declare_core_plugin`) as an installed plugin declares its entry
point: the manager stands below both and names neither.

Each plugin is checked when it loads: every registration hook is called once and its answer typed.
**Names are owned**: plugin, kind matcher, emitter factory, execution backend, codegen backend and pass
names are unique across plugins. fusegen's own plugins load first; a plugin taking a name another one
holds is refused unless it says so, with ``replaces="loop"`` on the descriptor (or ``replaces = "loop"``
on a :class:`~fusegen.codegen_backend.CodegenBackend`), or with a module attribute
``FUSEGEN_REPLACES = "loop"`` (or a list) replacing whole plugins by name. **Quarantine, not collapse**:
a plugin that fails to import, raises in a hook, returns the wrong type, takes a name, or declares an
option whose default does not fit its type is left out and recorded in :attr:`PluginManager.broken`
(:meth:`PluginManager.quarantine_lines`: one line each, plugin, entry point, distribution, reason);
everything else loads. Strict mode (``FUSEGEN_STRICT_PLUGINS=1``, ``[plugins] strict = true``,
``--strict-plugins``) makes the command exit 2 on any quarantine (the CLI's ``resolve_config``).

Environment:
    ``FUSEGEN_TRACE_PLUGINS=1``: print every hook call, its arguments and result to stderr.
    ``FUSEGEN_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry points (only ``FUSEGEN_LOAD_PLUGINS``).
    ``FUSEGEN_LOAD_PLUGINS=a,b``: with autoload off, the entry-point names to load.
    ``FUSEGEN_AUTOLOAD_DISTRIBUTIONS=fusegen,x``: autoload only entry points these distributions install
    (names compared as pip does); entry points named by ``FUSEGEN_LOAD_PLUGINS`` or ``enable`` still load.
    fusegen's own tests set ``fusegen`` so that whatever else is installed cannot change their results.
    ``FUSEGEN_STRICT_PLUGINS=1``: a quarantined plugin is an error (exit 2) in every command.

Configuration: ``PluginManager(config=cfg)`` (a :class:`fusegen.config.loader.ResolvedConfig`, or its
``.plugins``), or :meth:`PluginManager.configure` before first use, applies ``[plugins] enable/disable``
**before any plugin is imported**: a disabled *plugin* (entry-point) name is never imported. A name that
is no plugin's drops one registry entry: ``matcher:NAME``, ``emitter:NAME``, ``backend:NAME``,
``pass:NAME``, ``codegen:NAME``, or a bare name for the first registry holding it in that order, so
``disable = ["loop"]`` removes the plugin ``loop`` and nothing else. Names are compared normalized as
pip compares distributions (:func:`fusegen.config.names.normalize_name`: ``input-slices`` is ``input_slices``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata as md
import inspect
import os
import sys
from typing import Any, Callable

import attrs
import pluggy

from fusegen import hookspecs, kinds
from fusegen.codegen_backend import CodegenBackend
from fusegen.config.names import normalize_name
from fusegen.plugin_diagnostics import import_failure, quarantine_note, why_not_loaded
from fusegen.registry import EmitterFactory, ExecutionBackend, HloPass, KindMatcher

hookimpl = pluggy.HookimplMarker("fusegen")

ENTRY_POINT_GROUPS = ("fusegen.emitters", "fusegen.backends", "fusegen.plugins")

#: registry -> (hook, descriptor type, words used in messages), in the order bare disable names resolve
REGISTRIES: dict[str, tuple[str, type, str]] = {
    "matcher": ("fusegen_fusion_kind_matchers", KindMatcher, "kind matcher"),
    "emitter": ("fusegen_emitter_factories", EmitterFactory, "emitter factory"),
    "backend": ("fusegen_execution_backends", ExecutionBackend, "execution backend"),
    "pass": ("fusegen_passes", HloPass, "pass"),
    "codegen": ("fusegen_codegen_backends", CodegenBackend, "codegen backend"),
}


#: core's own plugins, ``(plugin name, module)`` in registration order: every manager registers them first, before
#: any entry point (group ``builtin``, distribution ``fusegen``), each module imported when a manager first loads.
#: ``fusegen/__init__`` declares them (:func:`declare_core_plugin`): the dispatch questions, then the passes.
_CORE_PLUGINS: list[tuple[str, str]] = []


def declare_core_plugin(name: str, module: str) -> None:
    """Declare one of core's own plugins: every manager imports ``module`` when it first loads and registers it as
    plugin ``name`` ahead of the entry points, in declaration order (a pair declared twice counts once)."""
    if (name, module) not in _CORE_PLUGINS:
        _CORE_PLUGINS.append((name, module))


class PluginError(Exception):
    """A plugin failed (raised, or returned something malformed). The message names the plugin."""

    def __init__(self, plugin: str, what: str, exc: BaseException | None = None):
        self.plugin = plugin
        detail = f": {type(exc).__name__}: {exc}" if exc is not None else ""
        super().__init__(f"plugin {plugin!r} {what}{detail}")


class _Refused(Exception):
    """Why a plugin is quarantined (internal)."""


@attrs.define
class PluginInfo:
    """What ``fusegen plugins`` reports for one plugin.

    Attributes:
        entry_point: ``module`` or ``module:attr`` (empty for a plugin registered in-process).
        status: ``"loaded"`` or ``"broken"`` (quarantined; ``reason`` says why).
        replaces: what it took over, e.g. ``["loop (fusegen)", "emitter loop (loop)"]``.
    """

    name: str
    module: str
    group: str
    distribution: str
    version: str
    hooks: list[str]
    entry_point: str = ""
    status: str = "loaded"
    reason: str = ""
    replaces: list[str] = attrs.Factory(list)


def _trace(msg: str) -> None:
    print(f"[fusegen-trace] {msg}", file=sys.stderr)


def tracing() -> bool:
    return os.environ.get("FUSEGEN_TRACE_PLUGINS", "") not in ("", "0")


_FALSE, _TRUE = ("", "0", "false", "no", "off"), ("1", "true", "yes", "on")


def strict_from_env() -> bool:
    """``FUSEGEN_STRICT_PLUGINS``: ``1``/``true``/``yes``/``on`` turn strict mode on; unset, empty,
    ``0``/``false``/``no``/``off`` leave it off (any case).

    Raises:
        fusegen.config.toml.ConfigError: any other value (the message names the variable and the values).
    """
    value = os.environ.get("FUSEGEN_STRICT_PLUGINS", "")
    if value.strip().lower() in _FALSE + _TRUE:
        return value.strip().lower() in _TRUE
    from fusegen.config.toml import ConfigError

    raise ConfigError(f"{value!r} is not a boolean; use one of {', '.join(_TRUE)} (on) or "
                      f"{', '.join(v for v in _FALSE if v)} (off)", "FUSEGEN_STRICT_PLUGINS")


def _version(dist: str) -> str:
    if dist in ("?", ""):
        return "?"
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "?"


def _names_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise _Refused(f"{what} must be a name or a list of names, got {value!r}")


def _positional_arity(fn: Callable) -> float:
    """How many positional arguments ``fn`` takes (inf with ``*args``); 1 when it cannot be inspected."""
    try:
        return _arity_cached(fn)
    except TypeError:  # an unhashable callable object
        return _arity(fn)


@functools.lru_cache(maxsize=512)
def _arity_cached(fn: Callable) -> float:
    return _arity(fn)


def _arity(fn: Callable) -> float:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    n = 0
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            return float("inf")
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            n += 1
    return n


class PluginManager:
    """A typed facade over ``pluggy.PluginManager`` holding the ranked registries.

    Args:
        autoload: load entry points (default: unless ``FUSEGEN_DISABLE_PLUGIN_AUTOLOAD``).
        extra_plugins: ``(name, object)`` pairs registered after the entry points, checked the same way.
        config: ``[plugins] enable/disable`` to apply before importing anything.
        lazy: import nothing until first used (so :meth:`configure` can still apply ``disable``).
        distributions: autoload only the entry points of these distributions (and the ``enable``d /
            ``FUSEGEN_LOAD_PLUGINS`` ones); default ``FUSEGEN_AUTOLOAD_DISTRIBUTIONS`` (comma-separated), else all.

    A plugin that fails its checks is never raised: it lands in :attr:`broken`.
    """

    def __init__(self, autoload: bool | None = None, extra_plugins: list[tuple[str, Any]] = (), config: Any = None,
                 *, lazy: bool = False, distributions: Any = None):
        self._pluggy = pluggy.PluginManager("fusegen")
        self._pluggy.add_hookspecs(hookspecs)
        self._infos: dict[str, PluginInfo] = {}
        self.broken: dict[str, PluginInfo] = {}
        self.entry_point_names: set[str] = set()  # every entry point seen, loaded or not (normalized)
        self._entries: dict[str, dict[str, Any]] = {r: {} for r in REGISTRIES}  # registry -> name -> item
        self._owner: dict[tuple[str, str], str] = {}  # (registry, name) -> plugin
        self._options: dict[str, list] = {}  # plugin -> its ConfigOptions
        self._replaced_by: dict[str, str] = {}  # replaced plugin name (normalized) -> replacing plugin
        self.disabled: frozenset[str] = frozenset()
        self.strict = False
        self._enabled: set[str] = set()
        self._autoload, self._extra = autoload, list(extra_plugins)
        self._distributions = None if distributions is None else {normalize_name(d) for d in distributions}
        self._loaded = False
        self._config: Any = None
        self._device: Any = None
        self._cache: dict[str, tuple] = {}  # registry -> (state it was built for, entries)
        self._gen = 0  # bumped whenever a plugin is added or dropped
        self._contexts: dict[tuple, Any] = {}  # (plugin, id(device), id(config), gen) -> PluginContext
        if config is not None:
            self._set_lists(config)
        if not lazy:
            self._load()

    # -- configuration --------------------------------------------------------------------------
    def _set_lists(self, config: Any) -> None:
        opts = getattr(config, "plugins", config)
        self.disabled = frozenset(self.disabled | set(map(normalize_name, getattr(opts, "disable", ()) or ())))
        self._enabled |= set(map(normalize_name, getattr(opts, "enable", ()) or ()))
        self.strict = self.strict or bool(getattr(opts, "strict", False))

    def configure(self, plugins_options: Any) -> None:
        """Apply ``[plugins]`` (enable, disable, strict): before the plugins load when still possible
        (a disabled plugin is then never imported), else as :meth:`apply_config`."""
        if self._loaded:
            self.apply_config(plugins_options)
        else:
            self._set_lists(plugins_options)

    def apply_config(self, config: Any) -> None:
        """Apply ``[plugins] disable`` of a resolved config (or its ``.plugins``) to this manager.

        Disabled plugin names are unregistered; disabled matcher / emitter-factory / execution-backend /
        pass / codegen-backend names are filtered out of the registries. ``enable`` cannot load entry
        points after the fact: pass ``config`` to the constructor (or :meth:`configure` first) for that.
        """
        self._set_lists(config)
        for name in list(self.infos):
            if normalize_name(name) in self.disabled:
                self._drop(name)

    def set_context(self, config: Any = None, device: Any = None) -> None:
        """The resolved configuration and device every :meth:`context_for` hands plugins."""
        if config is not None:
            self._config = config
        if device is not None:
            self._device = device

    def context_for(self, plugin: str, device: Any = None, executor: Any = None):
        """The :class:`fusegen.plugin_context.PluginContext` for ``plugin``: its declared settings (defaults,
        then the configuration's ``[plugins.<plugin>]``), the device (``device`` or :meth:`set_context`'s)."""
        from fusegen.plugin_context import PluginContext

        device = device if device is not None else self._device
        key = (plugin, id(device), id(self._config), self._gen)
        hit = self._contexts.get(key) if executor is None else None
        if hit is not None and hit.device is device and hit.config is self._config:
            return hit
        settings = {o.name: o.default for o in self._options.get(plugin, ())}
        if self._config is not None:
            settings.update(self._config.plugin_settings(plugin))
        ctx = PluginContext(plugin=plugin, device=device, settings=settings, config=self._config, executor=executor)
        if executor is None:  # asked for every matcher of every fusion: built once per plugin and device
            self._contexts[key] = ctx
        return ctx

    # -- loading --------------------------------------------------------------------------------
    @property
    def pm(self) -> pluggy.PluginManager:
        """The underlying pluggy manager (plugins loaded)."""
        self._load()
        return self._pluggy

    @property
    def infos(self) -> dict[str, PluginInfo]:
        """Loaded plugins by name (not the quarantined ones: :attr:`broken`)."""
        self._load()
        return self._infos

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for name, module in _CORE_PLUGINS:  # core's own questions and passes (fusegen/__init__ declares them)
            self._add(importlib.import_module(module), name, "builtin", "fusegen", module)
        autoload = self._autoload
        if autoload is None:
            autoload = os.environ.get("FUSEGEN_DISABLE_PLUGIN_AUTOLOAD", "") in ("", "0")
        wanted = {normalize_name(s.strip()) for s in os.environ.get("FUSEGEN_LOAD_PLUGINS", "").split(",") if s.strip()}
        wanted |= self._enabled
        dists = self._distributions if self._distributions is not None else {
            normalize_name(s.strip()) for s in os.environ.get("FUSEGEN_AUTOLOAD_DISTRIBUTIONS", "").split(",")
            if s.strip()}
        found = []
        for gi, group in enumerate(ENTRY_POINT_GROUPS):
            for k, ep in enumerate(md.entry_points(group=group)):
                dist = ep.dist.name if ep.dist is not None else "?"
                # fusegen's own first, in discovery order; then the others in a fixed order (first owns a name)
                own = normalize_name(dist) == "fusegen"
                found.append(((0, "", gi, k) if own else (1, normalize_name(dist), gi, ep.name), group, ep, dist))
        # one entry-point name from two third-party distributions: neither may win by install order
        dists_of: dict[str, set[str]] = {}
        for _, _g, ep, dist in found:
            if normalize_name(dist) != "fusegen":
                dists_of.setdefault(normalize_name(ep.name), set()).add(dist)
        for _, group, ep, dist in sorted(found, key=lambda t: t[0]):
            key = normalize_name(ep.name)
            self.entry_point_names.add(key)
            named = key in wanted
            if not autoload and not named:
                continue
            if dists and not named and normalize_name(dist) not in dists:
                continue
            if key in self.disabled:
                continue  # [plugins] disable: never imported
            others = sorted(dists_of.get(key, set()) - {dist})
            if others and normalize_name(dist) != "fusegen":
                self._quarantine(ep.name, group, dist, ep.value, f"plugin name {ep.name!r} is also an entry point of "
                                 f"distribution(s) {', '.join(others)}; neither is loaded (uninstall one, or rename "
                                 f"its entry point)")
                continue
            if key in self._replaced_by:
                self._quarantine(ep.name, group, dist, ep.value, f"plugin name {ep.name!r} was replaced by plugin "
                                                                 f"{self._replaced_by[key]!r}; not imported")
                continue
            if ep.name in self._infos and self._infos[ep.name].entry_point == ep.value \
                    and self._infos[ep.name].distribution == dist:
                continue  # one entry point listed twice (a distribution installed twice on the path)
            try:
                obj = ep.load()
            except Exception as e:  # a broken plugin is left out, by name
                self._quarantine(ep.name, group, dist, ep.value, import_failure(e))  # with FILE:LINE
                continue
            self._add(obj, ep.name, group, dist, ep.value)
        for name, obj in self._extra:
            if normalize_name(name) not in self.disabled:
                self._add(obj, name, "explicit", "?", getattr(obj, "__name__", ""))
        if tracing():
            self._pluggy.trace.root.setwriter(lambda s: sys.stderr.write("[fusegen-trace] " + s))
            self._pluggy.enable_tracing()

    def register(self, obj: Any, name: str, group: str = "explicit", dist: str = "?") -> None:
        """Register a plugin object under ``name``, checked like an entry point.

        Raises:
            PluginError: the plugin was refused (it is also in :attr:`broken`).
        """
        self._load()
        if not self._add(obj, name, group, dist, getattr(obj, "__name__", "")):
            raise PluginError(name, f"was refused: {self.broken[name].reason}")

    def _quarantine(self, name: str, group: str, dist: str, entry_point: str, reason: str) -> None:
        self.broken[name] = PluginInfo(name, entry_point.partition(":")[0], group, dist, _version(dist), [],
                                       entry_point=entry_point, status="broken", reason=reason)
        if tracing():
            _trace(f"quarantined {name}: {reason}")

    def _add(self, obj: Any, name: str, group: str, dist: str, entry_point: str) -> bool:
        """Check and register one plugin; on any failure quarantine it (returns False)."""
        try:
            replaces = [r for r in _names_list(getattr(obj, "FUSEGEN_REPLACES", None), "FUSEGEN_REPLACES")]
            taken = self.lookup(name)
            if taken is not None and normalize_name(name) not in map(normalize_name, replaces):
                i = self._infos[taken]
                raise _Refused(f"plugin name {name!r} is taken by {i.distribution}'s plugin {taken!r} (entry point "
                               f"{i.entry_point or i.module}); set FUSEGEN_REPLACES = {taken!r} in the plugin to "
                               "replace it")
            gone = {self.lookup(r) for r in replaces} - {None}
            pending = f"{name}\0pending"  # checked under a name of its own: a refused plugin displaces nothing
            try:
                self._pluggy.register(obj, name=pending)
            except Exception as e:
                raise _Refused(f"{type(e).__name__}: {e}") from None
            try:
                items, options = self._collect_plugin(obj, name)
                took = self._check_names(name, items, gone)
            finally:
                self._pluggy.unregister(obj, name=pending)
        except _Refused as e:
            self._quarantine(name, group, dist, entry_point, str(e))
            return False
        said = []
        for g in sorted(gone):
            said.append(f"{g} ({self._infos[g].distribution})")
            self._drop(g)
            self._replaced_by[normalize_name(g)] = name
        self._pluggy.register(obj, name=name)
        for reg, nm in took:
            owner = self._owner.pop((reg, nm))
            said.append(f"{reg} {nm} ({owner})")
            del self._entries[reg][nm]
        for reg, nm, item in items:
            self._entries[reg][nm] = item
            self._owner[(reg, nm)] = name
        self._options[name] = options
        self._gen += 1
        hooks = sorted(h.name for h in self._pluggy.get_hookcallers(obj) or [])
        self._infos[name] = PluginInfo(name, getattr(obj, "__name__", type(obj).__name__), group, dist,
                                       _version(dist), hooks, entry_point=entry_point, replaces=said)
        return True

    def _collect_plugin(self, obj: Any, name: str) -> tuple[list[tuple[str, str, Any]], list]:
        """Call every registration hook of one plugin; typed ``(registry, name, item)`` and its options."""
        from fusegen.config.options import ConfigOption, check_value, type_name

        items: list[tuple[str, str, Any]] = []
        for reg, (hook, kind, words) in REGISTRIES.items():
            for res in self._call_own(obj, name, hook):
                for item in res:
                    if not isinstance(item, kind):
                        raise _Refused(f"returned {type(item).__name__} from {hook}, expected {kind.__name__}")
                    nm = getattr(item, "name", None)
                    if not isinstance(nm, str) or not nm:
                        raise _Refused(f"returned a {words} without a name from {hook}")
                    if any(r == reg and n == nm for r, n, _ in items):
                        raise _Refused(f"registers {words} {nm!r} twice")
                    if reg == "codegen":
                        item.plugin = name  # an object, not a descriptor
                    else:
                        item = attrs.evolve(item, plugin=name)
                    items.append((reg, nm, item))
        options = []
        for res in self._call_own(obj, name, "fusegen_config_options"):
            for o in res:
                if not isinstance(o, ConfigOption):
                    raise _Refused(f"returned {type(o).__name__} from fusegen_config_options, expected ConfigOption")
                if not check_value(o.default, o.type)[0]:
                    raise _Refused(f"declares option {o.name!r} of type {type_name(o.type)} with default "
                                   f"{o.default!r}")
                options.append(attrs.evolve(o, plugin=name))
        for reg, nm, item in items:
            for o in getattr(item, "options", ()) if reg == "pass" else ():
                if not isinstance(o, ConfigOption) or not check_value(o.default, o.type)[0]:
                    raise _Refused(f"pass {nm!r} declares a bad option {o!r}")
        return items, options

    def _call_own(self, obj: Any, name: str, hook: str) -> list[list]:
        """The answers of ``obj``'s own implementations of ``hook`` (each checked to be a list)."""
        out = []
        for impl in getattr(self._pluggy.hook, hook).get_hookimpls():
            if impl.plugin is not obj:
                continue
            try:
                res = impl.function()
            except Exception as e:
                raise _Refused(f"raised in {hook}: {type(e).__name__}: {e}") from None
            if tracing():
                _trace(f"{hook}() from {name} -> {res!r}")
            if res is None:
                continue
            if not isinstance(res, (list, tuple)):
                raise _Refused(f"returned {type(res).__name__} from {hook}, expected a list")
            out.append(list(res))
        return out

    def _check_names(self, plugin: str, items: list, gone: set[str]) -> list[tuple[str, str]]:
        """Entries of other plugins ``items`` take over (said with ``replaces``); refuses a silent taking."""
        took = []
        for reg, nm, item in items:
            owner = self._owner.get((reg, nm))
            if owner is None or owner in gone:
                continue
            if getattr(item, "replaces", None) == nm:
                took.append((reg, nm))
                continue
            words = REGISTRIES[reg][2]
            raise _Refused(f"registers {words} {nm!r}, which plugin {owner!r} ({self._infos[owner].distribution}) "
                           f"already registers; say replaces={nm!r} on it to replace that one")
        for reg, nm, item in items:  # replaces= naming another entry: that one goes
            r = getattr(item, "replaces", None)
            if r and r != nm and (reg, r) in self._owner and self._owner[(reg, r)] not in gone:
                took.append((reg, r))
            elif r and (reg, r) not in self._owner and not self._was_disabled(reg, r):
                from fusegen.config.xla_flags import did_you_mean

                words = REGISTRIES[reg][2]
                raise _Refused(f"{words} {nm!r} says replaces={r!r}, but no plugin registers a {words} {r!r}"
                               f"{did_you_mean(r, [n for g, n in self._owner if g == reg])}")
        return took

    def _was_disabled(self, reg: str, name: str) -> bool:
        """``[plugins] disable`` dropped entry ``name`` of ``reg`` (or its plugin): replacing it is no typo."""
        d = self.disabled
        return bool({normalize_name(name), normalize_name(f"{reg}:{name}")} & d) or bool(
            {f"{r}:{name}" for r in ("matcher", "emitter", "backend", "pass", "codegen")} & set(d))

    def _drop(self, name: str) -> None:
        plugin = self._pluggy.get_plugin(name)
        if plugin is not None:
            self._pluggy.unregister(plugin, name=name)
        self._infos.pop(name, None)
        self._options.pop(name, None)
        self._gen += 1
        for (reg, nm), owner in list(self._owner.items()):
            if owner == name:
                del self._owner[(reg, nm)]
                self._entries[reg].pop(nm, None)

    def lookup(self, name: str) -> str | None:
        """The registered plugin name that ``name`` means (compared normalized), or None."""
        key = normalize_name(name)
        return next((n for n in self._infos if normalize_name(n) == key), None)

    def quarantine_lines(self) -> list[str]:
        """One line per quarantined plugin: name, entry point, distribution, reason."""
        out = []
        for i in self.broken.values():
            ep = f"entry point {i.group}: {i.name} = {i.entry_point}" if i.group != "explicit" else "registered in-process"
            out.append(f"plugin {i.name!r} ({ep}; distribution {i.distribution} {i.version}) quarantined: {i.reason}")
        return out

    def quarantine_note(self) -> str:
        """:func:`fusegen.plugin_diagnostics.quarantine_note` of this manager: what its quarantined plugins would
        have registered is missing (``""`` when none is); the config loader appends it to an unknown pass."""
        return quarantine_note(self)

    def why_not_loaded(self, name: str) -> str | None:
        """:func:`fusegen.plugin_diagnostics.why_not_loaded` of this manager: why plugin ``name`` is not loaded
        (quarantined, disabled, installed but not loaded), ``None`` when it is loaded or not installed; the config
        loader says it of a ``[plugins.<name>]`` table."""
        return why_not_loaded(self, name)

    # -- registries -----------------------------------------------------------------------------
    def _disabled_in(self, reg: str) -> set[str]:
        """Normalized entry names of registry ``reg`` that ``disable`` drops (plugin names drop plugins)."""
        out = set()
        plugins = {normalize_name(n) for n in self._infos} | self.entry_point_names | set(self._replaced_by)
        for d in self.disabled:
            prefix, sep, rest = d.partition(":")
            if sep:
                if prefix == reg:
                    out.add(rest)
                continue
            if d in plugins:
                continue
            first = next((r for r in REGISTRIES if any(normalize_name(n) == d for n in self._entries[r])), None)
            if first == reg:
                out.add(d)
        return out

    def _registry(self, reg: str, ranked: bool = False) -> list:
        """The entries of ``reg`` that ``[plugins] disable`` leaves, in registration order or (``ranked``) by rank;
        built once per state of the registry (dispatch asks for every fusion)."""
        self._load()
        key = (reg, self.disabled, self._gen)
        hit = self._cache.get(reg)
        if hit is None or hit[0] != key:
            off = self._disabled_in(reg)
            hit = self._cache[reg] = (key, [item for nm, item in self._entries[reg].items()
                                            if normalize_name(nm) not in off], [])
        if ranked and len(hit[2]) != len(hit[1]):
            hit[2][:] = sorted(hit[1], key=lambda e: e.rank)
        return list(hit[2] if ranked else hit[1])

    def registered_names(self) -> list[tuple[str, str]]:
        """``(registry, name)`` of every entry, ``[plugins] disable`` not applied."""
        self._load()
        return [(reg, nm) for reg, items in self._entries.items() for nm in items]

    def codegen_backends(self) -> list:
        """Autotunable codegen backends (:class:`fusegen.codegen_backend.CodegenBackend`), registration order,
        each with its plugin's :class:`~fusegen.plugin_context.PluginContext` as ``.context``."""
        out = self._registry("codegen")
        for b in out:
            b.context = self.context_for(b.plugin)
        return out

    def kind_matchers(self) -> list[KindMatcher]:
        """Dispatch questions in asking order."""
        return self._registry("matcher", ranked=True)

    def emitter_factories(self, kind: str | None = None) -> list[EmitterFactory]:
        """Emitter factories in trying order, optionally only those of ``kind``."""
        return [f for f in self._registry("emitter", ranked=True) if kind is None or f.kind == kind]

    def execution_backends(self) -> list[ExecutionBackend]:
        return self._registry("backend", ranked=True)

    def passes(self) -> dict[str, HloPass]:
        return {p.name: p for p in self._registry("pass")}

    def config_options(self) -> dict[str, list]:
        """Plugin name -> the :class:`~fusegen.config.options.ConfigOption` keys it declares."""
        self._load()
        return {k: list(v) for k, v in self._options.items() if v}

    def declared_kinds(self) -> set[str]:
        """Kinds a matcher may answer: XLA's, every factory's ``kind``, every matcher's ``kinds``."""
        self._load()
        hit = self._cache.get("declared kinds")
        if hit is None or hit[0] != self._gen:
            out = set(kinds.EMITTER_FUSION_KINDS)
            out |= {f.kind for f in self._entries["emitter"].values()}
            for m in self._entries["matcher"].values():
                out |= set(m.kinds)
            hit = self._cache["declared kinds"] = (self._gen, frozenset(out))
        return set(hit[1])

    def call_plugin(self, plugin: str, what: str, fn: Callable, *args: Any, context: Any = None) -> Any:
        """Call a plugin-provided callable; wrap anything it raises in :class:`PluginError`.

        ``context`` (a :class:`~fusegen.plugin_context.PluginContext`) is passed as one more positional
        argument when ``fn`` takes it (a matcher written as ``match(analysis)`` does not get it).
        """
        if context is not None and _positional_arity(fn) > len(args):
            args = (*args, context)
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
    """The process-wide plugin manager; entry points load once, on first use, so that a command can
    :meth:`~PluginManager.configure` ``[plugins] disable`` before any plugin is imported."""
    return PluginManager(lazy=True)
