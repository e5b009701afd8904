"""The plugin system: entry-point discovery, ranked registries, tracing, and errors naming plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fusegen.plugin_manager import PluginError, PluginManager, hookimpl
from fusegen.registry import EmitterFactory, KindMatcher


def test_builtin_plugins_come_from_entry_points():
    pm = PluginManager()
    groups = {name: info.group for name, info in pm.infos.items()}
    assert groups["loop"] == "fusegen.emitters"
    assert groups["memcpy"] == "fusegen.emitters"
    assert groups["in_place_dus"] == "fusegen.emitters"
    assert groups["host"] == "fusegen.backends"
    assert pm.infos["loop"].distribution == "fusegen"
    assert pm.infos["loop"].version == "0.1.0"


def test_matchers_are_asked_in_rank_order_stamp_first_loop_last():
    pm = PluginManager()
    ranks = [m.rank for m in pm.kind_matchers()]
    assert ranks == sorted(ranks)
    names = [m.name for m in pm.kind_matchers()]
    assert names[0] == "backend-config-stamp"
    assert names[-1] == "loop"


def test_loop_arm_tries_memcpy_then_in_place_dus_then_loop():
    pm = PluginManager()
    assert [f.name for f in pm.emitter_factories("kLoop")] == ["memcpy", "in_place_dus", "loop"]


class _Between:
    """A third-party question slotted between the reduction and transpose questions."""

    @hookimpl
    def fusegen_fusion_kind_matchers(self):
        return [KindMatcher(name="third-party", rank=150, match=lambda a: None)]


def test_third_party_matcher_slots_in_between_two_builtins():
    pm = PluginManager(extra_plugins=[("between", _Between())])
    names = [m.name for m in pm.kind_matchers()]
    i = names.index("third-party")
    assert names[i - 1] == "real-reduction-hero" and names[i + 1] == "consistent-tiled-transpose"
    assert pm.kind_matchers()[i].plugin == "between"


class _Raises:
    @hookimpl
    def fusegen_emitter_factories(self):
        raise RuntimeError("boom")


def test_a_plugin_that_raises_is_quarantined_by_name():
    pm = PluginManager(extra_plugins=[("exploding-plugin", _Raises())])
    assert pm.broken["exploding-plugin"].reason == "raised in fusegen_emitter_factories: RuntimeError: boom"
    assert "exploding-plugin" not in pm.infos
    assert [f.name for f in pm.emitter_factories("kLoop")] == ["memcpy", "in_place_dus", "loop"]  # the rest loads


class _Wrong:
    @hookimpl
    def fusegen_emitter_factories(self):
        return ["not a factory"]


def test_a_plugin_returning_the_wrong_type_is_quarantined_by_name():
    pm = PluginManager(extra_plugins=[("wrong-plugin", _Wrong())])
    assert pm.broken["wrong-plugin"].reason == "returned str from fusegen_emitter_factories, expected EmitterFactory"
    (line,) = pm.quarantine_lines()
    assert line.startswith("plugin 'wrong-plugin' (registered in-process; distribution ? ?) quarantined: returned str")
    with pytest.raises(PluginError, match="plugin 'wrong-plugin' was refused: returned str"):
        PluginManager().register(_Wrong(), "wrong-plugin")


def test_call_plugin_wraps_exceptions_with_the_plugin_name():
    pm = PluginManager()

    def bad(x):
        raise ValueError("nope")

    with pytest.raises(PluginError, match="plugin 'p' raised in thing: ValueError: nope"):
        pm.call_plugin("p", "thing", bad, 1)


def test_plugins_command_json_lists_versions_and_hooks():
    out = subprocess.run([sys.executable, "-m", "fusegen.cli", "plugins", "--json"], capture_output=True, text=True,
                         check=True)
    rows = {r["name"]: r for r in json.loads(out.stdout)["plugins"]}
    assert rows["loop"]["hooks"] == ["fusegen_emitter_factories"]
    assert rows["loop"]["version"] == "0.1.0"
    assert "emitter loop:kLoop@100" in rows["loop"]["provides"]
    assert "backend host@1000" in rows["host"]["provides"]
    assert rows["fusegen.matchers"]["hooks"] == ["fusegen_fusion_kind_matchers"]


def test_trace_prints_every_hook_call(tmp_path):
    env = {**__import__("os").environ, "FUSEGEN_TRACE_PLUGINS": "1"}
    out = subprocess.run([sys.executable, "-m", "fusegen.cli", "plugins", "--json"], capture_output=True, text=True,
                         env=env, check=True)
    assert "[fusegen-trace] fusegen_emitter_factories() from loop -> [EmitterFactory(name='loop'" in out.stderr


@pytest.mark.parametrize("spelling", ["in_place_dus", "in-place-dus", "IN_PLACE-Dus", "in.place__dus"])
def test_plugin_names_compare_as_pip_compares_distributions(spelling, monkeypatch):
    """``-``/``_``/``.`` runs and case do not matter (PEP 503), in every place a plugin is named."""
    from fusegen.conformance.target import Target
    from fusegen.config.options import PluginsOptions
    from fusegen.config.names import normalize_name

    assert normalize_name(spelling) == "in-place-dus"
    # FUSEGEN_LOAD_PLUGINS with autoload off
    with monkeypatch.context() as mp:
        mp.setenv("FUSEGEN_LOAD_PLUGINS", f"loop,{spelling}")
        pm = PluginManager(autoload=False)
        assert {"loop", "in_place_dus"} <= set(pm.infos) and "memcpy" not in pm.infos
        assert pm.lookup(spelling) == "in_place_dus"
    # [plugins] disable, at construction and applied later; a factory name too
    pm = PluginManager(autoload=False, config=PluginsOptions(enable=[spelling], disable=[]))
    assert "in_place_dus" in pm.infos
    pm = PluginManager(config=PluginsOptions(enable=[], disable=[spelling]))
    assert "in_place_dus" not in pm.infos and [f.name for f in pm.emitter_factories("kLoop")] == ["memcpy", "loop"]
    pm = PluginManager()
    pm.apply_config(PluginsOptions(enable=[], disable=[spelling.upper()]))
    assert "in_place_dus" not in pm.infos
    pm = PluginManager(config=PluginsOptions(enable=[], disable=["Real_Reduction.Hero"]))
    assert "real-reduction-hero" not in [m.name for m in pm.kind_matchers()]
    # --fusegen-plugin of the conformance suite
    assert Target(spelling).name == "in_place_dus"


_EXTRA = '''from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="grabby", kind="kLoop", rank=1, create=lambda a, c=None: None)]
'''


def _with_extra_plugin(tmp_path, **env: str) -> list[str]:
    """kLoop factory names a fresh process sees with a third-party ``grabby`` plugin installed on its path."""
    (tmp_path / "grabby.py").write_text(_EXTRA)
    dist = tmp_path / "grabby-1.0.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: grabby\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[fusegen.emitters]\ngrabby = grabby\n")
    code = "from fusegen.plugin_manager import PluginManager as P; print(*[f.name for f in P().emitter_factories('kLoop')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path), **env})
    return out.stdout.split()


def test_tests_see_only_builtin_plugins(tmp_path):
    """An installed third-party kLoop plugin (rank 1, ahead of memcpy) is invisible to fusegen's tests; a named
    plugin still loads; without the restriction it is first in the kLoop arm."""
    assert os.environ["FUSEGEN_AUTOLOAD_DISTRIBUTIONS"] == "fusegen"  # set by tests/conftest.py for every test
    assert _with_extra_plugin(tmp_path) == ["memcpy", "in_place_dus", "loop"]
    assert _with_extra_plugin(tmp_path, FUSEGEN_LOAD_PLUGINS="Grabby") == ["grabby", "memcpy", "in_place_dus", "loop"]
    assert _with_extra_plugin(tmp_path, FUSEGEN_AUTOLOAD_DISTRIBUTIONS="") == ["grabby", "memcpy", "in_place_dus",
                                                                                "loop"]


@pytest.mark.third_party_plugins
def test_third_party_marker_sees_every_installed_plugin():
    assert "FUSEGEN_AUTOLOAD_DISTRIBUTIONS" not in os.environ


class _ReplacesHost:
    """Takes over the execution backend named ``host`` under a name of its own, saying so."""

    @hookimpl
    def fusegen_execution_backends(self):
        from fusegen.registry import ExecutionBackend

        return [ExecutionBackend(name="my-host", rank=1000, can_execute=lambda i: True, execute=lambda i, o, c: None,
                                 replaces="host")]


def test_a_descriptor_may_replace_an_entry_of_another_name_when_it_says_so():
    pm = PluginManager(extra_plugins=[("mine", _ReplacesHost())])
    names = [b.name for b in pm.execution_backends()]
    assert "host" not in names and names[-1] == "my-host"
    assert pm.infos["mine"].replaces == ["backend host (host)"]
    assert "host" in pm.infos  # the plugin stays; only its backend went (its codegen backend `host` too stays)
    assert "host" in [b.name for b in pm.codegen_backends()]


def test_disable_names_one_thing_qualified_or_plugin_first():
    from fusegen.config.options import PluginsOptions

    def pm_off(*names):
        return PluginManager(config=PluginsOptions(enable=[], disable=list(names)))

    pm = pm_off("matcher:loop")  # the question, not the plugin
    assert "loop" not in [m.name for m in pm.kind_matchers()] and "loop" in pm.infos
    pm = pm_off("emitter:loop")  # the factory, not the plugin
    assert [f.name for f in pm.emitter_factories("kLoop")] == ["memcpy", "in_place_dus"] and "loop" in pm.infos
    pm = pm_off("loop")  # a plugin name is the plugin: the question `loop` stays
    assert "loop" not in pm.infos and "loop" in [m.name for m in pm.kind_matchers()]
    pm = pm_off("several-roots", "codegen:host")  # no plugin of that name: the first registry holding it
    assert "several-roots" not in [m.name for m in pm.kind_matchers()]
    assert "host" not in [b.name for b in pm.codegen_backends()] and "host" in [b.name for b in pm.execution_backends()]


def test_the_conformance_suite_names_why_a_plugin_under_test_was_quarantined():
    from fusegen.conformance.target import Target

    pm = PluginManager(extra_plugins=[("exploding-plugin", _Raises())])
    with pytest.raises(PluginError, match="plugin 'exploding-plugin' was quarantined when it loaded: raised in "
                                          "fusegen_emitter_factories: RuntimeError: boom"):
        Target("Exploding_Plugin", pm)


def test_every_callable_of_a_plugin_gets_the_same_context_settings():
    """The context is built from the plugin's declared defaults and the configuration's [plugins.<name>]."""
    from fusegen.config.options import ConfigOption
    from fusegen.device import get_device

    class Declares:
        @hookimpl
        def fusegen_config_options(self):
            return [ConfigOption("min_elements", int, 7, "n")]

    pm = PluginManager(autoload=False, extra_plugins=[("declares", Declares())])
    ctx = pm.context_for("declares", device=get_device("h100"))
    assert (ctx.plugin, ctx.settings, ctx.device.name, ctx.config) == ("declares", {"min_elements": 7}, "h100", None)
    assert ctx.debug_options.xla_gpu_autotune_level == 4  # XLA's default without a configuration
    assert pm.context_for("declares", device=get_device("h100")) is ctx  # one per plugin and device


def test_codegen_backend_ranks_follow_xlas_order_as_the_guide_says():
    """factory_cuda.cc:85-100 builds cuDNN, Triton, cuBLASLt in that order (level 0 takes the first config);
    docs/plugins.md section 2 gives the ranks."""
    import re
    from pathlib import Path

    ranks = {b.name: b.rank for b in PluginManager().codegen_backends()}
    assert (ranks["cudnn"], ranks["triton"], ranks["cublaslt"]) == (100, 200, 300)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "plugins.md").read_text()
    said = re.search(r"cuDNN (\d+), Triton (\d+),\s+cuBLASLt (\d+)", doc).groups()
    assert tuple(map(int, said)) == (ranks["cudnn"], ranks["triton"], ranks["cublaslt"])
