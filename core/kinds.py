"""Fusion kind names and backend-config stamps (a stable public interface).

Mirrors ``HloFusionAnalysis::EmitterFusionKind`` (``xla/service/gpu/hlo_fusion_analysis.h``) and the
``fusion_backend_config.kind`` strings of ``xla/service/gpu/ir_emission_utils.h``. The strings are
exactly XLA's spellings so that reports, caches and plugins can compare them verbatim.
"""

from __future__ import annotations

#: EmitterFusionKind names, in XLA's enum order.
LOOP = "kLoop"
CUSTOM_FUSION = "kCustomFusion"
TRITON = "kTriton"
REDUCTION = "kReduction"
TRANSPOSE = "kTranspose"
CONCATENATE = "kConcatenate"
SCATTER = "kScatter"
CUDNN = "kCuDnn"
SORT = "kSort"

EMITTER_FUSION_KINDS: tuple[str, ...] = (
    LOOP, CUSTOM_FUSION, TRITON, REDUCTION, TRANSPOSE, CONCATENATE, SCATTER, CUDNN, SORT,
)

#: ``backend_config.fusion_backend_config.kind`` stamps that decide the kind before any analysis.
CUSTOM_FUSION_STAMP = "__custom_fusion"
TRITON_STAMP = "__triton"
TRITON_GEMM_STAMP = "__triton_gemm"
TRITON_NESTED_GEMM_STAMP = "__triton_nested_gemm_fusion"
TRITON_COLLECTIVE_STAMP = "__triton_collective"
CUDNN_STAMP = "__cudnn$fusion"

#: stamp -> EmitterFusionKind (``GetEmitterFusionKind`` checks 1-3, hlo_fusion_analysis.cc).
STAMP_TO_KIND: dict[str, str] = {
    CUSTOM_FUSION_STAMP: CUSTOM_FUSION,
    TRITON_STAMP: TRITON,
    TRITON_GEMM_STAMP: TRITON,
    TRITON_NESTED_GEMM_STAMP: TRITON,
    TRITON_COLLECTIVE_STAMP: TRITON,
    CUDNN_STAMP: CUDNN,
}


def is_emitter_fusion_kind(name: str) -> bool:
    """Whether ``name`` is one of XLA's EmitterFusionKind spellings."""
    return name in EMITTER_FUSION_KINDS
