"""The split-K GEMM backend with a planted bug: with ``split_k > 1`` the last K chunk is dropped (an off-by-one
in the chunk loop), so every config but the first is wrong (tests/conformance/test_conformance_planted.py)."""

import fusegen_test_gemm as good


class DropsLastChunk(good.SplitKGemm):
    name = "splitk_gemm_bug"

    def chunks(self, k, split_k):
        parts = super().chunks(k, split_k)
        return parts[:-1] if split_k > 1 else parts


plugin = good.Plugin(DropsLastChunk)
