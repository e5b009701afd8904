"""The shared SPMD programs (../shared/corpus/spmd/, XLA's per-partition modules for 2 H200s) run as both
partitions: global inputs in, global outputs out, judged against XLA:CPU's global answer; the folder of
per-partition shards gives the same outputs; a planted identity all-reduce is a mismatch, not an ok."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import CORPUS
from fusegen.cli.main import cli

SPMD = CORPUS / "spmd"
NAMES = sorted(p.name[: -len(".h200x2_opt.hlo")] for p in SPMD.glob("*.h200x2_opt.hlo")) if SPMD.exists() else []
pytestmark = pytest.mark.skipif(not NAMES, reason=f"{SPMD} is absent")


def _run(args):
    res = CliRunner().invoke(cli, ["run", *map(str, args), "--no-compile", "--json", "--jobs", "1"])
    return res, (json.loads(res.output) if res.output.lstrip().startswith("{") else None)


@pytest.mark.parametrize("name", NAMES)
def test_global_and_per_partition_runs_agree_with_xla(name, tmp_path):
    hlo, base = SPMD / f"{name}.h200x2_opt.hlo", SPMD / f"{name}.h200x2"
    res, doc = _run([hlo, "--inputs", f"{base}.inputs.npz", "--expected", f"{base}.expected.npz",
                     "--save-outputs", tmp_path / "global.npz"])
    assert res.exit_code == 0, res.output
    assert doc["status"] in ("ok", "drift") and doc["num_partitions"] == 2 and doc["replica_count"] == 1
    assert all(o["kernel_vs_expected"] <= o["allowed_vs_expected"] for o in doc["outputs"])
    opcodes = {c["opcode"] for c in doc["collectives"]}
    index = {r.split("\t")[0]: r.split("\t")[4] for r in (SPMD / "INDEX.tsv").read_text().splitlines()[1:]}
    want = {o for o in index[hlo.name].split(",") if o.endswith("-start") or o in ("all-reduce", "all-gather")}
    assert opcodes == want
    res2, doc2 = _run([hlo, "--inputs", f"{base}.parts", "--expected", f"{base}.parts",
                       "--save-outputs", tmp_path / "parts.npz"])
    assert res2.exit_code == 0, res2.output
    assert doc2["status"] == doc["status"] and doc2["num_partitions"] == 2
    with np.load(tmp_path / "global.npz") as g, np.load(tmp_path / "parts.npz") as p, \
            np.load(f"{base}.expected.npz") as e:
        assert sorted(g.files) == sorted(e.files)
        for k in e.files:
            assert g[k].shape == e[k].shape
            np.testing.assert_array_equal(g[k], p[k])
            # the expected answer multiplies in IEEE f32, fusegen at tf32 as XLA:GPU (the verdict's per-element
            # allowance above is the tight check): within tf32's rounding of the output's scale
            np.testing.assert_allclose(g[k], e[k], rtol=0, atol=4e-3 * max(1.0, float(np.abs(e[k]).max())))


def test_planted_identity_all_reduce_is_a_mismatch(monkeypatch):
    """The host path's all-reduce answered as the identity (the old single-device shortcut)."""
    from fusegen.runtime import spmd

    real = spmd.exchange
    monkeypatch.setattr(spmd, "exchange", lambda inst, c, pairs=None: (
        [x[0] for x in c] if inst.opcode.startswith("all-reduce") else real(inst, c, pairs=pairs)))
    base = SPMD / "dp_mlp_train.h200x2"
    res, doc = _run([SPMD / "dp_mlp_train.h200x2_opt.hlo", "--inputs", f"{base}.inputs.npz"])
    assert res.exit_code == 1, res.output
    assert doc["status"] == "mismatch" and doc["collectives"][0]["backend"] == "host"


def test_one_shot_all_reduce_runs_its_triton_kernel_and_a_wrong_one_is_a_mismatch(monkeypatch):
    """tp_mlp_megatron's all-reduce is XLA's KERNEL_STRATEGY_TRITON_ONE_SHOT: the generated kernel over both
    partitions' buffers serves it (sm_90 compile too); a kernel that drops the peers' buffers is a mismatch."""
    from fusegen.codegen import collective_kernel

    hlo, base = SPMD / "tp_mlp_megatron.h200x2_opt.hlo", SPMD / "tp_mlp_megatron.h200x2"
    res = CliRunner().invoke(cli, ["run", str(hlo), "--inputs", f"{base}.inputs.npz", "--expected",
                                   f"{base}.expected.npz", "--json", "--jobs", "1"])
    assert res.exit_code == 0, res.output
    (c,) = json.loads(res.output)["collectives"]
    assert c["backend"] == "triton" and c["kernel"] == "one_shot_all_reduce_add_f32_x2"
    assert c["compiled_sm90"].startswith("ok")
    monkeypatch.setitem(collective_kernel._COMBINE, "add", "{a}")  # the peers' loads are dropped
    res, doc = _run([hlo, "--inputs", f"{base}.inputs.npz", "--expected", f"{base}.expected.npz"])
    assert res.exit_code == 1, res.output
    assert doc["status"] == "mismatch" and doc["outputs"][0]["kernel_vs_expected"] > 1.0


def test_seeded_run_without_inputs_runs_both_partitions():
    res, doc = _run([SPMD / "ring_ppermute.h200x2_opt.hlo"])
    assert res.exit_code == 0, res.output
    assert doc["num_partitions"] == 2 and doc["collectives"][0]["source_target_pairs"] == [[0, 1], [1, 0]]


