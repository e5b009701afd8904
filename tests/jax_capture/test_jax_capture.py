"""``fusegen capture`` / ``fusegen.capture``: a JAX function compiled deviceless for H200s, run by fusegen.

The capture itself needs jax's CUDA plugin (the ``gpu`` extra; skipped with the reason without it); the target
config fusegen hands jaxlib is checked against XLA's H200 spec as ../shared has it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import SHARED
from fusegen.jax_capture import CaptureError, parse_arg_spec, parse_spec, target_config_text
from fusegen.cli.main import cli
from fusegen.device import from_target_config_text, get_device

HAS_PLUGIN = find_spec("jax_plugins") is not None and find_spec("jax_plugins.xla_cuda12") is not None
needs_plugin = pytest.mark.skipif(not HAS_PLUGIN, reason="jax's CUDA plugin is not installed (pip install -e '.[capture]')")

PROGRAM = '''
import jax, jax.numpy as jnp
from jax import lax

def ring(x, mesh):
    n = mesh.shape["d"]
    perm = [(i, (i + 1) % n) for i in range(n)]
    body = lambda x: lax.fori_loop(0, n - 1, lambda _, a: 0.5 * a + lax.ppermute(a, "d", perm), x)
    return jax.shard_map(body, mesh=mesh, in_specs=jax.P("d"), out_specs=jax.P("d"))(x)

def megatron(x, w1, w2):
    return jax.nn.gelu(x @ w1) @ w2
'''


def test_target_config_is_xlas_h200_spec():
    spec = (SHARED / "tools" / "jax_gpu_hlo" / "h200_min.txtpb")
    if not spec.exists():
        pytest.skip(f"{spec} is absent")
    ours = from_target_config_text(target_config_text(get_device("h200")))
    xla = from_target_config_text(spec.read_text())
    assert ours == xla


def test_specs():
    assert parse_arg_spec("f32[64,128]") == ((64, 128), np.dtype(np.float32))
    assert parse_arg_spec("s32[]") == ((), np.dtype(np.int32))
    assert parse_spec("d,None") == ("d", None) and parse_spec("") == ()
    with pytest.raises(CaptureError, match="TYPE\\[dims\\]"):
        parse_arg_spec("f32(3)")
    with pytest.raises(CaptureError, match="unknown element type 'float'"):
        parse_arg_spec("float[3]")


@needs_plugin
def test_capture_for_four_h200s_then_run(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    out = tmp_path / "out"
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    cmd = [sys.executable, "-m", "fusegen.cli.__main__", "capture", f"{script}:ring", "--args", "f32[32,16]",
           "--mesh", "4", "--in-shardings", "d", "-o", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    base = out / "ring.h200x4"
    text = (out / "ring.h200x4_opt.hlo").read_text()
    assert "num_partitions=4" in text and "collective-permute" in text and " while(" in text
    res = CliRunner().invoke(cli, ["run", str(out / "ring.h200x4_opt.hlo"), "--inputs", f"{base}.inputs.npz",
                                   "--expected", f"{base}.expected.npz", "--no-compile", "--json", "--jobs", "1"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["num_partitions"] == 4 and doc["status"] == "ok"
    # jax's output sharding, stored beside the module and read by the run (docs/spmd.md#output-shardings)
    side = json.loads((out / "ring.h200x4.shardings.json").read_text())
    assert "ring.h200x4.shardings.json" in proc.stdout and side["module"] == "jit_ring"
    assert [o["sharding"] for o in side["outputs"]] == ["{devices=[4,1]<=[4]}"]
    assert doc["output_sharding_sources"][0]["source"] == "capture"
    with np.load(f"{base}.inputs.npz") as i, np.load(f"{base}.expected.npz") as e:
        assert i["p0"].shape == (32, 16) and e["o0"].shape == (32, 16)


def test_capture_names_a_missing_function(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    res = CliRunner().invoke(cli, ["capture", f"{script}:nope", "--args", "f32[4]", "-o", str(tmp_path)])
    assert res.exit_code == 2 and "no function 'nope'" in res.output


def test_capture_command_with_fusegen_pipeline_then_run(tmp_path):
    """``--compiler fusegen``: CPU jax lowers, fusegen's pipeline fuses; the files run against XLA:CPU's answer."""
    pytest.importorskip("jax")
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["capture", f"{script}:megatron", "--args", "f32[8,16]", "--args", "f32[16,32]",
                                   "--args", "f32[32,8]", "--compiler", "fusegen", "-o", str(out)])
    assert res.exit_code == 0, res.output
    base = out / "megatron.h200"
    assert "fusion" not in (out / "megatron.h200.hlo").read_text()  # unoptimized: fusegen's pipeline fuses it
    res = CliRunner().invoke(cli, ["run", str(out / "megatron.h200.hlo"), "--inputs", f"{base}.inputs.npz",
                                   "--expected", f"{base}.expected.npz", "--no-compile", "--json", "--jobs", "1"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["status"] in ("ok", "drift") and {f["kind"] for f in doc["fusions"]} >= {"kTriton"}
    assert all(o.get("kernel_vs_expected") is not None for o in doc["outputs"])


#: jax started without JAX_PLATFORMS=cpu (a notebook's default): on a machine without the CUDA libraries the
#: CUDA plugin fails its version check at jax's first use and jax goes on without it.
_STARTED_JAX = """
import jax, jax.numpy as jnp
x = jnp.arange(4.0) * 2
import fusegen
c = fusegen.capture(lambda a: jnp.sin(a) * 2, x)
print(c.devices, c.compiler, "HloModule" in c.text, jax.default_backend())
"""


@needs_plugin
def test_capture_after_jax_started_without_jax_platforms():
    """The README's session as a notebook runs it: jax used before the capture, JAX_PLATFORMS unset. The
    deviceless compile needs no CUDA, so the capture registers the plugin jax left out."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    p = subprocess.run([sys.executable, "-c", _STARTED_JAX], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split()[:3] == ["1", "xla", "True"]


IN_MEMORY = '''
import json, os
os.environ["JAX_PLATFORMS"] = "cpu"
import jax, numpy as np
from jax.sharding import PartitionSpec as P
import fusegen

def scale(x):  # the output transposed over the mesh: P("b", "a"), which no parameter has
    return 2.0 * x.T

x = np.arange(32, dtype=np.float32).reshape(4, 8)
c = fusegen.capture(scale, x, mesh={"a": 2, "b": 2}, in_shardings=P("a", "b"), out_shardings=P("b", "a"))
r = fusegen.run(c, compile=False)
print(json.dumps({"status": r.status, "texts": list(c.out_shardings), "sources": r.output_sharding_sources}))
'''


@needs_plugin
@pytest.mark.slow
def test_a_capture_in_memory_runs_with_the_output_shardings_jax_states():
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, "-c", IN_MEMORY], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["status"] == "ok" and doc["texts"] == ["{devices=[2,2]<=[2,2]T(1,0)}"]
    (src,) = doc["sources"]
    assert src["source"] == "capture" and src["from"] == "fusegen.capture of scale" and not src["inferred"]
