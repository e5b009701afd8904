"""Helpers for the backend/pass tests: a plugin manager with core's passes, fixture flags, running modules."""

from __future__ import annotations

import functools

import attrs

from fusegen.config.options import DebugOptions
from fusegen.device import get_device
from fusegen.plugin_manager import PluginManager


@functools.lru_cache(maxsize=1)
def plugin_manager() -> PluginManager:
    """The installed plugins plus core's pass plugin (``fusegen.passes``) in case it is not wired in yet."""
    from fusegen.passes import builtin

    pm = PluginManager()
    if "fusegen.passes" not in pm.infos:
        pm.register(builtin, "fusegen.passes", group="builtin", dist="fusegen")
    return pm


def debug(**overrides) -> DebugOptions:
    return attrs.evolve(DebugOptions(), **overrides)


def device(name: str = "h200", cc: tuple[int, int] | None = None):
    d = get_device(name)
    return attrs.evolve(d, compute_capability=cc) if cc is not None else d
