"""The plugin manager's ranked registries and declared kinds are built once per registry state (dispatch asks for
them for every fusion), and a plugin registered or disabled later is seen at once; a kind matcher written as
``match(analysis)`` is answered without a plugin context being built for it."""

from __future__ import annotations

from types import SimpleNamespace

from fusegen import dispatch
from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.device import get_device
from fusegen.hlo.parser import parse_module
from fusegen.plugin_manager import PluginManager, hookimpl
from fusegen.registry import KindMatcher

_MODULE = """HloModule m
%f (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %t = f32[8]{0} tanh(%p)
}
ENTRY %e (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  ROOT %r = f32[8]{0} fusion(%x), kind=kLoop, calls=%f
}
"""


class _Early:
    """Asked first (rank -1) with a kind of its own, and with the plugin's context."""

    seen: list = []

    @hookimpl
    def fusegen_fusion_kind_matchers(self):
        return [KindMatcher(name="early", rank=-1, kinds=["kEarly"],
                            match=lambda a, ctx: _Early.seen.append(ctx.plugin) or "kEarly")]


def test_a_matcher_registered_after_dispatch_is_asked_in_rank_order_and_its_kind_declared():
    pm = PluginManager()
    before = [m.name for m in pm.kind_matchers()]
    assert "kEarly" not in pm.declared_kinds()
    pm.register(_Early(), "early-plugin")
    assert [m.name for m in pm.kind_matchers()] == ["early", *before]
    assert "kEarly" in pm.declared_kinds()
    inst = next(i for i in parse_module(_MODULE).entry.instructions if i.opcode == "fusion")
    d = dispatch.get_emitter_fusion_kind(FusionAnalysis.create(inst, get_device("h200")), pm)
    assert (d.kind, d.decided_by, _Early.seen[-1]) == ("kEarly", "early", "early-plugin")
    pm.apply_config(SimpleNamespace(disable=["early-plugin"]))  # [plugins] disable: dropped at once
    assert [m.name for m in pm.kind_matchers()] == before
    pm.apply_config(SimpleNamespace(disable=["real-reduction-hero"]))  # a matcher's own name: filtered out at once
    assert [m.name for m in pm.kind_matchers()] == [n for n in before if n != "real-reduction-hero"]


def test_matchers_without_a_context_parameter_get_none_built():
    pm = PluginManager()
    built = []
    real = pm.context_for
    pm.context_for = lambda plugin, **kw: built.append(plugin) or real(plugin, **kw)
    inst = next(i for i in parse_module(_MODULE).entry.instructions if i.opcode == "fusion")
    d = dispatch.get_emitter_fusion_kind(FusionAnalysis.create(inst, get_device("h200")), pm)
    assert d.kind == "kLoop" and d.decided_by == "loop"
    takes = [m.plugin for m in pm.kind_matchers() if m.match.__code__.co_argcount > 1]
    assert built == takes  # only the matchers that take one
