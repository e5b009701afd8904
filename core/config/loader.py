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


@attrs.frozen
class _Registered:
    """What the tables are checked against: the names and keys the loaded plugins register (None: not checked)."""

    plugin_options: dict[str, list[ConfigOption]]  # plugin -> the keys of its [plugins.<name>] table
    installed: set[str]  # installed plugins; a [plugins.<name>] table of any other is a warning
    passes: set[str] | None  # pass names [pipeline] may use
    pass_declarations: Mapping[str, list[ConfigOption]] | None  # pass -> the keys of [pipeline.options.<pass>]
    components: set[str] | None  # names [plugins] enable/disable may use
    quarantined: str  # why passes may be missing (pm.quarantine_note()); "" when no plugin is quarantined
    pm: "PluginManager | None"  # says why a plugin is missing


def _registered(pm: "PluginManager | None", plugin_options: Mapping[str, list[ConfigOption]] | None,
                installed_plugins: set[str] | None, known_passes: set[str] | None,
                pass_declarations: Mapping[str, list[ConfigOption]] | None,
                known_components: set[str] | None) -> _Registered:
    """:func:`load_config`'s arguments of the same names, each that is None filled in from ``pm`` when given."""
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
    # why passes may be missing: quarantined plugins never registered theirs
    quarantined = pm.quarantine_note() if pm is not None and pm.broken else ""
    options = dict(plugin_options or {})
    installed = set(installed_plugins) if installed_plugins is not None else set(options)
    return _Registered(plugin_options=options, installed=installed, passes=known_passes,
                       pass_declarations=pass_declarations, components=known_components,
                       quarantined=quarantined, pm=pm)


def _check_top_level(doc: TomlDocument | None) -> None:
    """Every top-level key of the file names one of :data:`TABLES` and holds a table.

    Raises:
        ConfigError: an unknown top-level key, or one that is not a table.
    """
    if doc is None:
        return
    for key, value in doc.data.items():
        if key not in TABLES:
            raise _unknown_key(doc, key, (), TABLES)
        _table(doc, value, (key,))


def _file_table(doc: TomlDocument | None, name: str) -> dict[str, Any]:
    """Top-level table ``name`` of the file (checked by :func:`_check_top_level`); empty when absent or no file."""
    return doc.data.get(name, {}) if doc is not None else {}


def _bool_value(doc: TomlDocument, key_path: tuple[str, ...], value: Any) -> bool:
    """``value`` of the key at ``key_path``. Raises ConfigError: not a bool."""
    if not isinstance(value, bool):
        raise _wrong_type(doc, key_path, "bool", value)
    return value


def _str_list_value(doc: TomlDocument, key_path: tuple[str, ...], value: Any) -> list[str]:
    """``value`` of the key at ``key_path``. Raises ConfigError: not a list of strings."""
    ok, conv = check_value(value, list[str])
    if not ok:
        raise _wrong_type(doc, key_path, "list[str]", value)
    return conv


def _declared_value(doc: TomlDocument, where: tuple[str, ...], owner: str, key: str, value: Any,
                    declared: Mapping[str, ConfigOption]) -> Any:
    """``value`` of ``key`` in table ``where``, typed as the ConfigOption its ``owner`` (``"pass 'p'"``,
    ``"plugin 'p'"``) declares.

    Raises:
        ConfigError: an undeclared key (did-you-mean, or that the owner declares none), wrong type, or a value
            outside the declared choices.
    """
    if key not in declared:
        if not declared:
            raise doc.error(f"unknown key {key!r} in {doc.table_name(*where)}: {owner} declares no options",
                            *where, key)
        raise _unknown_key(doc, key, where, tuple(declared))
    o = declared[key]
    ok, conv = check_value(value, o.type)
    if not ok:
        raise _wrong_type(doc, (*where, key), type_name(o.type), value)
    if o.choices is not None and conv not in o.choices:
        raise doc.error(f"{key!r} in {doc.table_name(*where)}: expected one of "
                        f"{', '.join(map(str, o.choices))}, got {value!r}", *where, key)
    return conv


def _debug_option_value(doc: TomlDocument, key: str, value: Any) -> Any:
    """``value`` of ``[debug_options] key``, typed as the XLA flag of that name (a choice normalized).

    Raises:
        ConfigError: not an XLA flag fusegen knows (did-you-mean), wrong type, or not one of the flag's choices.
    """
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
    return conv


