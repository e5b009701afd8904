"""cuDNN graphs of the corpus __cudnn$fusion cases, built on the CPU (nvidia-cudnn-frontend, no GPU needed)."""

from __future__ import annotations

import pytest

from conftest import CORPUS, corpus_path
from fusegen.hlo.parser import parse_modules

cudnn = pytest.importorskip("cudnn", reason="nvidia-cudnn-frontend is not installed (pip install "
                                            "nvidia-cudnn-frontend==1.32.0 --no-deps)")

from fusegen_plugins.backends.cudnn import CudnnBackend, CudnnConversionError, build_graph  # noqa: E402

#: Cases whose graph is not built here, with the reason the converter gives (checked below).
NOT_BUILT = {
    "cudnn__BlockScaledDotLowering.hlo": "block-scaled dots",
    "cudnn__CompilerSupportsFusionsWithWorkspace.hlo": "multi-output cuDNN fusions",
    "cudnn__ConvDgradWithNHWCLayoutExecutesCorrectly.hlo": "convolution_kind=dgrad",
    "cudnn__ConvWgradWithNHWCLayoutExecutesCorrectly.hlo": "convolution_kind=wgrad",
    "cudnn__DotWithSplitNonContractingInOutExecutesCorrectly.hlo": "opcode 'bitcast'",
    "cudnn__DotWithSplitNonContractingInputExecutesCorrectly.hlo": "opcode 'bitcast'",
    # XLA refuses this one too (IsSupportedCudnnFusion: algorithm not supported by cuDNN)
    "cudnn__NonDefaultDotAlgorithmIsNotSupported.hlo": "is not supported by cuDNN",
    # an unfused input module: the optimized module of XLA's full pipeline holds the cuDNN fusion
    "cudnn__OddDimensionsAreSupported__pipeline0.hlo": "no __cudnn$fusion",
}

CASES = sorted(p.name for p in (CORPUS / "xla" / "cases").glob("cudnn__*.hlo")) if CORPUS.exists() else []


@pytest.mark.parametrize("name", CASES)
def test_graph_builds_or_is_listed(name):
    mods = parse_modules(corpus_path("xla", "cases", name).read_text(), name)
    fusions = [i for m in mods for i in m.all_instructions()
               if i.opcode == "fusion" and i.fusion_backend_kind == "__cudnn$fusion"]
    if not fusions:
        assert NOT_BUILT.get(name) == "no __cudnn$fusion"
        return
    errors = []
    for f in fusions:
        try:
            g = build_graph(f)
            assert g is not None
        except CudnnConversionError as e:
            errors.append(str(e))
    if name in NOT_BUILT:
        assert errors and NOT_BUILT[name] in errors[0], errors
    else:
        assert not errors, errors


def test_conv_fprop_output_shape_inferred():
    mods = parse_modules(corpus_path("xla", "cases", "cudnn__ConvFpropGraphConvertedCorrectly.hlo").read_text())
    f = next(i for i in mods[0].all_instructions() if i.opcode == "fusion")
    g = build_graph(f)
    # NHWC buffers (b01f / o01i) seen as NCHW dims with strides, as XLA's conversion does
    ins = sorted((t.get_dim(), t.get_stride()) for t in g.get_inputs())
    assert ins == [([2, 17, 9, 9], [1377, 1, 153, 17]), ([32, 17, 3, 3], [153, 1, 51, 17])]
    (out,) = g.get_outputs()
    assert (out.get_dim(), out.get_stride()) == ([2, 32, 9, 9], [2592, 1, 288, 32])


def test_backend_on_cpu():
    mods = parse_modules(corpus_path("xla", "cases", "cudnn__ClampGraphConvertedCorrectly.hlo").read_text())
    f = next(i for i in mods[0].all_instructions() if i.opcode == "fusion")
    be = CudnnBackend()
    assert be.can_produce_wrong_results()
    from fusegen_plugins.backends.cudnn import unavailable_reason

    if unavailable_reason() is not None:
        assert be.get_supported_configs(f) == []
    from fusegen.codegen_backend import Config

    be.apply_config(f, Config("cudnn", {"plan_id": 2, "workspace_bytes": 0}))
    assert f.backend_config["fusion_backend_config"]["cudnn_fusion_config"] == {"plan_id": "2"}
