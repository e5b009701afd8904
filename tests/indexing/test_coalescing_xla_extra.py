"""More of XLA's ``coalescing_analysis_test.cc`` (cases the shared corpus selection leaves out), on XLA's RTXA6000
test device: every one must be decided by the emitter's thread-id maps, not the heuristic."""

from __future__ import annotations

import pytest

from fusegen.codegen.coalescing import analyze_coalescing
from fusegen.device import get_device
from fusegen.hlo.parser import parse_module

ADD = "add {\n p0 = f32[] parameter(0)\n p1 = f32[] parameter(1)\n ROOT add = f32[] add(p0, p1)\n}\n"


def _fusion(params: list[str], body: str, out: str, kind: str = "kLoop", extra: str = "") -> str:
    """A module whose ENTRY root is ``fusion(p0, ...)`` over ``body`` (parameters ``p0..`` of ``params`` shapes)."""
    fparams = "\n  ".join(f"p{i} = {s} parameter({i})" for i, s in enumerate(params))
    args = ", ".join(f"p{i}" for i in range(len(params)))
    return (f"HloModule m\n{extra}fusion {{\n  {fparams}\n  {body}\n}}\n"
            f"ENTRY e {{\n  {fparams}\n  ROOT fusion = {out} fusion({args}), kind={kind}, calls=fusion\n}}\n")


CONCAT_PARAMS = ["bf16[42]"] * 4 + ["bf16[44]"] * 2 + ["bf16[256]"]
CASES = {
    "RhsTransposedLayout": (_fusion(["f32[100, 200]{1, 0}", "f32[100, 200]{0, 1}"],
                                    "ROOT exp = f32[100, 200]{1, 0} add(p0, p1)", "f32[100, 200]{1, 0}", "kInput"),
                            [True, False]),
    "ConcatenateInLoopEmitter": (_fusion(CONCAT_PARAMS,
                                         "concatenate = bf16[256] concatenate(p0, p1, p2, p3, p4, p5), dimensions={0}\n"
                                         "  ROOT multiply = bf16[256] multiply(concatenate, p6)", "bf16[256]"),
                                 [True] * 7),
    "TransposeOnlyOuterDims": (_fusion(["f32[100, 32, 64]"],
                                       "ROOT transpose = f32[32, 100, 64] transpose(p0), dimensions={1, 0, 2}",
                                       "f32[32, 100, 64]"), [True]),
    "PadOp": (_fusion(["f32[997, 436]", "f32[]"], "ROOT pad = f32[1024, 512] pad(p0, p1), padding=10_17x24_52",
                      "f32[1024, 512]"), [True, True]),
    "RowReduction": (_fusion(["f32[100,64,512]"], "c0 = f32[] constant(0)\n"
                             "  ROOT reduce = f32[100,64] reduce(p0, c0), dimensions={2}, to_apply=add",
                             "f32[100,64]", "kInput", ADD), [True]),
    "ColumnReduction": (_fusion(["f32[100,64,32]"], "c0 = f32[] constant(0)\n"
                                "  ROOT reduce = f32[100,32] reduce(p0, c0), dimensions={1}, to_apply=add",
                                "f32[100,32]", "kInput", ADD), [True]),
    "DynamicSlice": (_fusion(["s32[2,2,258]", "s32[]", "s32[]", "s32[]"],
                             "ROOT ds = s32[1,2,32] dynamic-slice(p0, p1, p2, p3), dynamic_slice_sizes={1, 2, 32}",
                             "s32[1,2,32]"), [True] * 4),
    "UnusedParameter": (_fusion(["f32[100000]", "f32[100000]"], "ROOT neg = f32[100000] negate(p0)", "f32[100000]"),
                        [True, True]),
    "Param": (_fusion(["u32[48,2,1280]", "u32[48,1,1280]", "u32[48,1,1280]"],
                      "concat = u32[48,2,1280] concatenate(p1, p2), dimensions={1}\n"
                      "  ROOT shift = u32[48,2,1280] shift-right-logical(concat, p0)", "u32[48,2,1280]"),
              [True, True, True]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_xla_coalescing_expectation(name):
    hlo, expected = CASES[name]
    result = analyze_coalescing(parse_module(hlo).entry.root, get_device("rtxa6000"))
    assert result.method == "maps", f"{name}: decided by the heuristic ({result.kind})"
    assert list(result.coalesced) == expected, result