def test_global_inputs_of_the_wrong_shape_are_bad_input(tmp_path):
    bad = tmp_path / "in.npz"
    np.savez(bad, p0=np.zeros((32, 256), np.float32))  # one partition's shard, not the global array
    res, _ = _run([SPMD / "ring_ppermute.h200x2_opt.hlo", "--inputs", bad])
    assert res.exit_code == 2
    assert "one partition's shard" in res.output and "%param.1" in res.output


def test_global_inputs_are_header_checked_before_they_are_read(tmp_path):
    # a member inflating past what its header describes is refused as for one device (no 10 MB read)
    import zipfile
    header = tmp_path / "h.npy"
    np.save(header, np.zeros((64, 256), np.float32))
    bomb = tmp_path / "in.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("p0.npy", header.read_bytes() + bytes(10 << 20))
    res, _ = _run([SPMD / "ring_ppermute.h200x2_opt.hlo", "--inputs", bomb])
    assert res.exit_code == 2
    assert "inflates to" in res.output and "in.npz" in res.output


def test_explain_lists_partitions_and_collectives():
    res = CliRunner().invoke(cli, ["explain", str(SPMD / "tp_mlp_seqpar.h200x2_opt.hlo"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["num_partitions"] == 2
    rows = {c["opcode"]: c for c in doc["collectives"]}
    # x[32,128] f32 shard gathered; the [64,128] f32 partial product scattered
    assert rows["all-gather-start"]["bytes_per_partition"] == 32 * 128 * 4
    assert rows["reduce-scatter-start"]["bytes_per_partition"] == 64 * 128 * 4
    assert rows["all-gather-start"]["groups"] == [[0, 1]] and rows["all-gather-start"]["channel_id"] == 1
    text = CliRunner().invoke(cli, ["explain", str(SPMD / "tp_mlp_seqpar.h200x2_opt.hlo")]).output
    assert "num_partitions=2" in text and "%reduce-scatter-start reduce-scatter-start" in text


def test_report_run_runs_both_partitions(tmp_path):
    res = CliRunner().invoke(cli, ["report", str(SPMD / "sum_reduce_scatter.h200x2_opt.hlo"), "--run", "--no-compile",
                                   "-o", str(tmp_path / "r.html"), "--json-data", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "r.json").read_text())
    m = doc["modules"][0]
    assert m["status"] == "ok" and m["num_partitions"] == 2
    labels = [n["label"] for n in m["graph"]["nodes"] if n["name"] == "reduce-scatter-start"]
    assert labels == ["reduce-scatter-start [[0, 1]] 512 B/partition · host"]  # f32[128] from each partition


EIGHT = Path(__file__).parents[1] / "data" / "spmd"
EIGHT_NAMES = sorted(p.name[: -len(".h200x8_opt.hlo")] for p in EIGHT.glob("*.h200x8_opt.hlo"))


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n == "ring_ppermute" else [pytest.mark.slow])
                                  for n in EIGHT_NAMES])
def test_eight_partition_programs_match_xla(name, tmp_path):
    """scripts/gen_spmd_programs.py's programs for 8 H200s (ring_ppermute: its ppermute inside a while loop)."""
    hlo, base = EIGHT / f"{name}.h200x8_opt.hlo", EIGHT / f"{name}.h200x8"
    res, doc = _run([hlo, "--inputs", f"{base}.inputs.npz", "--expected", f"{base}.expected.npz",
                     "--save-outputs", tmp_path / "out.npz"])
    assert res.exit_code == 0, res.output
    assert doc["status"] in ("ok", "drift") and doc["num_partitions"] == 8
    assert all(o["kernel_vs_expected"] <= o["allowed_vs_expected"] for o in doc["outputs"])
    with np.load(tmp_path / "out.npz") as g, np.load(f"{base}.expected.npz") as e:
        for k in e.files:
            # the expected answer multiplies in IEEE f32, fusegen at tf32 as XLA:GPU (the verdict's per-element
            # allowance above is the tight check): within tf32's rounding of the output's scale
            np.testing.assert_allclose(g[k], e[k], rtol=0, atol=4e-3 * max(1.0, float(np.abs(e[k]).max())))
    if name == "ring_ppermute":
        assert " while(" in hlo.read_text() and doc["collectives"][0]["opcode"] == "collective-permute-start"
        assert len(doc["collectives"][0]["source_target_pairs"]) == 8


def test_library_run_takes_global_arrays_of_a_multi_device_module():
    from fusegen import api

    hlo, base = SPMD / "tp_mlp_seqpar.h200x2_opt.hlo", SPMD / "tp_mlp_seqpar.h200x2"
    with np.load(f"{base}.inputs.npz") as i, np.load(f"{base}.expected.npz") as e:
        arrays, want = [i[f"p{k}"] for k in range(5)], e["o0"]
    r = api.run(str(hlo), inputs=arrays, expected=f"{base}.expected.npz", compile=False)
    assert r.status == "ok" and r.reports[0].num_partitions == 2
    # tf32 dots (XLA:GPU) against the expected IEEE f32 answer: within tf32's rounding of the output's scale
    np.testing.assert_allclose(np.asarray(r.outputs), want, rtol=0, atol=4e-3 * max(1.0, float(np.abs(want).max())))