def _debug_options_table(doc: TomlDocument | None, b: _Builder) -> dict[str, Any]:
    """The defaults, then ``[debug_options]`` (keys named as the XLA flags they mirror): flag name -> value."""
    dbg: dict[str, Any] = {}
    for name, f in DEBUG_OPTION_FIELDS.items():
        b.set(f"debug_options.{name}", f.default, SOURCE_DEFAULT, f.metadata["help"])
        dbg[name] = f.default
    for key, value in _file_table(doc, "debug_options").items():
        dbg[key] = _debug_option_value(doc, key, value)
        b.set(f"debug_options.{key}", dbg[key], _file_source(doc, "debug_options", key))
    return dbg


def _xla_flags_env(env: Mapping[str, str], warnings: list[str]) -> dict[str, Any]:
    """The XLA flags ``env["XLA_FLAGS"]`` sets (flag name -> value); the flags it ignores go to ``warnings``.

    Raises:
        ConfigError: a bad value of a flag fusegen reads.
    """
    xla_env = env.get("XLA_FLAGS", "")
    if not xla_env.strip():
        return {}
    parsed = parse_xla_flags(xla_env)
    warnings.extend(parsed.warnings)
    return parsed.values


def _layer_flags(dbg: dict[str, Any], b: _Builder, flags: Mapping[str, Any], source: str) -> None:
    """``flags`` (XLA flag name -> value) over ``dbg``, each recorded as coming from ``source``."""
    for key, value in flags.items():
        dbg[key] = value
        b.set(f"debug_options.{key}", value, source)


def _device_table(doc: TomlDocument | None, b: _Builder) -> DeviceOptions:
    """``[device] name``, the device description preset (default :class:`DeviceOptions`'s).

    Raises:
        ConfigError: a key other than ``name``, a name that is not a string, or an unknown preset.
    """
    device_name = DeviceOptions().name
    b.set("device.name", device_name, SOURCE_DEFAULT, "Device description preset.")
    for key, value in _file_table(doc, "device").items():
        if key != "name":
            raise _unknown_key(doc, key, ("device",), ("name",))
        if not isinstance(value, str):
            raise _wrong_type(doc, ("device", "name"), "str", value)
        problem = _check_device(value)
        if problem:
            raise doc.error(f"{doc.table_name('device')} name: {problem}", "device", "name")
        device_name = value
        b.set("device.name", value, _file_source(doc, "device", "name"))
    return DeviceOptions(name=device_name)


def _verify_table(doc: TomlDocument | None, b: _Builder) -> VerifyOptions:
    """``[verify]``, read by :func:`fusegen.config.verify_options.parse_verify_table` (its errors name the file
    and line)."""
    verify = VerifyOptions()
    b.set("verify.rtol", verify.rtol, SOURCE_DEFAULT, "Conditioning factor: a kernel output may be this many "
          "times further from the f64 oracle than the reference is (drift, not mismatch).")
    b.set("verify.atol", dict(verify.floors), SOURCE_DEFAULT, "Per-dtype floor, a fraction of max(1, max|value|).")
    b.set("verify.allow_vacuous", verify.allow_vacuous, SOURCE_DEFAULT, "An output NaN/inf everywhere in kernel "
          "and reference alike is drift, not vacuous.")
    b.set("verify.xla_allow_excess_precision", verify.xla_allow_excess_precision, SOURCE_DEFAULT,
          "--expected: an answer one bf16 rounding away (a convert pair XLA:GPU drops) is drift where the kernel "
          "is the nearer to f64.")
    if doc is not None and "verify" in doc.data:
        verify, seen = parse_verify_table(_table(doc, doc.data["verify"], ("verify",)), doc.error)
        for key, value in seen.items():
            b.set(key, value, _file_source(doc, *key.split(".")))
    return verify


def _matmul_precision_value(doc: TomlDocument, value: Any) -> str:
    """``[pipeline] default_matmul_precision`` (JAX's ``jax_default_matmul_precision``), lower-cased.

    Raises:
        ConfigError: not one of :data:`fusegen.hlo.dot_numerics.MATMUL_PRECISIONS`.
    """
    from fusegen.hlo.dot_numerics import MATMUL_PRECISIONS

    if not isinstance(value, str) or value.strip().lower() not in MATMUL_PRECISIONS:
        raise doc.error(f"'default_matmul_precision' in [pipeline]: expected one of "
                        f"{', '.join(MATMUL_PRECISIONS)}, got {value!r}", "pipeline", "default_matmul_precision")
    return value.strip().lower()


