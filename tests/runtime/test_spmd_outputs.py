"""Where an SPMD run's output shardings come from (fusegen.runtime.spmd_outputs), on a 2-D mesh.

``dp_tp_mlp_train`` (tests/data/spmd, ``scripts/gen_spmd_programs.py --mesh2d``): one SGD-with-momentum step of a
2-layer MLP for 8 H200s on a ``dp=2 x tp=4`` mesh, weights sharded on ``tp``, the batch on ``dp``, returning the
new parameters, the new momentum and the loss; XLA:CPU's global outputs over 8 host devices are the answer, and
the per-partition folder holds the shards jax itself placed on each device (``Array.addressable_shards``), an
answer independent of fusegen's sharding code. Its weights' sharding ``{devices=[1,4,2]<=[2,4]T(1,0) ...}`` is
not the row-major order the shapes alone suggest, which made the old inference a false mismatch.

The small hand-written modules check each rule on its own: ambiguous parameters, aliases, a stated sharding,
"cannot tell", and a collective-permute sending a tile to the wrong device (a mismatch whenever the sharding
is known, and never hidden by a candidate sharding when the kernel path alone is wrong).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fusegen.cli.main import cli
from fusegen.hlo.parser import parse_module
from fusegen.hlo.sharding import parse_sharding
from fusegen.runtime.inputs import InputError
from fusegen.runtime.sharding_sidecar import read_sidecar, sidecar_path, stated_shardings, write_sidecar
from fusegen.runtime.spmd_io import split_inputs
from fusegen.runtime.spmd_outputs import resolve_output_shardings, row_major_guess
from fusegen.evaluator.spmd_plan import plan_spmd
from fusegen.verify.judged_run import run_spmd_module

DATA = Path(__file__).parents[1] / "data" / "spmd"
STEP = DATA / "dp_tp_mlp_train.h200x8"
HLO = DATA / "dp_tp_mlp_train.h200x8_opt.hlo"
TP = "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}"  # jax's P(None, 'tp') on Mesh(dp=2, tp=4)


def _run(*args):
    res = CliRunner().invoke(cli, ["run", *map(str, args), "--no-compile", "--json", "--jobs", "1"])
    return res, (json.loads(res.output) if res.output.lstrip().startswith("{") else None)


def _run_f32(*args):
    """:func:`_run` with the dots in IEEE f32 (``--default-matmul-precision highest``), the arithmetic of the
    expected answers (XLA:CPU), so the outputs are ``ok`` and equal them to f32's rounding; at XLA:GPU's
    default tf32 the kernels' backprop outputs are ``drift`` from the reference (1e-4 relative)."""
    res = CliRunner().invoke(cli, ["run", *map(str, args), "--no-compile", "--json", "--jobs", "1",
                                   "--default-matmul-precision", "highest"])
    return res, (json.loads(res.output) if res.output.lstrip().startswith("{") else None)


def _bare(tmp_path: Path, text: str | None = None) -> Path:
    """The training step's module in ``tmp_path`` without its sidecar (``text``: edited)."""
    hlo = tmp_path / HLO.name
    hlo.write_text(text if text is not None else HLO.read_text())
    return hlo


def _expected(name: str = "expected") -> list[np.ndarray]:
    with np.load(f"{STEP}.{name}.npz") as e:
        return [e[f"o{i}"] for i in range(len(e.files))]


# --------------------------------------------------------------------------------- the 2-D training step
def test_from_global_arrays_the_captures_shardings_make_it_ok(tmp_path):
    res, doc = _run_f32(HLO, "--inputs", f"{STEP}.inputs.npz", "--expected", f"{STEP}.expected.npz",
                        "--save-outputs", tmp_path / "out.npz")
    assert res.exit_code == 0, res.output
    assert doc["status"] == "ok" and doc["num_partitions"] == 8
    src = doc["output_sharding_sources"]
    assert [s["source"] for s in src] == ["capture"] * 9 and src[0]["from"] == str(sidecar_path(HLO))
    assert src[0]["sharding"] == TP and not any(s["inferred"] for s in src)
    opcodes = {(c["opcode"], tuple(map(tuple, c["groups"]))) for c in doc["collectives"]}
    assert ("all-reduce-start", ((0, 1, 2, 3), (4, 5, 6, 7))) in opcodes  # tp
    assert ("all-reduce-start", ((0, 4), (1, 5), (2, 6), (3, 7))) in opcodes  # dp: the gradients
    with np.load(tmp_path / "out.npz") as g:
        for i, e in enumerate(_expected()):
            np.testing.assert_allclose(g[f"o{i}"], e, rtol=1e-5, atol=1e-6)
    # jax's own per-device shards: the sidecar's shardings cut XLA:CPU's global answer into exactly them,
    # and the row-major order the shapes suggest would not (the old false mismatch)
    parts = [np.load(STEP.with_name(STEP.name + ".parts") / f"part{k}.expected.npz") for k in range(8)]
    stated = stated_shardings(parse_module(HLO.read_text(), str(HLO)))
    e0 = _expected()[0]
    for k in range(8):
        np.testing.assert_array_equal(stated.shardings[0].shard(e0, k), parts[k]["o0"])
    guess = row_major_guess(parts[0]["o0"].shape, e0.shape, 8)
    assert guess.text != TP and not np.array_equal(guess.assemble([p["o0"] for p in parts]), e0)


