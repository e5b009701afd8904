"""A plugin that replaces fusegen's loop emitter plugin, and its last dispatch question, on purpose."""

from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory, KindMatcher
from fusegen_plugins.emitters.loop import LoopFusion

FUSEGEN_REPLACES = "loop"  # the whole plugin `loop`: its factory name `loop` is then free for ours


class AcmeLoopFusion(LoopFusion):
    name = "AcmeLoopFusion"


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="loop", kind="kLoop", rank=100, create=lambda a, c=None: AcmeLoopFusion(a))]


@hookimpl
def fusegen_fusion_kind_matchers():
    # the core question `loop` belongs to another plugin (fusegen.matchers): taken over by name, explicitly
    return [KindMatcher(name="loop", rank=1000, match=lambda a: "kLoop", replaces="loop")]
