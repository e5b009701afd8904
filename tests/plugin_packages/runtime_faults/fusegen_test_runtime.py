"""Plugins that load fine and fail on a fusion, one way each. Each claims kLoop fusions (rank 1, before
memcpy) or asks its question first (rank 5)."""

from fusegen.codegen.emitter import FusionEmitter, choose_block
from fusegen.codegen.kernel import EmittedFusion, KernelParam, KernelSource, LaunchDimensions
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory, KindMatcher

GOOD = '''import triton
import triton.language as tl


@triton.jit
def neg_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr, N: tl.constexpr):
    lin = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = lin < N
    x = tl.load(x_ptr + lin, mask=mask, other=0)
    tl.store(out_ptr + lin, -x, mask=mask)
'''
BAD_LINE = 9  # the line of GOOD that BAD breaks
BAD = GOOD.replace("x = tl.load(x_ptr + lin, mask=mask, other=0)", "x = tl.load(x_ptr + lin, mask=mask, other=0")
# the kernel takes three pointers, the launch binds two
THREE = GOOD.replace("def neg_kernel(x_ptr, out_ptr,", "def neg_kernel(x_ptr, y_ptr, out_ptr,")
# runs in the interpreter (plain Python), but Triton's compiler cannot call a function that is not @triton.jit
NO_SM90 = GOOD.replace("@triton.jit", "def helper(x):\n    return -x\n\n\n@triton.jit").replace(
    "tl.store(out_ptr + lin, -x, mask=mask)", "tl.store(out_ptr + lin, helper(x), mask=mask)")


class _Emitter(FusionEmitter):
    source = GOOD

    def emit(self):
        n = self.fusion.shape.numel
        block, warps = choose_block(n)
        ks = KernelSource(name="neg_kernel", source=self.source, entry="neg_kernel",
                          params=(KernelParam("operand", 0, self.fusion.operands[0].shape),
                                  KernelParam("output", 0, self.fusion.shape)),
                          constexprs={"BLOCK": block, "N": n}, launch=LaunchDimensions(grid=(-(-n // block),),
                                                                                        num_warps=warps))
        return EmittedFusion(emitter=self.name, kernels=(ks,))


class BadSourceFusion(_Emitter):
    name = "BadSourceFusion"
    source = BAD


class LaunchFailsFusion(_Emitter):
    name = "LaunchFailsFusion"
    source = THREE


class CompileFailsFusion(_Emitter):
    name = "CompileFailsFusion"
    source = NO_SM90


class RaisingFusion(FusionEmitter):
    name = "RaisingFusion"

    def emit(self):
        raise RuntimeError("emit exploded")


def _factory(name, make):
    class Plugin:
        @hookimpl
        def fusegen_emitter_factories(self):
            return [EmitterFactory(name=name, kind="kLoop", rank=1, create=lambda a, c=None: make(a))]
    return Plugin()


def _matcher(name, match):
    class Plugin:
        @hookimpl
        def fusegen_fusion_kind_matchers(self):
            return [KindMatcher(name=name, rank=5, match=match)]
    return Plugin()


def _raise(analysis):
    raise ValueError(f"cannot look at {analysis.name}")


matcher_raises = _matcher("always-raises", _raise)
typo = _matcher("typo", lambda a: "kLooop")
factory_string = _factory("stringly", lambda a: "LoopFusion")
emit_raises = _factory("raising", RaisingFusion)
bad_source = _factory("bad_source", BadSourceFusion)
launch_fails = _factory("launch_fails", LaunchFailsFusion)
compile_fails = _factory("compile_fails", CompileFailsFusion)