def test_without_the_sidecar_the_parameters_say_it_and_the_lines_say_so(tmp_path):
    from fusegen import api

    cfg = tmp_path / "fusegen.toml"
    cfg.write_text('[pipeline]\ndefault_matmul_precision = "highest"\n')  # the expected answers' IEEE f32 (_run_f32)
    r = api.run(str(_bare(tmp_path)), inputs=f"{STEP}.inputs.npz", expected=f"{STEP}.expected.npz", compile=False,
                config=str(cfg))
    assert r.ok and r.status == "ok"
    src = r.output_sharding_sources
    assert [s["source"] for s in src] == ["parameter"] * 3 + ["replicated"] + ["parameter"] * 3 + ["replicated"] * 2
    assert all(s["inferred"] for s in src)
    # w1 and its momentum: both parameters of that per-partition shape say jax's tp sharding
    assert src[0]["sharding"] == TP and src[0]["from"].startswith("parameter 0 (%param) and parameter 4 (%param.1)")
    lines = r.verdict.lines()  # what fusegen run prints under the table
    assert f"o0: sharding {TP} from parameter 0 (%param) and parameter 4 (%param.1) (same per-partition shape) " \
           "(inferred)" in lines and len(lines) == 9


def test_from_per_partition_folders_ok():
    parts = STEP.with_name(STEP.name + ".parts")
    res, doc = _run_f32(HLO, "--inputs", parts, "--expected", parts)
    assert res.exit_code == 0, res.output
    assert doc["status"] == "ok" and all(o["status"] == "ok" for o in doc["outputs"])
    res, doc = _run(HLO, "--inputs", parts, "--expected", parts)  # at tf32, as XLA:GPU: no mismatch either
    assert res.exit_code == 0 and doc["status"] in ("ok", "drift"), res.output


def test_a_dp_all_reduce_summing_the_wrong_partners_is_a_mismatch_with_the_sidecar(tmp_path):
    """The gradients' all-reduce over dp pairs device 0 with 5 and 1 with 4 (kernel, reference and f64 alike)."""
    good = "replica_groups={{0,4},{1,5},{2,6},{3,7}}"
    text = HLO.read_text()
    assert text.count(good) == 1
    hlo = _bare(tmp_path, text.replace(good, "replica_groups={{0,5},{1,4},{2,6},{3,7}}"))
    shutil.copy(sidecar_path(HLO), sidecar_path(hlo))
    res, doc = _run(hlo, "--inputs", f"{STEP}.inputs.npz", "--expected", f"{STEP}.expected.npz")
    assert res.exit_code == 1, res.output
    assert doc["status"] == "mismatch" and doc["outputs"][0]["status"] == "mismatch"
    assert doc["outputs"][0]["kernel_vs_expected"] > 1e-3


# ------------------------------------------------------------------------------- small modules, one rule each
AB = """HloModule ab, num_partitions=8{alias}

ENTRY %main (a: f32[4,4], b: f32[4,4]) -> f32[4,4] {{
  %a = f32[4,4]{{1,0}} parameter(0), sharding={{devices=[2,4]<=[8]}}
  %b = f32[4,4]{{1,0}} parameter(1), sharding={{devices=[2,4]<=[4,2]T(1,0)}}
  ROOT %y = f32[4,4]{{1,0}} {root}
}}
"""
A, B = parse_sharding("{devices=[2,4]<=[8]}"), parse_sharding("{devices=[2,4]<=[4,2]T(1,0)}")
#: the tile (row, column) each device holds under B, by numpy: iota(8).reshape(4,2).T.reshape(2,4)
B_TILES = np.arange(8).reshape(4, 2).T.reshape(2, 4)


def _tile(g: np.ndarray, pos: tuple[int, int]) -> np.ndarray:
    return g[pos[0] * 4:(pos[0] + 1) * 4, pos[1] * 4:(pos[1] + 1) * 4]


