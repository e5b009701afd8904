"""Finding, reading, validating and layering fusegen's configuration.

Where the file comes from (first that applies):

1. ``--config FILE`` (a ``pyproject.toml`` is read from its ``[tool.fusegen]`` table, any other file whole);
2. walking up from the current directory, the closest directory holding ``fusegen.toml`` or a
   ``pyproject.toml`` with a ``[tool.fusegen]`` table (``fusegen.toml`` wins within one directory, with a
   warning that the pyproject table is ignored);
3. none: defaults only.

Precedence of values, highest first: command line (``--xla-flag NAME=VALUE``) > environment (``XLA_FLAGS``) >
file > defaults. :class:`ResolvedConfig` records where each value came from: ``"default"``,
``"file:PATH:LINE"``, ``"env:XLA_FLAGS"`` or ``"cli"``.

Validation runs after plugins load (plugins declare the keys of their ``[plugins.<name>]`` tables through
``fusegen_config_options``): unknown keys and wrong types are errors with ``PATH:LINE`` and a did-you-mean;
an unknown pass is an error listing the known passes; a table of a plugin that is not installed is a warning.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import attrs

from fusegen.config.options import (
    DEBUG_OPTION_FIELDS,
    DEVICE_PRESETS,
    ConfigOption,
    DebugOptions,
    DeviceOptions,
    PipelineOptions,
    PluginsOptions,
    check_value,
    normalize_choice,
    type_name,
    value_type_name,
)
from fusegen.config.toml import ConfigError, TomlDocument, has_table, read_toml
from fusegen.config.xla_flags import did_you_mean, parse_cli_flags, parse_xla_flags
from fusegen.config.names import normalize_name
from fusegen.config.verify_options import VerifyOptions, parse_verify_table

if TYPE_CHECKING:
    from fusegen.plugin_manager import PluginManager

CONFIG_FILE_NAME = "fusegen.toml"
PYPROJECT_PREFIX = ("tool", "fusegen")
TABLES = ("pipeline", "plugins", "debug_options", "device", "verify")

SOURCE_DEFAULT = "default"
SOURCE_ENV = "env:XLA_FLAGS"
SOURCE_CLI = "cli"


@attrs.frozen
class ResolvedConfig:
    """The configuration in force, every value with its source.

    Attributes:
        debug_options: XLA debug options (read ``cfg.debug_options.xla_gpu_enable_triton_gemm``).
        device: ``[device]``.
        pipeline: ``[pipeline]``.
        plugins: ``[plugins]``, with ``settings[plugin][key]`` holding each plugin's typed keys.
        values: dotted option name (``debug_options.xla_gpu_autotune_level``, ``plugins.<name>.<key>``) -> value.
        sources: dotted option name -> ``"default"``, ``"file:PATH:LINE"``, ``"env:XLA_FLAGS"`` or ``"cli"``.
        help: dotted option name -> help text.
        config_file: the file read, or None.
        warnings: one line each (absent plugin tables, ignored XLA flags ...).
    """

    debug_options: DebugOptions
    device: DeviceOptions
    pipeline: PipelineOptions
    plugins: PluginsOptions
    values: dict[str, Any]
    sources: dict[str, str]
    help: dict[str, str]
    config_file: Path | None = None
    warnings: tuple[str, ...] = ()
    verify: VerifyOptions = attrs.field(factory=VerifyOptions)  # [verify] (fusegen.config.verify_options)

    def source_of(self, name: str) -> str:
        """Source of a dotted option name, or of a bare XLA flag name (``xla_gpu_autotune_level``).

        Raises:
            KeyError: no such option.
        """
        if name in self.sources:
            return self.sources[name]
        return self.sources[f"debug_options.{name}"]

    def plugin_settings(self, plugin: str) -> dict[str, Any]:
        """The typed ``[plugins.<plugin>]`` values (defaults filled in); empty for a plugin that declares none.
        ``plugin`` is compared normalized (``input-slices`` is ``input_slices``)."""
        key = normalize_name(plugin)
        return dict(next((v for k, v in self.plugins.settings.items() if normalize_name(k) == key), {}))


def find_config_file(start: str | Path | None = None) -> tuple[Path, tuple[str, ...], list[str]] | None:
    """The closest config file at or above ``start`` (default: the current directory).

    Returns:
        ``(path, prefix, warnings)`` (``prefix`` is ``("tool", "fusegen")`` for a pyproject.toml), or None.
    """
    here = Path(start if start is not None else os.getcwd()).resolve()
    for d in (here, *here.parents):
        own = d / CONFIG_FILE_NAME
        pyproject = d / "pyproject.toml"
        py_has = pyproject.is_file() and has_table(pyproject, PYPROJECT_PREFIX)
        if own.is_file():
            warns = [f"{pyproject}: [tool.fusegen] ignored because {own} is in the same directory"] if py_has else []
            return own, (), warns
        if py_has:
            return pyproject, PYPROJECT_PREFIX, []
    return None


def collect_plugin_options(pm: "PluginManager") -> dict[str, list[ConfigOption]]:
    """Every plugin's ``fusegen_config_options`` keys (asked and checked when the plugin loaded: a plugin
    that raised, returned something other than ConfigOption objects, or declared a default that does not
    match the declared type is quarantined, so it has none here)."""
    return pm.config_options()


def _known_components(pm: "PluginManager") -> set[str]:
    """Names ``[plugins] enable/disable`` may use: plugins (loaded, quarantined, or never imported because
    disabled), and every registry entry, bare or as ``matcher:NAME``, ``emitter:NAME``... ."""
    names = set(pm.infos) | set(pm.broken) | set(pm.entry_point_names)
    for reg, name in pm.registered_names():
        names |= {name, f"{reg}:{name}"}
    return names


class _Builder:
    """Collects values, sources and warnings while one config is resolved."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.help: dict[str, str] = {}
        self.warnings: list[str] = []

    def set(self, name: str, value: Any, source: str, help: str | None = None) -> None:
        self.values[name] = value
        self.sources[name] = source
        if help is not None:
            self.help[name] = help


