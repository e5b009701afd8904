"""The one context object every plugin callable receives (:class:`PluginContext`).

fusegen hands a :class:`PluginContext` to each callable a plugin registers: kind matchers
(``match(analysis, context)``, when the function takes a second argument), emitter factories
(``create(analysis, context)``), passes (``options.context`` of :class:`fusegen.passes.pipeline.PassOptions`),
execution backends (``execute(instruction, operands, context)``) and codegen backends (the ``context``
attribute of each :class:`fusegen.codegen_backend.CodegenBackend`, set before the autotuner asks it).
Built by :meth:`fusegen.plugin_manager.PluginManager.context_for`.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs


@attrs.frozen
class PluginContext:
    """What one plugin is told about the command it runs in.

    Attributes:
        plugin: the plugin's name (its entry-point name), the ``<name>`` of ``[plugins.<name>]``.
        device: the target :class:`fusegen.device.DeviceDescription` (``--device``, ``[device] name``; H200
            by default), or None where no device is known yet.
        settings: the plugin's own typed ``[plugins.<name>]`` keys (those it declares through
            ``fusegen_config_options``), defaults filled in, from the file ``--config FILE`` names or the
            closest ``fusegen.toml``; empty for a plugin that declares none.
        config: the whole resolved configuration (:class:`fusegen.config.loader.ResolvedConfig`), or None
            when fusegen runs without one (a library call that loaded none).
        executor: for execution backends, the running :class:`fusegen.runtime.executor.Executor`; else None.
    """

    plugin: str = ""
    device: Any = None
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    config: Any = None
    executor: Any = attrs.field(default=None, eq=False, repr=False)

    @property
    def debug_options(self) -> Any:
        """The XLA debug options in force (:class:`fusegen.config.options.DebugOptions`; XLA's defaults
        without a configuration)."""
        if self.config is not None:
            return self.config.debug_options
        from fusegen.config.options import DebugOptions

        return DebugOptions()

    def setting(self, key: str, default: Any = None) -> Any:
        """One of :attr:`settings` (``default`` when the plugin declares no such key)."""
        return self.settings.get(key, default)