def _b_layout(shards: dict[int, np.ndarray]) -> np.ndarray:
    """The global array whose tile at B's position of device d is ``shards[d]``."""
    out = np.zeros((8, 16), np.float32)
    for r in range(2):
        for c in range(4):
            out[r * 4:(r + 1) * 4, c * 4:(c + 1) * 4] = shards[int(B_TILES[r, c])]
    return out


def _ab(root: str, alias: str = "", expected=None, name: str = "ab", tmp: Path | None = None, **kw):
    text = AB.format(root=root, alias=f", input_output_alias={{ {{}}: ({alias}, {{}}, may-alias) }}" if alias else "")
    path = str(tmp / f"{name}_opt.hlo") if tmp is not None else "<text>"
    if tmp is not None:
        Path(path).write_text(text)
    m = parse_module(text, path)
    rng = np.random.default_rng(3)
    ga, gb = (rng.standard_normal((8, 16)).astype(np.float32) for _ in range(2))
    plan = plan_spmd(m)
    args = split_inputs(m, plan, [ga, gb], "test")
    want = expected(ga, gb) if expected is not None else None
    _, out, rep = run_spmd_module(m, args, compile_kernels=False, expected=[want] if want is not None else None,
                                  plan=plan, **kw)
    return m, rep, out, ga, gb


def test_parameters_that_disagree_are_ambiguous_and_the_candidate_that_explains_it_is_named():
    m, rep, out, ga, gb = _ab("negate(%b)", expected=lambda a, b: -b)
    (src,) = rep.output_sharding_sources
    assert rep.ok and rep.status == "ok"
    assert src["source"] == "parameter" and src["from"].startswith("parameter 1 (%b)") and src["inferred"]
    assert "row-major guess" in src["note"] and "ambiguous" in src["note"]
    np.testing.assert_array_equal(out, -gb)
    assert rep.verdict.outputs[0].reason.startswith("judged with {devices=[2,4]<=[4,2]T(1,0)}")


def test_no_fitting_sharding_explains_it_cannot_tell_not_a_mismatch():
    def rotated(a, b):  # device d's tile of -b put where B places device (d + 1) % 8: no sharding that fits
        return _b_layout({(d + 1) % 8: -_tile(b, tuple(int(x) for x in np.argwhere(B_TILES == d)[0]))
                          for d in range(8)})

    m, rep, out, ga, gb = _ab("negate(%b)", expected=rotated)
    assert rep.status == "undetermined" and not rep.ok and rep.outputs_ok
    v = rep.verdict.outputs[0]
    assert v.status == "undetermined" and v.reason.startswith("cannot tell")
    assert "{devices=[2,4]<=[8]}" in v.reason and "{devices=[2,4]<=[4,2]T(1,0)}" in v.reason
    assert any("(inferred)" in line for line in rep.verdict.lines())


def test_without_a_global_expected_the_sources_say_what_assembled_the_outputs():
    m = parse_module(AB.format(root="negate(%b)", alias=""), "<t>")
    plan = plan_spmd(m)
    same = [[np.ones((4, 4), np.float32)] for _ in range(8)]
    differ = [[np.full((4, 4), d, np.float32)] for d in range(8)]
    assert resolve_output_shardings(m, plan, same, None)[0].source == "agree"
    (leaf,) = resolve_output_shardings(m, plan, differ, None)
    assert leaf.source == "parameter" and leaf.inferred and leaf.sharding.text == A.text
    assert "ambiguous: parameter 1 (%b)" in leaf.detail and B.text in leaf.detail


@pytest.mark.parametrize("param, ok", [(1, True), (0, False)])
def test_an_aliased_parameter_states_the_sharding(param, ok):
    """A donated input (``input_output_alias``): its sharding is the output's, and no other is tried."""
    m, rep, out, ga, gb = _ab("negate(%b)", alias=str(param), expected=lambda a, b: -b)
    (src,) = rep.output_sharding_sources
    assert src["source"] == "alias" and not src["inferred"] and src["from"].startswith(f"parameter {param} (%")
    assert rep.status == ("ok" if ok else "mismatch") and rep.ok is ok


