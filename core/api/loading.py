"""Loading modules and resolving what a call runs with (configuration, device, plugins, pipeline).

:func:`load` / :func:`load_all` read HLO files or text; :func:`session` resolves a call's configuration, device
and plugin manager as the CLI does; :func:`prepare` runs the pipeline on modules that are not fused yet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import attrs

ModuleLike = Any  # fusegen.hlo.ir.Module | list[Module] | str (path or HLO text) | pathlib.Path | Captured


class LoadError(ValueError):
    """``load`` got a path that cannot be read as text (the message names it)."""


# ------------------------------------------------------------------------------------------------ loading
def _looks_like_text(source: str) -> bool:
    return "\n" in source or source.lstrip().startswith("HloModule")


def load_all(source: str | Path, *, filename: str | None = None) -> list:
    """Every module of an HLO file or text (XLA's tests separate several with ``// -----``).

    Args:
        source: a path (``str`` or ``Path``), or HLO text (a string holding a newline or starting with
            ``HloModule``).
        filename: what error messages call text (default ``<text>``).

    Raises:
        LoadError: the path cannot be read.
        fusegen.hlo.errors.HloParseError: the text does not parse (``FILE:LINE:COL: error: ...``).
    """
    from fusegen.hlo.parser import parse_modules

    if isinstance(source, str) and _looks_like_text(source):
        return parse_modules(source, filename=filename or "<text>")
    path = Path(source)
    try:
        text = path.read_text()
    except OSError as e:
        raise LoadError(f"{path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise LoadError(f"{path}: not a text file ({e.reason})") from None
    return parse_modules(text, filename=str(path))


def load(source: str | Path, *, filename: str | None = None):
    """The module of an HLO file or text (:func:`load_all`; a file of several modules gives the first).

    Returns:
        fusegen.hlo.ir.Module
    """
    return load_all(source, filename=filename)[0]


def as_modules(module: ModuleLike) -> list:
    """``module`` as a list of Modules (a path or HLO text is loaded: :func:`load_all`; a
    :class:`~fusegen.jax_capture.Captured` gives its module).

    Raises:
        TypeError: anything else (a JAX function or ``jax.stages.Lowered``: the message names
            ``fusegen.capture``), before any work.
    """
    from fusegen.hlo.ir import Module

    def one(item: Any) -> list:
        captured = getattr(item, "__fusegen_captured__", None)
        if captured is not None:  # fusegen.capture's result
            return [captured.module]
        if isinstance(item, (str, Path)):
            return load_all(item)
        if isinstance(item, Module):
            return [item]
        what = type(item).__name__
        hint = "; for a JAX function: fusegen.capture(fn, *args) compiles it as XLA:GPU does" \
            if callable(item) or type(item).__module__.startswith("jax") else ""
        raise TypeError(f"expected a path, HLO text, a fusegen.hlo.ir.Module or fusegen.capture's result, got "
                        f"{what}{hint}")

    if isinstance(module, (list, tuple)):
        return [m for item in module for m in one(item)]
    return one(module)


# ----------------------------------------------------------------------------------- config and devices
@attrs.frozen
class Session:
    """What a call runs with: the resolved configuration, the device and the plugin manager."""

    config: Any  # fusegen.config.loader.ResolvedConfig
    device: Any  # fusegen.device.DeviceDescription
    pm: Any  # fusegen.plugin_manager.PluginManager


def session(config: Any = None, device: Any = None, xla_flags: Sequence[str] = (), pm: Any = None) -> Session:
    """Resolve configuration (a ``fusegen.toml`` path, a ``ResolvedConfig``, or None: searched from the
    working directory as the CLI does, with ``XLA_FLAGS``), ``xla_flags`` (``["name=value"]``), the device (a
    preset name, a ``DeviceDescription``, or None: ``[device] name``, else h200) and the plugin manager (default:
    the process-wide one; a configuration with ``[plugins] enable/disable`` gets a manager of its own, so that
    the selection of one call does not hold for the next).

    Raises:
        fusegen.config.toml.ConfigError, fusegen.plugin_manager.PluginError (also: a plugin was quarantined
        and ``FUSEGEN_STRICT_PLUGINS`` or ``[plugins] strict`` asks for strict mode), ValueError (unknown device).
    """
    from fusegen.config.loader import ResolvedConfig, load_config, read_plugins_table
    from fusegen.device import get_device
    from fusegen.plugin_manager import PluginError, PluginManager, default_plugin_manager, strict_from_env

    opts = config.plugins if isinstance(config, ResolvedConfig) else read_plugins_table(config)
    if pm is None:  # a call's [plugins] enable/disable hold for that call only: never applied to the shared one
        pm = PluginManager(config=opts, lazy=True) if (opts.enable or opts.disable) else default_plugin_manager()
    cfg = config if isinstance(config, ResolvedConfig) else load_config(
        config_path=config, cli_flags=list(xla_flags or ()), pm=pm)
    pm.apply_config(cfg)
    lines = pm.quarantine_lines()
    if lines and (strict_from_env() or cfg.plugins.strict):  # the CLI's exit 2 in strict mode
        raise PluginError(next(iter(pm.broken)), lines[0].split(" ", 2)[2] + " (strict plugins: "
                          "FUSEGEN_STRICT_PLUGINS or [plugins] strict)")
    if device is None or isinstance(device, str):
        name = device or (cfg.device.name if getattr(cfg, "device", None) is not None else None) or "h200"
        device = get_device(name)
    pm.set_context(config=cfg, device=device)  # what every plugin callable's PluginContext says
    return Session(cfg, device, pm)


def prepare(modules: list, s: Session, passes: Sequence[str] | None = None) -> list:
    """Run the pipeline (``passes``, else ``[pipeline] passes``, else the default one; ``[pipeline.options]``)
    on the modules that are not fused yet, in place; per-module pipeline results (``None`` where a module came
    fused). Every pass's result is verified; with ``[pipeline] verify = true`` its outputs are compared too
    (:func:`fusegen.passes.pipeline.run_pipeline`). Then ``[pipeline] default_matmul_precision`` (``highest``:
    IEEE f32 dots, no tf32) is written into every ``DEFAULT`` dot
    (:func:`fusegen.hlo.dot_numerics.apply_default_matmul_precision`).

    Raises:
        fusegen.passes.pipeline.PassError (a :class:`fusegen.passes.pass_checks.PassCheckError` for a pass that
        broke the module), fusegen.plugin_manager.PluginError.
    """
    from fusegen.hlo.dot_numerics import apply_default_matmul_precision
    from fusegen.passes.pipeline import optimize_if_needed

    pipeline = getattr(s.config, "pipeline", None)
    names = list(passes) if passes is not None else (list(pipeline.passes) if pipeline and pipeline.passes else None)
    out = [optimize_if_needed(m, pm=s.pm, debug_options=s.config.debug_options, device=s.device, passes=names,
                              pass_options_by_name=pipeline.options if pipeline else None,
                              check_values=bool(getattr(pipeline, "verify", False))) for m in modules]
    for m in modules:  # JAX's jax_default_matmul_precision: what the kernels and the reference both see
        apply_default_matmul_precision(m, getattr(pipeline, "default_matmul_precision", None))
    return out
