"""The kReverse emitter with a planted bug: it launches 64 warps (2048 threads per block, over every CUDA
device's 1024), as an author tuning "more warps, more speed" might (tests/conformance/test_conformance_planted.py)."""

import attrs

import fusegen_test_reverse as good


class Warps64Reverse(good.ReverseFusion):
    name = "Warps64Reverse"

    def launch(self, kernel):
        return attrs.evolve(kernel, launch=attrs.evolve(kernel.launch, num_warps=64))


plugin = good.Plugin(Warps64Reverse)
