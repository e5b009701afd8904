"""The GPU's branch of every kernel, run in the interpreter: loop, reduction and concatenate kernels of the six
launch sets at XLA's own block and grid.

A kernel's source holds branches on constexprs (``N % BLOCK == 0``, ``EXACT``) that drop clamps and masks
where XLA's grid covers the array exactly. The interpreter normally runs a wider variant of the same source
(fewer, larger programs: ``interpret_variant``, ``interpret_max_programs``), which may take the other branch, so
the branch the GPU runs would go untested. Here every such kernel whose launch is small enough (at most 4096
programs, 2**20 output elements) runs as the GPU launches it, on the module's random inputs, and is judged
against the reference evaluator. Slow (about 8 minutes on 2 cores); CI runs it.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from conftest import CORPUS
from fusion_harness import grid_programs, launch_set_fusions, operands_and_reference

from fusegen.codegen import triton_runtime
from fusegen.runtime.compare import compare
from fusegen.runtime.inputs import leaves

HERE = Path(__file__).resolve().parents[1]  # tests/
SETS = {"shared": CORPUS / "jax" / "launch", "x": HERE / "data" / "xla_kernels", "z": HERE / "data" / "xla_kernels_z",
        "w": HERE / "data" / "xla_kernels_w", "v": HERE / "data" / "xla_kernels_v",
        "u": HERE / "data" / "xla_kernels_u"}
EMITTERS = ("loop", "reduction", "concatenate")
MAX_PROGRAMS, MAX_ELEMENTS = 4096, 1 << 20


def _exact_branch(ks) -> bool:
    return ks.interpret_variant is not None or "EXACT: tl.constexpr = NA" in ks.source


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SETS))
def test_gpu_branch_of_every_small_kernel_matches_the_reference(name):
    ran, wrong = 0, []
    for mf, m, f, em, factory in launch_set_fusions(SETS[name]):
        if em is None or factory is None or factory.name not in EMITTERS:
            continue
        emitted = em.emit()
        ks = emitted.kernels
        programs = grid_programs(ks)
        if not ks or programs > MAX_PROGRAMS or f.shape.leaves()[0].numel > MAX_ELEMENTS \
                or not any(_exact_branch(k) for k in ks):
            continue
        ops, ref = operands_and_reference(m, f, seed=0)
        at_xla = attrs.evolve(emitted, kernels=tuple(attrs.evolve(k, interpret_variant=None) for k in ks))
        outs = triton_runtime.run_fusion(at_xla, ops, f, interpret_max_programs=None)
        ran += 1
        for k, (o, r, s) in enumerate(zip(outs, leaves(ref), f.shape.leaves())):
            c = compare(o, r, s.element_type)
            if not c.ok:
                wrong.append(f"{mf} {f.name} leaf {k}: max abs {c.max_abs_error}, rel {c.max_rel_error}")
    assert ran > 0, f"no kernel of {name} has a GPU branch small enough to run"
    assert wrong == [], wrong