def _pipeline_value(doc: TomlDocument, key: str, value: Any, reg: _Registered, warnings: list[str]) -> Any:
    """``value`` of ``[pipeline] key`` for ``passes`` (registered pass names), ``verify`` or
    ``default_matmul_precision``.

    Raises:
        ConfigError: any other key (``options`` is a table of its own), wrong type, unknown pass or precision.
    """
    if key == "default_matmul_precision":
        return _matmul_precision_value(doc, value)
    if key == "verify":
        return _bool_value(doc, ("pipeline", "verify"), value)
    if key == "passes":
        names = _str_list_value(doc, ("pipeline", "passes"), value)
        return _check_passes(doc, names, reg.passes, quarantined=reg.quarantined, warnings=warnings)
    raise _unknown_key(doc, key, ("pipeline",), ("passes", "options", "verify", "default_matmul_precision"))


def _pipeline_options_table(doc: TomlDocument, value: Any, reg: _Registered, b: _Builder) -> dict[str, dict[str, Any]]:
    """``[pipeline.options]``: registered pass name -> its ``[pipeline.options.<pass>]`` values.

    Raises:
        ConfigError: not a table of tables, an unknown pass, or a key the pass does not declare (:func:`_pass_table`).
    """
    pass_options: dict[str, dict[str, Any]] = {}
    for pname, popts in _table(doc, value, ("pipeline", "options")).items():
        pname = _check_passes(doc, [pname], reg.passes, ("pipeline", "options", pname),
                              quarantined=reg.quarantined, warnings=b.warnings)[0]
        popts = _table(doc, popts, ("pipeline", "options", pname))
        pass_options[pname] = _pass_table(doc, pname, popts, reg.pass_declarations)
        for okey, oval in pass_options[pname].items():
            b.set(f"pipeline.options.{pname}.{okey}", oval,
                  _file_source(doc, "pipeline", "options", pname, okey), f"Option of pass {pname!r}.")
    return pass_options


def _pipeline_table(doc: TomlDocument | None, b: _Builder, reg: _Registered) -> PipelineOptions:
    """``[pipeline]`` over the defaults (the default pipeline, no pass options, no verify, ``"default"``
    precision)."""
    b.set("pipeline.passes", None, SOURCE_DEFAULT, "Ordered pass names; unset means the default pipeline.")
    b.set("pipeline.verify", False, SOURCE_DEFAULT, PipelineOptions.__attrs_attrs__.verify.metadata["help"])
    b.set("pipeline.default_matmul_precision", "default", SOURCE_DEFAULT,
          PipelineOptions.__attrs_attrs__.default_matmul_precision.metadata["help"])
    fields: dict[str, Any] = {"passes": None, "options": {}, "verify": False, "default_matmul_precision": "default"}
    for key, value in _file_table(doc, "pipeline").items():
        if key == "options":
            fields["options"] = _pipeline_options_table(doc, value, reg, b)
            continue
        fields[key] = _pipeline_value(doc, key, value, reg, b.warnings)
        b.set(f"pipeline.{key}", fields[key], _file_source(doc, "pipeline", key))
    return PipelineOptions(**fields)


def _plugins_defaults(plugin_options: Mapping[str, list[ConfigOption]], b: _Builder) -> dict[str, dict[str, Any]]:
    """Records the defaults of ``[plugins]``: every plugin's declared keys, then enable, disable and strict;
    returns plugin -> {key: default}."""
    settings: dict[str, dict[str, Any]] = {}
    for plugin, opts in sorted(plugin_options.items()):
        settings[plugin] = {}
        for o in opts:
            settings[plugin][o.name] = o.default
            b.set(f"plugins.{plugin}.{o.name}", o.default, SOURCE_DEFAULT, o.help)
    b.set("plugins.enable", [], SOURCE_DEFAULT, "Plugins, matchers, emitters or backends to enable.")
    b.set("plugins.disable", [], SOURCE_DEFAULT, "Plugins, matchers, emitters or backends to disable.")
    b.set("plugins.strict", False, SOURCE_DEFAULT, "A quarantined plugin fails the command (exit 2).")
    return settings


def _component_list(doc: TomlDocument, key: str, value: Any, components: set[str] | None,
                    warnings: list[str]) -> list[str]:
    """``[plugins] enable`` or ``disable`` (``key``): plugin, matcher, emitter or backend names; a name no loaded
    plugin registers (compared normalized) is a warning.

    Raises:
        ConfigError: not a list of strings.
    """
    conv = _str_list_value(doc, ("plugins", key), value)
    if components is not None:
        known = {normalize_name(k) for k in components}
        for n in conv:
            if normalize_name(n) not in known:
                warnings.append(f"{doc.location('plugins', key)}: {key} names {n!r}, which no loaded "
                                f"plugin registers{did_you_mean(n, components)}")
    return conv