def test_a_sidecar_beside_the_module_states_it_and_is_checked(tmp_path):
    m, rep, out, ga, gb = _ab("negate(%b)", expected=lambda a, b: -b, tmp=tmp_path)
    side = sidecar_path(tmp_path / "ab_opt.hlo")
    assert side == tmp_path / "ab.shardings.json"
    write_sidecar(side, m, [A.text], [np.zeros((8, 16), np.float32)])  # stating A, which is wrong here
    m, rep, out, ga, gb = _ab("negate(%b)", expected=lambda a, b: -b, tmp=tmp_path)
    assert rep.output_sharding_sources[0]["source"] == "capture" and rep.status == "mismatch"
    write_sidecar(side, m, [B.text], [np.zeros((8, 16), np.float32)])
    m, rep, out, ga, gb = _ab("negate(%b)", expected=lambda a, b: -b, tmp=tmp_path)
    assert rep.status == "ok" and rep.output_sharding_sources[0]["from"] == str(side)
    good = side.read_text()
    for bad, why in [({"module": "other"}, "written for module 'other', not 'ab'"),
                     ({"outputs": [{"sharding": B.text, "shape": [8, 12], "dtype": "float32"}]},
                      "cuts the global shape [8, 12] into [4, 3]"),
                     ({"outputs": [{"sharding": "{devices=[2,4]<=[8]}", "shape": [8, 16], "dtype": "int32"}]},
                      "output o0 is int32, the module's o0 f32"),
                     ({"format": "v0"}, "format 'v0'")]:
        doc = json.loads(good) | bad
        side.write_text(json.dumps(doc))
        with pytest.raises(InputError, match=f"^{side}: .*" + why.replace("[", r"\[").replace("(", r"\(")):
            read_sidecar(side, m)
    side.write_text("{not json")
    res, _ = _run(tmp_path / "ab_opt.hlo")
    assert res.exit_code == 2 and f"{side}: not a JSON file of output shardings" in res.output


PERMUTE = """HloModule ring, num_partitions=8

ENTRY %main (x: f32[4,4]) -> f32[4,4] {{
  %x = f32[4,4]{{1,0}} parameter(0), sharding={{devices=[2,4]<=[4,2]T(1,0)}}
  ROOT %y = f32[4,4]{{1,0}} collective-permute(%x), channel_id=1, source_target_pairs={{{pairs}}}
}}
"""
RING = [(d, (d + 1) % 8) for d in range(8)]


def _ring(pairs, stated: bool, tmp_path: Path):
    text = PERMUTE.format(pairs=",".join(f"{{{s},{t}}}" for s, t in pairs))
    hlo = tmp_path / "ring_opt.hlo"
    hlo.write_text(text)
    m = parse_module(text, str(hlo))
    if stated:
        write_sidecar(sidecar_path(hlo), m, [B.text], [np.zeros((8, 16), np.float32)])
    gx = np.random.default_rng(5).standard_normal((8, 16)).astype(np.float32)
    # XLA's collective-permute on the ring: device t receives device s's tile
    want = _b_layout({t: _tile(gx, tuple(int(v) for v in np.argwhere(B_TILES == s)[0])) for s, t in RING})
    plan = plan_spmd(m)
    _, out, rep = run_spmd_module(m, split_inputs(m, plan, [gx], "test"), compile_kernels=False, expected=[want],
                                  plan=plan)
    return rep


def test_the_ring_permute_is_ok_from_its_parameters_sharding(tmp_path):
    rep = _ring(RING, False, tmp_path)
    assert rep.status == "ok" and rep.output_sharding_sources[0]["source"] == "parameter"


@pytest.mark.parametrize("stated", [True, False])
def test_a_permute_sending_a_tile_to_the_wrong_device(stated, tmp_path):
    """Device 3's tile goes to 5 and 4's to 4 instead: the module's semantics, so kernel, reference and f64
    agree; only the expected answer tells, and with the sharding stated it is a mismatch. Inferred, no
    fitting sharding explains it either: "cannot tell", which is not a pass."""
    wrong = [(3, 5) if p == (3, 4) else (4, 4) if p == (4, 5) else p for p in RING]
    rep = _ring(wrong, stated, tmp_path)
    assert not rep.ok
    assert rep.status == ("mismatch" if stated else "undetermined")
    assert rep.output_sharding_sources[0]["source"] == ("capture" if stated else "parameter")


def test_a_kernel_path_permute_bug_is_a_mismatch_even_when_the_sharding_is_inferred(monkeypatch, tmp_path):
    """The kernel path's exchange answers the permute with the wrong pairs; the reference and the f64
    oracle (written apart) do not: a mismatch whatever the sharding, never "cannot tell" nor a candidate's ok."""
    from fusegen.runtime import spmd

    real = spmd.exchange

    def swapped(inst, contributions, pairs=None):
        if inst.opcode.startswith("collective-permute"):
            pairs = [(s, (t + 1) % 8) for s, t in pairs]
        return real(inst, contributions, pairs=pairs)

    monkeypatch.setattr(spmd, "exchange", swapped)
    rep = _ring(RING, False, tmp_path)
    assert rep.status == "mismatch" and rep.verdict.outputs[0].status == "mismatch"
    assert rep.output_sharding_sources[0]["source"] == "parameter" and "note" not in rep.output_sharding_sources[0]
