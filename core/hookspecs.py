"""fusegen's hook specifications (pluggy project name ``fusegen``).

Every hook here is a *registration* hook: each plugin returns descriptors (:mod:`fusegen.registry`),
fusegen collects the lists from all plugins, orders them by their explicit ``rank`` and then walks
them. Ranks, not pluggy's registration order, decide precedence, so a third-party plugin can slot a
question or emitter in between two built-ins without ``tryfirst``/``trylast``.

A plugin is any module (or object) with functions named like these hooks, marked with
``@fusegen.hookimpl``, and registered through an entry point in group ``fusegen.emitters``,
``fusegen.backends`` or ``fusegen.plugins``.

Registration hooks are called once, when the plugin loads (:mod:`fusegen.plugin_manager`): one that raises
or returns the wrong type, or a descriptor taking a name another plugin registered (without ``replaces=``),
quarantines the plugin (left out, named in one stderr line) instead of failing the command. Every callable
a descriptor carries is handed the plugin's :class:`fusegen.plugin_context.PluginContext`.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("fusegen")


@hookspec
def fusegen_fusion_kind_matchers():
    """Contribute dispatch questions.

    Called once when the plugin manager builds its registries; every plugin's list is collected.

    Returns:
        list[fusegen.registry.KindMatcher]: ranked questions. During dispatch fusegen asks them in
        ascending ``rank``; it **stops at the first non-None result** (a kind name such as
        ``"kReduction"``). The result becomes the fusion's kind, and ``KindMatcher.name`` its
        ``decided_by``.
    """


@hookspec
def fusegen_emitter_factories():
    """Contribute emitter factories, one or more per fusion kind.

    Returns:
        list[fusegen.registry.EmitterFactory]: for a fusion of kind K, factories whose ``kind == K``
        are tried in ascending ``rank``; each may decline by returning ``None``, and fusegen **stops at
        the first non-None emitter**. No factory for a kind (or all declined) means the fusion runs on
        an execution backend (the host backend in the end) and is reported as such.
    """


@hookspec
def fusegen_execution_backends():
    """Contribute execution backends for non-fusion instructions and fusions without an emitter.

    Returns:
        list[fusegen.registry.ExecutionBackend]: tried in ascending ``rank``; the first whose
        ``can_execute(instruction)`` is true runs the instruction.
    """


@hookspec
def fusegen_passes():
    """Contribute module passes, referred to by name from pipelines.

    Returns:
        list[fusegen.registry.HloPass]: pass names are owned (unique across plugins; ``replaces=`` takes
        one over). ``HloPass.options`` declares the keys ``[pipeline.options.<name>]`` may set;
        ``HloPass.error_budget`` how far the rewrite may move the module's outputs (0: exact). After every
        pass the module is verified and its entry signature compared (:mod:`fusegen.passes.pass_checks`);
        ``fusegen.passes.kit`` has the editing helpers.
    """


@hookspec
def fusegen_config_options():
    """Declare this plugin's configuration keys, read from ``[plugins.<plugin name>]`` in fusegen.toml
    (or ``[tool.fusegen.plugins.<plugin name>]`` in pyproject.toml).

    Called once when the plugin loads (a default that does not fit its declared type quarantines the
    plugin); every plugin's list is collected. Keys are validated against these declarations: an undeclared key is an error with
    file:line and a did-you-mean, a value of the wrong type names the expected type.

    Returns:
        list[fusegen.config.options.ConfigOption]: ``ConfigOption(name, type, default, help, choices=None)``;
        ``type`` is bool, int, float, str, list, list[str]/list[int]..., or dict. The resolved values
        (defaults filled in) are ``ResolvedConfig.plugin_settings(<plugin name>)``.
    """


@hookspec
def fusegen_codegen_backends():
    """Contribute autotunable codegen backends (XLA's ``CodegenBackend``: Triton, cuBLASLt, cuDNN, ...).

    Returns:
        list[fusegen.codegen_backend.CodegenBackend]: every registered backend is asked for the
        supported configs of each tunable instruction; the autotuner enumerates them all (selectable
        with ``xla_gpu_experimental_autotune_backends``'s ``+name,-name`` syntax). Order matters for
        "first config" (level 0): backends are ordered by ascending ``CodegenBackend.rank`` (XLA's CUDA
        order, ``factory_cuda.cc``: cuDNN 100, Triton 200, cuBLASLt 300, fission 400, native 500,
        block-level 600; host 1000), then plugin order. Backend names are owned: a plugin registering a
        taken one without ``replaces = "<name>"`` on the class is quarantined. fusegen sets each backend's
        ``context`` (:class:`fusegen.plugin_context.PluginContext`).

        The estimate hook is the method ``CodegenBackend.estimate_seconds(instr, config, device) -> float | None``:
        without the target GPU candidates are ranked by estimate; a backend's own estimate is used as is, ``None``
        falls back to ``fusegen.perf`` for a backend with ``modelled_by_fusegen = True``, else the config has no
        estimate and ranks after the estimated ones (or, when timing, is timed beside the cost model's top k,
        never instead of them). A backend with ``targets_gpu = False`` (the host) is never a candidate for a GPU
        device key.
    """


@hookspec
def fusegen_conformance_capabilities():
    """Declare what the conformance suite (``pytest -p fusegen.conformance --fusegen-plugin NAME``) may
    expect of this plugin; tests outside the declared capabilities are skipped with the reason.

    Called only by the conformance suite, and only on the plugin under test (other plugins' answers
    are ignored). A plugin may instead set a module attribute ``FUSEGEN_CONFORMANCE`` holding the same
    dict; the hook wins when both exist. A plugin that declares nothing gets capabilities inferred from
    what it registers (the kinds of its emitter factories, ``f32``, both devices).

    Returns:
        dict: keys (all optional)

        * ``"kinds"`` (list[str]): fusion kinds the plugin's factories (and matchers) serve, e.g.
          ``["kInputSlices"]``; every factory's kind must be listed.
        * ``"dtypes"`` (list[str]): HLO element types generated fusions may use (``"f32"``, ``"bf16"``...).
        * ``"devices"`` (list[str]): ``"cpu-interpreter"`` (outputs checked in Triton's interpreter)
          and/or ``"sm_90"`` (kernels compiled for Hopper; codegen backends configured for it).
        * ``"generators"`` (dict[str, str]): kind -> name of the suite's hypothesis fusion generator
          to use for it (default: the kind's own generator, see docs/plugins.md).
        * ``"tolerances"`` (dict[str, dict]): test-id pattern (``fnmatch``) -> ``{"rtol": float,
          "atol": float}`` replacing the per-dtype defaults of :mod:`fusegen.runtime.compare`.
        * ``"corpus"`` (list[str]): glob patterns under the corpus root of HLO files a backend plugin's
          codegen/execution backends are checked on.
    """


# -- conformance generators (asked only by the conformance suite, of the plugin under test) -----------
@hookspec
def fusegen_conformance_generators():
    """Contribute hypothesis fusion generators for the plugin's own kinds to the conformance suite.

    Called only by the conformance suite, and only on the plugin under test (other plugins' answers are
    ignored). For each declared kind ``K`` the suite uses the generator the ``generators`` capability names
    for ``K``, else this hook's generator named ``K``, else the suite's default for ``K``
    (:mod:`fusegen.conformance.generators`); a name this hook returns shadows a built-in generator of the
    same name for this plugin only.

    Returns:
        dict[str, Callable[[tuple[str, ...]], hypothesis.strategies.SearchStrategy[str]]]: generator name
        -> ``make(dtypes)``; ``dtypes`` are the plugin's declared element types, and the strategy draws the
        text of an HLO module whose entry root is one fusion meant to dispatch to the kind
        (``fusegen.conformance.generators.fusion_module`` writes that module around a fused body).
    """
