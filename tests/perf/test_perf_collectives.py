"""Collectives priced on their device group (fusegen.perf.collectives), and where explain, run and the report show
them.

Every expected time is worked by hand from NCCL's ring formula with the figures the module docstring states:
bus bandwidth = 18 NVLink links x 25 GB/s x 20.6/25 = 370.8 GB/s on an H100/H200 (12 x 25 x 20/25 = 240 GB/s on an
A100), base latencies LL 6.6 / LL128 14 / Simple 8.4 µs, hop latencies 0.6 / 1.9 / 3.4 µs, and XLA's bytes rules.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import fusegen
from fusegen.device import A100, H100, H200, RTXA6000
from fusegen.perf.collectives import estimate_collective

ROOT = Path(__file__).resolve().parents[2]
CORPUS_SPMD = ROOT / ".." / "shared" / "corpus" / "spmd"
DATA_SPMD = ROOT / "tests" / "data" / "spmd"
needs_corpus = pytest.mark.skipif(not CORPUS_SPMD.is_dir(), reason="shared/corpus/spmd is not present")

BUS_H100 = 18 * 25e9 * 20.6 / 25  # 370.8 GB/s
BUS_A100 = 12 * 25e9 * 20 / 25  # 240 GB/s
GIB = 1 << 30


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("kind, factor, steps", [
    ("all-gather", lambda n: (n - 1) / n, lambda n: n - 1),
    ("reduce-scatter", lambda n: (n - 1) / n, lambda n: n - 1),
    ("all-to-all", lambda n: (n - 1) / n, lambda n: n - 1),
    ("collective-permute", lambda n: 1.0, lambda n: 1),
])
def test_large_buffers_follow_the_ring_formula_with_the_simple_protocol(kind, factor, steps, n):
    e = estimate_collective(kind, GIB, n, H100)
    wire = factor(n) * GIB
    assert e.wire_bytes == round(wire) and e.steps == steps(n) and e.protocol == "Simple"
    assert e.seconds == pytest.approx((8.4 + steps(n) * 3.4) * 1e-6 + wire / BUS_H100, rel=1e-9)
    assert e.link == "nvlink" and e.algorithm in ("ring", "p2p")


@pytest.mark.parametrize("n", [2, 4, 8])
def test_all_reduce_ring_moves_twice_n_minus_one_over_n(n):
    # an A100 has no NVLink SHARP: the ring, 2(n-1) steps
    e = estimate_collective("all-reduce", GIB, n, A100)
    wire = 2 * (n - 1) / n * GIB
    assert (e.algorithm, e.protocol, e.steps, e.wire_bytes) == ("ring", "Simple", 2 * (n - 1), round(wire))
    assert e.seconds == pytest.approx((8.4 + 2 * (n - 1) * 3.4) * 1e-6 + wire / BUS_A100, rel=1e-9)


def test_all_reduce_on_hopper_uses_nvlink_sharp_for_large_buffers_on_more_than_two_gpus():
    two = estimate_collective("all-reduce", GIB, 2, H100)  # the ring is faster on a pair
    assert two.algorithm == "ring"
    assert two.seconds == pytest.approx((8.4 + 2 * 3.4) * 1e-6 + GIB / BUS_H100, rel=1e-9)
    e8 = estimate_collective("all-reduce", GIB, 8, H200)
    assert e8.algorithm == "nvls" and e8.latency_s == pytest.approx(23e-6)
    # 8 GPUs: the bus bandwidth nccl-tests would print (2 (n-1)/n x buffer / time) is ASTRA-sim's 475 GB/s
    assert 2 * 7 / 8 * GIB / (e8.seconds - 23e-6) == pytest.approx(475e9, rel=1e-9)


def test_small_buffers_take_the_low_latency_protocol():
    e = estimate_collective("all-reduce", 1024, 8, H100)
    assert e.protocol == "LL"  # a quarter of the bus bandwidth for all-reduce
    assert e.seconds == pytest.approx((6.6 + 14 * 0.6) * 1e-6 + 2 * 7 / 8 * 1024 / (BUS_H100 / 4), rel=1e-9)
    g = estimate_collective("all-gather", 8 * 1024, 8, H100)
    assert g.protocol == "LL"  # a third for the others
    assert g.seconds == pytest.approx((6.6 + 7 * 0.6) * 1e-6 + 7 / 8 * 8192 / (BUS_H100 / 3), rel=1e-9)
    # a crossover: latency wins small, bandwidth wins large, and time never falls as the buffer grows
    sizes = [1 << s for s in range(10, 32)]
    for kind in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute"):
        for n in (2, 4, 8):
            ts = [estimate_collective(kind, s, n, H100).seconds for s in sizes]
            assert ts == sorted(ts)
            assert [estimate_collective(kind, 1 << 20, m, H100).seconds for m in (2, 4, 8)] == sorted(
                estimate_collective(kind, 1 << 20, m, H100).seconds for m in (2, 4, 8))


def test_one_device_groups_cost_nothing_and_cross_node_groups_use_the_network():
    assert estimate_collective("all-reduce", GIB, 1, H100).seconds == 0.0
    e = estimate_collective("all-gather", GIB, 16, H100, spans_domains=True)
    assert e.link == "network"
    assert e.seconds == pytest.approx((8.4 + 15 * 9.6) * 1e-6 + 15 / 16 * GIB / (50e9 * 0.9), rel=1e-9)
    pcie = estimate_collective("all-gather", GIB, 2, RTXA6000)  # no NVLink: PCIe Gen4 x16
    assert pcie.link == "pcie" and pcie.seconds > 5 * estimate_collective("all-gather", GIB, 2, H100).seconds


def test_xlas_one_shot_all_reduce_reads_every_peer_once():
    e = estimate_collective("all-reduce", 16384, 8, H200, kernel_strategy="KERNEL_STRATEGY_TRITON_ONE_SHOT")
    assert e.algorithm == "one-shot"
    assert e.seconds == pytest.approx((1.0 + 1.5) * 1e-6 + 7 * 16384 / BUS_H100, rel=1e-9)
    with pytest.raises(ValueError, match="not a collective"):
        estimate_collective("all-reduce-done", 1, 2, H200)


@needs_corpus
def test_explain_json_of_an_spmd_module_prices_each_collective():
    path = CORPUS_SPMD / "tp_mlp_seqpar.h200x2_opt.hlo"
    out = subprocess.run([sys.executable, "-m", "fusegen.cli", "explain", str(path), "--json"], capture_output=True,
                         text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    rows = {c["opcode"]: c for c in doc["collectives"]}
    assert set(rows) == {"all-gather-start", "reduce-scatter-start"}
    # all-gather of f32[32,128] (16 KiB) into 32 KiB, reduce-scatter of f32[64,128] (32 KiB): 2 devices, each
    # sends 16 KiB in one hop with the LL protocol at a third of the bus bandwidth
    for c in rows.values():
        e = c["estimate"]
        assert (e["group_size"], e["bytes"], e["wire_bytes"], e["protocol"]) == (2, 32768, 16384, "LL")
        assert e["us"] == pytest.approx(6.6 + 0.6 + 16384 / (BUS_H100 / 3) * 1e6, rel=1e-6)
        assert e["label"] == "estimate" and e["device"] == "h200"
        assert e["async"] is False and e["exposed_us"] == pytest.approx(e["us"])  # XLA marked them is_sync
    est = doc["estimated_us"]
    assert est["collectives_us"] == pytest.approx(sum(c["estimate"]["us"] for c in rows.values()), abs=1e-5)
    assert est["us"] == pytest.approx(est["fusions_us"] + est["library_calls_us"] + est["collectives_us"]
                                      - est["collectives_overlapped_us"], abs=1e-5)
    assert est["fusions_us"] == pytest.approx(sum(f["estimate"]["us"] for f in doc["fusions"]), abs=1e-5)


def test_an_async_pair_hides_behind_the_fusions_scheduled_between_start_and_done():
    path = DATA_SPMD / "ring_ppermute.h200x8_opt.hlo"
    lines = path.read_text().splitlines()
    at = {name: next(i for i, ln in enumerate(lines) if ln.lstrip().startswith(f"%{name} ="))
          for name in ("collective-permute-start", "loop_add_fusion.1", "collective-permute-done")}
    assert at["collective-permute-start"] < at["loop_add_fusion.1"] < at["collective-permute-done"]
    res = fusegen.explain(path)
    (c,) = res.collectives
    e = c["estimate"]
    fusion_us = next(f.estimate["us"] for f in res.fusions if f.name == "loop_add_fusion.1")
    assert e["async"] is True and e["overlapped_with"] == ["loop_add_fusion.1"]
    assert e["overlapped_us"] == pytest.approx(min(fusion_us, e["us"]))
    assert e["exposed_us"] == pytest.approx(e["us"] - e["overlapped_us"])
    assert res.estimated_us["collectives_overlapped_us"] == pytest.approx(e["overlapped_us"])
    # the run's JSON and the module estimate say the same
    doc = fusegen.run(path, compile=False).to_json()
    assert doc["collectives"][0]["estimate"]["exposed_us"] == pytest.approx(e["exposed_us"])
    assert doc["estimated_us"]["collectives_us"] == pytest.approx(res.estimated_us["collectives_us"])
    m = fusegen.api.estimate_module(fusegen.load(path))
    assert m.us == pytest.approx(res.estimated_us["us"], abs=1e-5)


_OVERLAP = """HloModule overlap, is_scheduled=true, num_partitions=8

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%fused_tanh (p: f32[4096,4096]) -> f32[4096,4096] {
  %p = f32[4096,4096]{1,0} parameter(0)
  ROOT %t = f32[4096,4096]{1,0} tanh(%p)
}

