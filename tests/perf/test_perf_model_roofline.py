"""Per fusion, the estimate agrees with a bandwidth/FLOP roofline of the same kernel within the model's terms.

For every fusion of the 23 H200 programs of ``shared/corpus/jax/launch`` (all but the 12-layer GPT, which
``test_gpt12_estimate`` covers) the roofline is computed here from shapes alone, independently of the model:

* bytes: every fusion operand the fused computation reads, once, plus every output once (an in-place
  dynamic-update-slice writes its update only and does not read the buffer it updates);
* flops: ``2 x M x N x K`` of each dot, at the tensor-core peak of its input type.

The model's stated terms (docs/perf-model.md) then bound the estimate from both sides:

* lower: ``roofline`` itself. Re-reads may come from cache, but a first read and a write never beat the DRAM
  bandwidth, and overlap never hides more than the shorter of compute and memory (1% slack: XLA's measured
  H100 bandwidth table peaks 0.1% above the H100's nominal bandwidth, and it is scaled to the H200's);
* bytes (tiled model): each operand at least once, at most once per block (twice: a dot's K steps pad);
* upper (indexing model): every read byte at the worst case the terms allow: the coalescing waste (one element
  per 64-byte transaction), the launch's bandwidth cap (``blocks x 32 B x clock``), no cache hits; writes at the
  DRAM bandwidth; compute over the FP32 units the launch occupies; no overlap; plus extra launches' buffers.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import fusegen
from fusegen import perf
from fusegen.device import H200
from fusegen.hlo.dtypes import bit_width
from fusegen.perf.device_rates import PerfDevice

LAUNCH = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "jax" / "launch"
MODULES = sorted(p for p in LAUNCH.glob("*.h200_opt.hlo") if not p.name.startswith("gpt12")) if LAUNCH.is_dir() else []
DEV = PerfDevice.of(H200)


def _bytes(shape) -> int:
    return sum((leaf.numel * bit_width(leaf.element_type) + 7) // 8 for leaf in shape.leaves()
               if leaf.element_type not in ("token", "tuple"))


def _in_place_dus(fusion):
    root = fusion.fused_computation.root
    while root.opcode == "bitcast":
        root = root.operands[0]
    if root.opcode == "dynamic-update-slice":
        buf = root.operands[0]
        while buf.opcode == "bitcast":
            buf = buf.operands[0]
        if buf.opcode == "parameter":
            return buf.parameter_number, root.operands[1]
    return None


def roofline(fusion) -> float:
    """``max(unique bytes / bandwidth, dot flops / tensor-core peak)`` from shapes (see the module docstring)."""
    body = fusion.fused_computation
    used = {p.parameter_number for p in body.parameters if body.users_of(p)}
    dus = _in_place_dus(fusion)
    read = sum(_bytes(fusion.operands[k].shape) for k in used if dus is None or k != dus[0])
    written = _bytes(dus[1].shape) if dus is not None else _bytes(fusion.shape)
    flops_s = 0.0
    for i in body.instructions:
        if i.opcode == "dot":
            lhs = i.operands[0].shape
            k = math.prod(lhs.dimensions[d] for d in i.attrs.get("lhs_contracting_dims", ()))
            flops_s += 2 * i.shape.numel * k / DEV.peak_matrix_flops(lhs.element_type)
    return max((read + written) / DEV.memory_bandwidth, flops_s)


def _upper(e: perf.FusionEstimate, fusion) -> float:
    """The worst case the indexing model's terms allow for ``e``'s own reads (see the module docstring)."""
    cap = min(DEV.memory_bandwidth, max(e.num_blocks, 1) * DEV.per_block_bandwidth())
    mem = 0.0
    for r in e.reads:
        op = fusion.operands[r.index].shape
        elem = max(1, (bit_width(op.element_type) + 7) // 8) if op.is_array else 4
        mem += r.bytes_total / (cap * min(1.0, elem / DEV.transaction_bytes))
    mem += e.data.bytes_written / DEV.memory_bandwidth
    compute = e.data.flops / (DEV.effective_flops_per_ns(e.num_blocks, e.threads_per_block) * 1e9)
    extra = e.launches * sum(_bytes(o.shape) for o in fusion.operands) / DEV.memory_bandwidth  # extra launches
    return compute + mem + (extra if e.launches > 1 else 0.0)


def _cases():
    out = []
    for path in MODULES:
        m = fusegen.load(path)
        est = fusegen.api.estimate_module(m, H200)
        fusions = {f.name: f for f in m.fusion_instructions()}
        for e in est.fusions:
            if e.name in fusions:
                out.append(pytest.param(fusions[e.name], e, id=f"{path.name.split('.')[0]}:{e.name}"))
    return out


CASES = _cases() if MODULES else []


@pytest.mark.skipif(not MODULES, reason="shared/corpus/jax/launch is not present next to the checkout")
@pytest.mark.parametrize("fusion,e", CASES)
def test_estimate_within_the_terms_of_its_roofline(fusion, e):
    assert not e.data.is_infinite, e.note
    r = roofline(fusion)
    assert e.seconds >= 0.99 * r, f"{e.model} estimate {e.seconds * 1e6:.3f} µs beats the roofline {r * 1e6:.3f} µs"
    if e.model == "indexing":
        upper = _upper(e, fusion)
        assert e.seconds <= upper * (1 + 1e-9), f"{e.seconds * 1e6:.3f} µs above the terms' worst case {upper * 1e6:.3f}"
        for rd in e.reads:  # every operand the kernel reads is read at least once, and never more than it holds
            size = _bytes(fusion.operands[rd.index].shape)
            assert rd.bytes_net <= size and rd.bytes_total >= rd.bytes_net
    if e.model == "tiled":  # each block reads at most the whole of each operand, and each operand at least once
        body = fusion.fused_computation
        used = sum(_bytes(fusion.operands[p.parameter_number].shape) for p in body.parameters if body.users_of(p))
        assert used <= e.data.bytes_read <= max(e.num_blocks, 1) * used * 2  # x2: a dot's K steps pad to block_k
    if e.model == "roofline":  # a library call or a fusion without a kernel: the roofline is the estimate
        assert e.seconds == pytest.approx(max(e.data.compute_time, e.data.read_time + e.data.write_time))


@pytest.mark.skipif(not MODULES, reason="shared/corpus/jax/launch is not present next to the checkout")
def test_every_corpus_kind_is_modelled_beyond_the_roofline():
    """The corpus' kernels get the kernel models (not the coarse library roofline)."""
    models = {e.model for _, e in (c.values for c in CASES)}
    assert {"indexing", "tiled"} <= models