def _absent_plugin_warning(doc: TomlDocument, key: str, reg: _Registered) -> str:
    """The warning for a ``[plugins.<key>]`` table of a plugin that is not loaded (why, as ``reg.pm`` says)."""
    why = reg.pm.why_not_loaded(key) if reg.pm is not None else None
    said = f"which {why}; ignored" if why else f"which is not installed; ignored{did_you_mean(key, reg.installed)}"
    return f"{doc.location('plugins', key)}: {doc.table_name('plugins', key)} configures plugin {key!r}, {said}"


def _plugin_settings_table(doc: TomlDocument, key: str, value: dict[str, Any], reg: _Registered,
                           settings: dict[str, dict[str, Any]], b: _Builder) -> None:
    """``[plugins.<key>]`` into ``settings[plugin]``, typed by the keys the plugin declares; the table of a plugin
    that is not installed is ignored with a warning.

    Raises:
        ConfigError: a key the plugin does not declare, wrong type, or a value outside the declared choices.
    """
    # [plugins.input-slices] configures plugin input_slices: `key` locates the table in the file,
    # `plugin` is the name the plugin registered
    plugin = next((k for k in (*reg.plugin_options, *sorted(reg.installed))
                   if normalize_name(k) == normalize_name(key)), key)
    if plugin not in reg.installed and plugin not in reg.plugin_options:
        b.warnings.append(_absent_plugin_warning(doc, key, reg))
        return
    declared = {o.name: o for o in reg.plugin_options.get(plugin, [])}
    for okey, oval in value.items():
        conv = _declared_value(doc, ("plugins", key), f"plugin {key!r}", okey, oval, declared)
        settings.setdefault(plugin, {})[okey] = conv
        b.set(f"plugins.{plugin}.{okey}", conv, _file_source(doc, "plugins", key, okey))


def _check_enable_disable(doc: TomlDocument | None, enable: list[str], disable: list[str]) -> None:
    """Raises ConfigError: a name both in ``[plugins] enable`` and ``disable`` (compared normalized)."""
    both = sorted({n for n in enable if normalize_name(n) in set(map(normalize_name, disable))})
    if both and doc is not None:
        raise doc.error(f"{', '.join(map(repr, both))} both enabled and disabled in {doc.table_name('plugins')}",
                        "plugins", "disable")


def _plugins_table(doc: TomlDocument | None, b: _Builder, reg: _Registered) -> PluginsOptions:
    """``[plugins]`` over the defaults: ``enable``, ``disable``, ``strict`` and one ``[plugins.<name>]`` table per
    plugin.

    Raises:
        ConfigError: an unknown key that is not a table, wrong type, a bad plugin key, a name both enabled and
            disabled.
    """
    settings = _plugins_defaults(reg.plugin_options, b)
    lists: dict[str, list[str]] = {"enable": [], "disable": []}
    strict = False
    for key, value in _file_table(doc, "plugins").items():
        if key == "strict":
            strict = _bool_value(doc, ("plugins", "strict"), value)
            b.set("plugins.strict", value, _file_source(doc, "plugins", "strict"))
        elif key in lists:
            lists[key] = _component_list(doc, key, value, reg.components, b.warnings)
            b.set(f"plugins.{key}", lists[key], _file_source(doc, "plugins", key))
        elif isinstance(value, dict):
            _plugin_settings_table(doc, key, value, reg, settings, b)
        else:
            raise _unknown_key(doc, key, ("plugins",), ("enable", "disable", "strict"))
    _check_enable_disable(doc, lists["enable"], lists["disable"])
    return PluginsOptions(enable=lists["enable"], disable=lists["disable"], settings=settings, strict=strict)


def _fail_on_warnings(strict: bool, warnings: list[str]) -> None:
    """Raises ConfigError: with ``strict``, the first warning."""
    if strict and warnings:
        raise ConfigError(f"{warnings[0]} (strict: warnings are errors)")


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
    reg = _registered(pm, plugin_options, installed_plugins, known_passes, pass_declarations, known_components)
    b = _Builder()
    doc, warns = _read_config_file(config_path, cwd)
    b.warnings.extend(warns)
    _check_top_level(doc)
    dbg = _debug_options_table(doc, b)
    _layer_flags(dbg, b, _xla_flags_env(env, b.warnings), SOURCE_ENV)
    _layer_flags(dbg, b, parse_cli_flags(cli_flags), SOURCE_CLI)
    debug_options = DebugOptions(**dbg)
    device = _device_table(doc, b)
    verify = _verify_table(doc, b)
    pipeline = _pipeline_table(doc, b, reg)
    plugins = _plugins_table(doc, b, reg)
    _fail_on_warnings(strict, b.warnings)
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
    return {key: _declared_value(doc, where, f"pass {pname!r}", key, value, declared) for key, value in table.items()}


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