ENTRY %e (p0: f32[1048576], p1: f32[4096,4096]) -> (f32[1048576], f32[4096,4096]) {
  %p0 = f32[1048576]{0} parameter(0)
  %p1 = f32[4096,4096]{1,0} parameter(1)
  %ars = f32[1048576]{0} all-reduce-start(%p0), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, to_apply=%add
  %BEFORE
  %ard = f32[1048576]{0} all-reduce-done(%ars)
  %AFTER
  ROOT %r = (f32[1048576]{0}, f32[4096,4096]{1,0}) tuple(%ard, %f)
}
"""
_FUSION = "%f = f32[4096,4096]{1,0} fusion(%p1), kind=kLoop, calls=%fused_tanh"


def test_overlap_is_bounded_by_the_compute_between_start_and_done():
    inside = _OVERLAP.replace("%BEFORE", _FUSION).replace("%AFTER", "")
    after = _OVERLAP.replace("%BEFORE", "").replace("%AFTER", _FUSION)
    hid = fusegen.explain(inside, device=H100)
    (c,) = hid.collectives
    e = c["estimate"]
    f_us = hid.fusions[0].estimate["us"]
    hand = estimate_collective("all-reduce", 4 * 1048576, 8, H100).us
    assert e["us"] == pytest.approx(hand) and e["algorithm"] == "nvls"
    assert e["overlapped_us"] == pytest.approx(min(f_us, hand)) and e["overlapped_with"] == ["f"]
    assert hid.estimated_us["us"] == pytest.approx(f_us + hand - min(f_us, hand), abs=1e-5)
    seq = fusegen.explain(after, device=H100)
    (c2,) = seq.collectives
    assert c2["estimate"]["overlapped_us"] == 0 and c2["estimate"]["async"] is True
    assert seq.estimated_us["us"] == pytest.approx(f_us + hand, abs=1e-5)


@needs_corpus
def test_the_report_shows_each_collective_and_the_total():
    page = fusegen.report(CORPUS_SPMD / "all_to_all_moe.h200x2_opt.hlo", run=False, compile=False)
    rows = page.summary["by_collective"]
    assert [r["kind"] for r in rows] == ["all-to-all", "all-to-all"]
    # f32[64,64] (16 KiB) each: half goes to the peer, LL at a third of the bus bandwidth, one hop
    hand = 6.6 + 0.6 + 8192 / (BUS_H100 / 3) * 1e6
    assert all(r["us"] == pytest.approx(hand, rel=1e-6) for r in rows)
    assert page.summary["estimated_us"]["collectives_us"] == pytest.approx(2 * hand, rel=1e-6)
    assert "hidden under compute" in page.html
