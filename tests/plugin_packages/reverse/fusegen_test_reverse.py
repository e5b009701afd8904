"""An emitter for a kind of its own, ``kReverse`` (fusions whose root is ``reverse(parameter)``), on the kit.

Each lane takes its output element, maps it to the operand element through the root's output-to-input
indexing map, loads it and stores it. ``make_plugin`` builds the plugin object for an emitter class, so the
planted-bug variants (tests/plugin_packages/reverse_bugs) differ from it in one method each.
"""

from fusegen.codegen import kit
from fusegen.indexing.analysis import compute_output_to_input_indexing
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory, KindMatcher

KIND = "kReverse"


def is_reverse(analysis) -> bool:
    roots, shape = analysis.roots, analysis.fusion.shape
    return (len(roots) == 1 and roots[0].opcode == "reverse" and roots[0].operands[0].opcode == "parameter"
            and not shape.is_tuple and shape.numel > 0)


class ReverseFusion(kit.LinearKernelIndexing, kit.FusionEmitter):
    """out[i] = operand[m(i)], m the reverse's output-to-input map (d -> size - 1 - d on reversed dims)."""

    name = "ReverseFusion"

    def source(self, gen, idx):
        """The operand element output element ``idx`` reads."""
        m = compute_output_to_input_indexing(self.analysis.roots[0]).maps(0)[0]
        return kit.apply_indexing_map(gen, m, idx)

    def launch(self, kernel):
        return kernel

    def emit(self):
        root, out = self.analysis.roots[0], self.fusion.shape

        def body(gen, lin_c):
            idx = kit.logical_index(gen, lin_c, out)
            value = gen.value(root.operands[0], self.source(gen, idx))
            ptr = gen.ctx.param("output", 0, out, "out")
            kit.store_line(gen, ptr, kit.physical_offset(gen, idx, out), value, out.element_type, gen.ctx.mask)

        kernel = kit.build_linear_kernel(self, f"reverse_{self.fusion.name}", out.numel, body)
        return kit.EmittedFusion(emitter=self.name, kernels=(self.launch(kernel),))


def reverses(dtypes):
    """Conformance generator: ``reverse`` of a parameter over some of its 1-3 dimensions."""
    from hypothesis import strategies as st

    from fusegen.conformance.generators import fusion_module

    @st.composite
    def draw(draw):
        et = draw(st.sampled_from(dtypes))
        dims = draw(st.lists(st.integers(1, 9), min_size=1, max_size=3))
        rev = draw(st.lists(st.integers(0, len(dims) - 1), min_size=1, unique=True))
        shape = f"{et}[{','.join(map(str, dims))}]"
        return fusion_module(f"  ROOT r = {shape} reverse(p0), dimensions={{{','.join(map(str, sorted(rev)))}}}",
                             [shape], shape)

    return draw()


class Plugin:
    """The plugin object: a matcher for ``kReverse``, a factory of ``emitter``, a generator, capabilities."""

    FUSEGEN_CONFORMANCE = {"kinds": [KIND], "dtypes": ["f32", "bf16", "s32"], "generators": {KIND: "reverse"}}

    def __init__(self, emitter):
        self.emitter = emitter

    @hookimpl
    def fusegen_fusion_kind_matchers(self):
        return [KindMatcher(name="reverse", rank=150, match=lambda a: KIND if is_reverse(a) else None)]

    @hookimpl
    def fusegen_emitter_factories(self):
        return [EmitterFactory(name="reverse", kind=KIND, rank=100, create=lambda a, c=None: self.emitter(a))]

    @hookimpl
    def fusegen_conformance_generators(self):
        return {"reverse": reverses}


plugin = Plugin(ReverseFusion)
