"""The kReverse emitter with a planted bug: it ignores its indexing map (reads the operand at the output's own
index), so every reversed dimension comes out unreversed (tests/conformance/test_conformance_planted.py)."""

import fusegen_test_reverse as good


class NoMapReverse(good.ReverseFusion):
    name = "NoMapReverse"

    def source(self, gen, idx):
        return idx


plugin = good.Plugin(NoMapReverse)
