"""HLO modules that tests of several folders run: a Triton block-level softmax (a template over its shape, tile
and warps), the emitters doc's bf16 GELU loop fusion, and a variadic argmax reduction (a template over its
shape, reduced dimension and output shape), and a scalar reducer computation
(:func:`binary_reducer`)."""

from __future__ import annotations

_SOFTMAX_T = """HloModule m
mx {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] maximum(a, b)
}}
ad {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}}
c {{
  p = f32[{R},{C}] parameter(0)
  ninf = f32[] constant(-inf)
  m = f32[{R}] reduce(p, ninf), dimensions={{1}}, to_apply=mx
  mb = f32[{R},{C}] broadcast(m), dimensions={{0}}
  s = f32[{R},{C}] subtract(p, mb)
  e = f32[{R},{C}] exponential(s)
  z = f32[] constant(0)
  t = f32[{R}] reduce(e, z), dimensions={{1}}, to_apply=ad
  tb = f32[{R},{C}] broadcast(t), dimensions={{0}}
  ROOT d = f32[{R},{C}] divide(e, tb)
}}
ENTRY e {{
  x = f32[{R},{C}] parameter(0)
  ROOT f = f32[{R},{C}] fusion(x), kind=kCustom, calls=c, backend_config={{"fusion_backend_config":{{"kind":"__triton","block_level_fusion_config":{{"num_warps":"{W}","output_tiles":[{{"sizes":["{TR}","{TC}"]}}],"num_ctas":1,"num_stages":1}}}}}}
}}"""


GELU = """HloModule gelu

%fused_gelu (p0: bf16[6,512,4096]) -> bf16[6,512,4096] {
  %p0 = bf16[6,512,4096]{2,1,0} parameter(0)
  %half = bf16[] constant(0.5)
  %bh = bf16[6,512,4096]{2,1,0} broadcast(%half), dimensions={}
  %c = bf16[] constant(0.7978)
  %bc = bf16[6,512,4096]{2,1,0} broadcast(%c), dimensions={}
  %x3 = bf16[6,512,4096]{2,1,0} multiply(%p0, %p0)
  %x3b = bf16[6,512,4096]{2,1,0} multiply(%x3, %p0)
  %k = bf16[] constant(0.04472)
  %bk = bf16[6,512,4096]{2,1,0} broadcast(%k), dimensions={}
  %t1 = bf16[6,512,4096]{2,1,0} multiply(%x3b, %bk)
  %t2 = bf16[6,512,4096]{2,1,0} add(%p0, %t1)
  %t3 = bf16[6,512,4096]{2,1,0} multiply(%t2, %bc)
  %th = bf16[6,512,4096]{2,1,0} tanh(%t3)
  %one = bf16[] constant(1)
  %b1 = bf16[6,512,4096]{2,1,0} broadcast(%one), dimensions={}
  %t4 = bf16[6,512,4096]{2,1,0} add(%th, %b1)
  %t5 = bf16[6,512,4096]{2,1,0} multiply(%t4, %bh)
  ROOT %gelu = bf16[6,512,4096]{2,1,0} multiply(%t5, %p0)
}

ENTRY %main (x: bf16[6,512,4096]) -> bf16[6,512,4096] {
  %x = bf16[6,512,4096]{2,1,0} parameter(0)
  ROOT %loop_gelu_fusion = bf16[6,512,4096]{2,1,0} fusion(%x), kind=kLoop, calls=%fused_gelu
}
"""


ARGMAX = """
HloModule argmax
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  eq = pred[] compare(v0, v1), direction=EQ
  lt = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, lt)
  pick0 = pred[] or(gt, tie)
  v = f32[] select(pick0, v0, v1)
  i = s32[] select(pick0, i0, i1)
  ROOT r = (f32[], s32[]) tuple(v, i)
}
fused {
  p = f32[SHAPE] parameter(0)
  io = s32[SHAPE] iota(), iota_dimension=DIM
  ninf = f32[] constant(-inf)
  z = s32[] constant(0)
  red = (f32[OUT], s32[OUT]) reduce(p, io, ninf, z), dimensions={DIM}, to_apply=argmax
  v = f32[OUT] get-tuple-element(red), index=0
  i = s32[OUT] get-tuple-element(red), index=1
  ROOT t = (f32[OUT], s32[OUT]) tuple(v, i)
}
ENTRY main {
  p = f32[SHAPE] parameter(0)
  ROOT f = (f32[OUT], s32[OUT]) fusion(p), kind=kInput, calls=fused
}
"""


def binary_reducer(name: str, op: str, element_type: str = "f32") -> str:
    """HLO text of a scalar reducer computation ``name`` computing ``op(a, b)`` on ``element_type``."""
    return (f"{name} {{\n  a = {element_type}[] parameter(0)\n  b = {element_type}[] parameter(1)\n"
            f"  ROOT r = {element_type}[] {op}(a, b)\n}}")