def _file_source(doc: TomlDocument, *keys: str) -> str:
    return f"file:{doc.path}:{doc.line_of(*keys)}"


def _unknown_key(doc: TomlDocument, key: str, table: tuple[str, ...], known: list[str] | tuple[str, ...]) -> ConfigError:
    hint = did_you_mean(key, known)
    if not hint and len(known) <= 8:
        hint = f"; known keys: {', '.join(known)}"
    name = doc.table_name(*table)
    where = "at top level" if name == "top level" else f"in {name}"
    return doc.error(f"unknown key {key!r} {where}{hint}", *table, key)


def _wrong_type(doc: TomlDocument, key_path: tuple[str, ...], expected: str, value: Any) -> ConfigError:
    table, key = key_path[:-1], key_path[-1]
    return doc.error(f"{key!r} in {doc.table_name(*table)}: expected {expected}, got {value_type_name(value)} "
                     f"({value!r})", *key_path)


def _table(doc: TomlDocument, data: Any, key_path: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise _wrong_type(doc, key_path, "a table", data)
    return data


def _check_device(name: str) -> str | None:
    """Error text for an unknown device preset, or None. Asks fusegen.device when it exists."""
    try:
        from fusegen.device import get_device  # type: ignore[import-not-found]
    except ImportError:
        if name in DEVICE_PRESETS:
            return None
        return f"unknown device {name!r}{did_you_mean(name, DEVICE_PRESETS)}; known: {', '.join(DEVICE_PRESETS)}"
    try:
        get_device(name)
    except (KeyError, ValueError) as e:
        return str(e).strip("'\"")
    return None


def _read_config_file(config_path: Any, cwd: Any) -> tuple[TomlDocument | None, list]:
    """The file ``--config`` names, else the nearest ``fusegen.toml`` / ``pyproject.toml`` (None: no file), with
    the lookup's warnings.

    Raises:
        ConfigError: a named file that is missing or not a file, or not TOML.
    """
    if config_path is not None:
        p = Path(config_path)
        if not p.is_file():
            raise ConfigError("config file not found" if not p.exists() else "config path is not a file", p)
        return read_toml(p, PYPROJECT_PREFIX if p.name == "pyproject.toml" else ()), []
    found = find_config_file(cwd)
    if found is None:
        return None, []
    path, prefix, warns = found
    return read_toml(path, prefix), list(warns)


def load_config(
    config_path: str | Path | None = None,
    cli_flags: Mapping[str, Any] | list[str] | tuple[str, ...] | None = None,
    pm: "PluginManager | None" = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    plugin_options: Mapping[str, list[ConfigOption]] | None = None,
    installed_plugins: set[str] | None = None,
    known_passes: set[str] | None = None,
    known_components: set[str] | None = None,
    strict: bool = False,
    pass_declarations: Mapping[str, list[ConfigOption]] | None = None,
) -> ResolvedConfig:
    """Find, read and validate the configuration, and layer command line > ``XLA_FLAGS`` > file > defaults.

    Args:
        config_path: ``--config FILE``; None searches from ``cwd`` upward (see the module docstring).
        cli_flags: ``--xla-flag`` overrides, as ``["NAME=VALUE", ...]`` or ``{NAME: value}``.
        pm: a loaded plugin manager; when given, ``plugin_options``, ``installed_plugins``, ``known_passes``
            and ``known_components`` default to what its plugins register, and the warnings say why a plugin is
            missing as the manager does (``pm.quarantine_note()``, ``pm.why_not_loaded(name)``).
        env: environment (default ``os.environ``); only ``XLA_FLAGS`` is read.
        cwd: where the search starts (default: the current directory).
        plugin_options: plugin name -> the keys it declares for ``[plugins.<name>]``.
        installed_plugins: names of installed plugins (default: the keys of ``plugin_options``); a table of a
            plugin outside this set is a warning.
        known_passes: pass names a ``[pipeline]`` may use; None skips the check.
        known_components: plugin, matcher, emitter and backend names for ``[plugins] enable/disable``; None
            skips the check; an unknown name is a warning.
        pass_declarations: pass name -> the keys its ``[pipeline.options.<pass>]`` may set (``HloPass.options``);
            None skips the check.
        strict: turn warnings into errors.

    Returns:
        ResolvedConfig.

    Raises:
        ConfigError: missing or unreadable ``--config`` file; TOML syntax error (``PATH:LINE``); unknown key
            (``PATH:LINE: unknown key 'k' in [table]; did you mean 'x'?``); wrong type (``expected int, got
            str``); unknown pass or device; bad ``XLA_FLAGS`` or ``--xla-flag`` value; with ``strict``, any warning.
    """
    env = os.environ if env is None else env
    if pm is not None:
        if plugin_options is None:
            plugin_options = collect_plugin_options(pm)
        if installed_plugins is None:
            installed_plugins = set(pm.infos)
        if known_passes is None:
            known_passes = set(pm.passes())
        if pass_declarations is None:
            pass_declarations = {n: list(p.options) for n, p in pm.passes().items()}
        if known_components is None:
            known_components = _known_components(pm)
    quarantined = ""  # why passes may be missing: quarantined plugins never registered theirs
    if pm is not None and pm.broken:
        quarantined = pm.quarantine_note()
    plugin_options = dict(plugin_options or {})
    installed = set(installed_plugins) if installed_plugins is not None else set(plugin_options)
    b = _Builder()

    doc, warns = _read_config_file(config_path, cwd)
    b.warnings.extend(warns)

    data: dict[str, Any] = doc.data if doc is not None else {}
    if doc is not None:
        for key, value in data.items():
            if key not in TABLES:
                raise _unknown_key(doc, key, (), TABLES)
            _table(doc, value, (key,))

    # [debug_options], then XLA_FLAGS, then --xla-flag.
    dbg: dict[str, Any] = {}
    for name, f in DEBUG_OPTION_FIELDS.items():
        b.set(f"debug_options.{name}", f.default, SOURCE_DEFAULT, f.metadata["help"])
        dbg[name] = f.default
    if doc is not None and "debug_options" in data:
        for key, value in data["debug_options"].items():
            if key not in DEBUG_OPTION_FIELDS:
                raise _unknown_key(doc, key, ("debug_options",), tuple(DEBUG_OPTION_FIELDS))
            meta = DEBUG_OPTION_FIELDS[key].metadata
            ok, conv = check_value(value, meta["type"])
            if not ok:
                raise _wrong_type(doc, ("debug_options", key), type_name(meta["type"]), value)
            if meta.get("choices"):
                conv = normalize_choice(key, conv)
                if conv not in meta["choices"]:
                    raise doc.error(f"{key!r} in {doc.table_name('debug_options')}: expected one of "
                                    f"{', '.join(meta['choices'])}, got {value!r}", "debug_options", key)
            dbg[key] = conv
            b.set(f"debug_options.{key}", conv, _file_source(doc, "debug_options", key))
    xla_env = env.get("XLA_FLAGS", "")
    if xla_env.strip():
        parsed = parse_xla_flags(xla_env)
        b.warnings.extend(parsed.warnings)
        for key, value in parsed.values.items():
            dbg[key] = value
            b.set(f"debug_options.{key}", value, SOURCE_ENV)
    for key, value in parse_cli_flags(cli_flags).items():
        dbg[key] = value
        b.set(f"debug_options.{key}", value, SOURCE_CLI)
    debug_options = DebugOptions(**dbg)

    # [device]
    device_name = DeviceOptions().name
    b.set("device.name", device_name, SOURCE_DEFAULT, "Device description preset.")
    if doc is not None and "device" in data:
        for key, value in data["device"].items():
            if key != "name":
                raise _unknown_key(doc, key, ("device",), ("name",))
            if not isinstance(value, str):
                raise _wrong_type(doc, ("device", "name"), "str", value)
            problem = _check_device(value)
            if problem:
                raise doc.error(f"{doc.table_name('device')} name: {problem}", "device", "name")
            device_name = value
            b.set("device.name", value, _file_source(doc, "device", "name"))
    device = DeviceOptions(name=device_name)

    # [verify]
    verify = VerifyOptions()
    b.set("verify.rtol", verify.rtol, SOURCE_DEFAULT, "Conditioning factor: a kernel output may be this many "
          "times further from the f64 oracle than the reference is (drift, not mismatch).")
    b.set("verify.atol", dict(verify.floors), SOURCE_DEFAULT, "Per-dtype floor, a fraction of max(1, max|value|).")
    if doc is not None and "verify" in data:
        verify, seen = parse_verify_table(_table(doc, data["verify"], ("verify",)), doc.error)
        for key, value in seen.items():
            b.set(key, value, _file_source(doc, *key.split(".")))

    # [pipeline]
    passes: list[str] | None = None
    pass_options: dict[str, dict[str, Any]] = {}
    b.set("pipeline.passes", None, SOURCE_DEFAULT, "Ordered pass names; unset means the default pipeline.")
    b.set("pipeline.verify", False, SOURCE_DEFAULT, PipelineOptions.__attrs_attrs__.verify.metadata["help"])
    verify_passes, matmul_precision = False, "default"
    b.set("pipeline.default_matmul_precision", "default", SOURCE_DEFAULT,
          PipelineOptions.__attrs_attrs__.default_matmul_precision.metadata["help"])
    if doc is not None and "pipeline" in data:
        for key, value in data["pipeline"].items():
            if key == "default_matmul_precision":
                from fusegen.hlo.dot_numerics import MATMUL_PRECISIONS

                if not isinstance(value, str) or value.strip().lower() not in MATMUL_PRECISIONS:
                    raise doc.error(f"'default_matmul_precision' in [pipeline]: expected one of "
                                    f"{', '.join(MATMUL_PRECISIONS)}, got {value!r}", "pipeline", key)
                matmul_precision = value.strip().lower()
                b.set("pipeline.default_matmul_precision", matmul_precision,
                      _file_source(doc, "pipeline", "default_matmul_precision"))
            elif key == "verify":
                if not isinstance(value, bool):
                    raise _wrong_type(doc, ("pipeline", "verify"), "bool", value)
                verify_passes = value
                b.set("pipeline.verify", value, _file_source(doc, "pipeline", "verify"))
            elif key == "passes":
                ok, conv = check_value(value, list[str])
                if not ok:
                    raise _wrong_type(doc, ("pipeline", "passes"), "list[str]", value)
                conv = _check_passes(doc, conv, known_passes, quarantined=quarantined, warnings=b.warnings)
                passes = conv
                b.set("pipeline.passes", conv, _file_source(doc, "pipeline", "passes"))
            elif key == "options":
                for pname, popts in _table(doc, value, ("pipeline", "options")).items():
                    pname = _check_passes(doc, [pname], known_passes, ("pipeline", "options", pname),
                                          quarantined=quarantined, warnings=b.warnings)[0]
                    popts = _table(doc, popts, ("pipeline", "options", pname))
                    pass_options[pname] = _pass_table(doc, pname, popts, pass_declarations)
                    for okey, oval in pass_options[pname].items():
                        b.set(f"pipeline.options.{pname}.{okey}", oval,
                              _file_source(doc, "pipeline", "options", pname, okey), f"Option of pass {pname!r}.")
            else:
                raise _unknown_key(doc, key, ("pipeline",), ("passes", "options", "verify", "default_matmul_precision"))
    pipeline = PipelineOptions(passes=passes, options=pass_options, verify=verify_passes,
                               default_matmul_precision=matmul_precision)

    # [plugins]
    lists: dict[str, list[str]] = {"enable": [], "disable": []}
    settings: dict[str, dict[str, Any]] = {}
    for plugin, opts in sorted(plugin_options.items()):
        settings[plugin] = {}
        for o in opts:
            settings[plugin][o.name] = o.default
            b.set(f"plugins.{plugin}.{o.name}", o.default, SOURCE_DEFAULT, o.help)
    b.set("plugins.enable", [], SOURCE_DEFAULT, "Plugins, matchers, emitters or backends to enable.")
    b.set("plugins.disable", [], SOURCE_DEFAULT, "Plugins, matchers, emitters or backends to disable.")
    b.set("plugins.strict", False, SOURCE_DEFAULT, "A quarantined plugin fails the command (exit 2).")
    strict_plugins = False
    if doc is not None and "plugins" in data:
        for key, value in data["plugins"].items():
            if key == "strict":
                if not isinstance(value, bool):
                    raise _wrong_type(doc, ("plugins", "strict"), "bool", value)
                strict_plugins = value
                b.set("plugins.strict", value, _file_source(doc, "plugins", "strict"))
                continue
            if key in lists:
                ok, conv = check_value(value, list[str])
                if not ok:
                    raise _wrong_type(doc, ("plugins", key), "list[str]", value)
                lists[key] = conv
                b.set(f"plugins.{key}", conv, _file_source(doc, "plugins", key))
                if known_components is not None:
                    known = {normalize_name(k) for k in known_components}
                    for n in conv:
                        if normalize_name(n) not in known:
                            b.warnings.append(f"{doc.location('plugins', key)}: {key} names {n!r}, which no loaded "
                                              f"plugin registers{did_you_mean(n, known_components)}")
                continue
            if not isinstance(value, dict):
                raise _unknown_key(doc, key, ("plugins",), ("enable", "disable", "strict"))
            # [plugins.input-slices] configures plugin input_slices: `key` locates the table in the file,
            # `plugin` is the name the plugin registered
            plugin = next((k for k in (*plugin_options, *sorted(installed))
                           if normalize_name(k) == normalize_name(key)), key)
            declared = {o.name: o for o in plugin_options.get(plugin, [])}
            if plugin not in installed and plugin not in plugin_options:
                why = pm.why_not_loaded(key) if pm is not None else None
                said = f"which {why}; ignored" if why else f"which is not installed; ignored{did_you_mean(key, installed)}"
                b.warnings.append(f"{doc.location('plugins', key)}: {doc.table_name('plugins', key)} configures "
                                  f"plugin {key!r}, {said}")
                continue
            for okey, oval in value.items():
                if okey not in declared:
                    if not declared:
                        raise doc.error(f"unknown key {okey!r} in {doc.table_name('plugins', key)}: plugin {key!r} "
                                        f"declares no options", "plugins", key, okey)
                    raise _unknown_key(doc, okey, ("plugins", key), tuple(declared))
                o = declared[okey]
                ok, conv = check_value(oval, o.type)
                if not ok:
                    raise _wrong_type(doc, ("plugins", key, okey), type_name(o.type), oval)
                if o.choices is not None and conv not in o.choices:
                    raise doc.error(f"{okey!r} in {doc.table_name('plugins', key)}: expected one of "
                                    f"{', '.join(map(str, o.choices))}, got {oval!r}", "plugins", key, okey)
                settings.setdefault(plugin, {})[okey] = conv
                b.set(f"plugins.{plugin}.{okey}", conv, _file_source(doc, "plugins", key, okey))
    both = sorted({n for n in lists["enable"] if normalize_name(n) in set(map(normalize_name, lists["disable"]))})
    if both and doc is not None:
        raise doc.error(f"{', '.join(map(repr, both))} both enabled and disabled in {doc.table_name('plugins')}",
                        "plugins", "disable")
    plugins = PluginsOptions(enable=lists["enable"], disable=lists["disable"], settings=settings,
                             strict=strict_plugins)

    if strict and b.warnings:
        raise ConfigError(f"{b.warnings[0]} (strict: warnings are errors)")
    return ResolvedConfig(
        debug_options=debug_options, device=device, pipeline=pipeline, plugins=plugins,
        values=b.values, sources=b.sources, help=b.help,
        config_file=doc.path if doc is not None else None, warnings=tuple(b.warnings), verify=verify,
    )


def read_plugins_table(config_path: str | Path | None = None, cwd: str | Path | None = None) -> PluginsOptions:
    """``[plugins] enable``, ``disable`` and ``strict`` of the file :func:`load_config` would read, before any
    plugin is loaded (so ``disable`` can keep a plugin from being imported at all). Only those three keys are
    checked here; :func:`load_config` checks the rest once the plugins are in.

    Raises:
        ConfigError: the file is missing or not TOML, or one of the three keys has the wrong type (``PATH:LINE``).
    """
    doc, _ = _read_config_file(config_path, cwd)
    if doc is None:
        return PluginsOptions()
    table = doc.data.get("plugins")
    if not isinstance(table, dict):
        return PluginsOptions()
    lists = {}
    for key in ("enable", "disable"):
        ok, conv = check_value(table.get(key, []), list[str])
        if not ok:
            raise _wrong_type(doc, ("plugins", key), "list[str]", table[key])
        lists[key] = conv
    strict = table.get("strict", False)
    if not isinstance(strict, bool):
        raise _wrong_type(doc, ("plugins", "strict"), "bool", strict)
    return PluginsOptions(enable=lists["enable"], disable=lists["disable"], strict=strict)


def _pass_table(doc: TomlDocument, pname: str, table: dict[str, Any],
                declarations: Mapping[str, list[ConfigOption]] | None) -> dict[str, Any]:
    """``[pipeline.options.<pname>]`` checked against the keys the pass declares (``HloPass.options``)."""
    if declarations is None or pname not in declarations:
        return dict(table)
    declared = {o.name: o for o in declarations[pname]}
    where = ("pipeline", "options", pname)
    out = {}
    for key, value in table.items():
        if key not in declared:
            if not declared:
                raise doc.error(f"unknown key {key!r} in {doc.table_name(*where)}: pass {pname!r} declares no "
                                "options", *where, key)
            raise _unknown_key(doc, key, where, tuple(declared))
        o = declared[key]
        ok, conv = check_value(value, o.type)
        if not ok:
            raise _wrong_type(doc, (*where, key), type_name(o.type), value)
        if o.choices is not None and conv not in o.choices:
            raise doc.error(f"{key!r} in {doc.table_name(*where)}: expected one of "
                            f"{', '.join(map(str, o.choices))}, got {value!r}", *where, key)
        out[key] = conv
    return out


def _check_passes(doc: TomlDocument, names: list[str], known: set[str] | None,
                  key_path: tuple[str, ...] = ("pipeline", "passes"), quarantined: str = "",
                  warnings: list[str] | None = None) -> list[str]:
    """The registered pass each name means (compared as plugin names are: ``dot_bf16`` is ``dot-bf16``).

    An unknown name is an error (``PATH:LINE``, did-you-mean, the known passes), except while a plugin is
    quarantined: its passes never registered, so the name is kept, a warning says which plugins are missing
    and why, and only running the pipeline fails (so ``fusegen plugins`` and every command on fused input
    still work)."""
    if known is None:
        return list(names)
    by_key = {normalize_name(k): k for k in known}
    out = []
    for n in names:
        hit = n if n in known else by_key.get(normalize_name(n))
        if hit is not None:
            out.append(hit)
            continue
        listed = ", ".join(sorted(known)) if known else "(none registered)"
        msg = f"unknown pass {n!r} in {doc.table_name('pipeline')}{did_you_mean(n, known)}; known passes: {listed}"
        if quarantined and warnings is not None:
            warnings.append(f"{doc.location(*key_path)}: {msg}{quarantined}")
            out.append(n)
            continue
        raise doc.error(msg, *key_path)
    return out
