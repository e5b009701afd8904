"""Plugins that break while loading, one way each (objects named by ``module:attr`` entry points)."""

from fusegen.config.options import ConfigOption
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory


class RaisingHook:
    @hookimpl
    def fusegen_emitter_factories(self):
        raise RuntimeError("registry exploded")


class IllTyped:
    @hookimpl
    def fusegen_emitter_factories(self):
        return ["loop"]  # a name, not an EmitterFactory


class BadDefault:
    @hookimpl
    def fusegen_config_options(self):
        return [ConfigOption("threshold", int, "ten", "Elements.")]


class Collide:
    """Registers a factory under the name of fusegen's loop factory without saying it replaces it."""

    @hookimpl
    def fusegen_emitter_factories(self):
        return [EmitterFactory(name="loop", kind="kLoop", rank=1, create=lambda a, c=None: None)]


class TakesTheNameLoop:
    """An entry point named ``loop``: the plugin name fusegen's loop emitter owns."""

    @hookimpl
    def fusegen_emitter_factories(self):
        return [EmitterFactory(name="grabby_loop", kind="kLoop", rank=1, create=lambda a, c=None: None)]


raising_hook, ill_typed, bad_default = RaisingHook(), IllTyped(), BadDefault()
collide, takes_the_name_loop = Collide(), TakesTheNameLoop()
