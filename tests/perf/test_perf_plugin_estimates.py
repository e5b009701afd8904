"""Third-party codegen backends and the cost model: the estimate hook, and no starving either way.

Two backends in one plugin distribution, pip-installed into a fresh venv as a user installs it
(:class:`venv_plugins.PluginVenv`), tune a small ``__triton_gemm`` fusion beside the built-in Triton backend:

* ``noest_gemm`` gives no estimate (``estimate_seconds`` left at ``None``) and fusegen cannot read its configs. Without
  a GPU it ranks after every estimated config, so the built-in Triton configs (estimated by fusegen.perf) win; when
  timing (``--measure-on-cpu --cost-model-top-k 2``) its configs are timed *beside* Triton's top 2, never instead of
  them (issue 30: before, a backend without an estimate took every slot of the top-k).
* ``est_gemm`` gives its own estimate through the hook: it takes part in the ranking, and the cache entry says the
  figure was estimated by ``backend:est_gemm``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from venv_plugins import PluginVenv, write_project

GEMM = """HloModule small_gemm
triton_gemm_dot {
  p0 = f32[64,128] parameter(0)
  p1 = f32[128,64] parameter(1)
  ROOT dot = f32[64,64] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
ENTRY e {
  p0 = f32[64,128] parameter(0)
  p1 = f32[128,64] parameter(1)
  ROOT f = f32[64,64] fusion(p0, p1), kind=kCustom, calls=triton_gemm_dot,
    backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}
}
"""

BACKENDS = '''from fusegen.codegen_backend import CodegenBackend, Config
from fusegen.plugin_manager import hookimpl


class _Gemm(CodegenBackend):
    version = "1"
    compiles_in_process = True

    def get_supported_configs(self, instr):
        if instr.opcode != "fusion" or instr.fusion_backend_kind != "__triton_gemm":
            return []
        return [Config(self.name, {"variant": v}) for v in range(3)]

    def compile(self, instr, config):
        from fusegen_plugins.backends.host import HostExecutable

        return HostExecutable(instr)

    def apply_config(self, instr, config):
        bc = dict(instr.backend_config)
        bc["fusion_backend_config"] = {**bc.get("fusion_backend_config", {}), "chosen": config.name}
        instr.attrs["backend_config"] = bc


'''

NO_ESTIMATE = BACKENDS + '''

class NoEstimate(_Gemm):
    name = "noest_gemm"


@hookimpl
def fusegen_codegen_backends():
    return [NoEstimate()]
'''

OWN_ESTIMATE = BACKENDS + '''

class OwnEstimate(_Gemm):
    name = "est_gemm"

    def estimate_seconds(self, instr, config, device):
        return 1e-9 * (1 + config.values["variant"])  # faster than anything: 1 ns


@hookimpl
def fusegen_codegen_backends():
    return [OwnEstimate()]
'''


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("estimates")
    v = PluginVenv(root / "venv")
    v.install(write_project(root / "proj", "gemm-estimates", {"gemm_noest": NO_ESTIMATE, "gemm_est": OWN_ESTIMATE},
                            {"fusegen.backends": {"noest": "gemm_noest", "own": "gemm_est"}}))
    (root / "gemm.hlo").write_text(GEMM)
    return v, root


def _tune(venv, root: Path, dists: str, *args: str) -> dict:
    v = venv
    p = v.run("-m", "fusegen.cli", "tune", str(root / "gemm.hlo"), "--json", "--workers", "0", *args, cwd=root,
              env={"FUSEGEN_AUTOLOAD_DISTRIBUTIONS": dists, "FUSEGEN_DISABLE_PLUGIN_AUTOLOAD": "0",
                   "FUSEGEN_LOAD_PLUGINS": "", "FUSEGEN_STRICT_PLUGINS": "1"})
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    (rep,) = json.loads(p.stdout)["instructions"]
    return rep


def test_a_backend_without_an_estimate_ranks_after_the_estimated_configs(venv, tmp_path):
    v, root = venv
    rep = _tune(v, root, "fusegen,gemm-estimates", "--backends", "triton,noest_gemm", "--cache-dir", str(tmp_path))
    assert rep["supported"] == rep["configs"] == 25 + 3 and rep["step"] == "tuned"
    # noest_gemm's configs have no estimate: the best estimated Triton config wins, and one compile sufficed
    assert rep["winner"].startswith("triton:"), rep["winner"]
    assert rep["source"]["kind"] == "estimated" and rep["source"]["model"] == "fusegen.perf"
    assert rep["compiled"] == 1


def test_a_backend_without_an_estimate_is_timed_beside_the_top_k_not_instead(venv, tmp_path):
    v, root = venv
    rep = _tune(v, root, "fusegen,gemm-estimates", "--backends", "triton,noest_gemm", "--measure-on-cpu",
                "--cost-model-top-k", "2", "--cache-dir", str(tmp_path))
    # Triton's best 2 by estimate and (beside them) the first 2 configs without an estimate: 4 compiled and timed
    assert rep["supported"] == 25 + 3 and rep["configs"] == 2 + 2 and rep["compiled"] == 4, rep
    assert rep["source"]["kind"] == "cpu-interpreter"


def test_a_backends_own_estimate_takes_part_and_is_recorded_as_its_own(venv, tmp_path):
    v, root = venv
    rep = _tune(v, root, "fusegen,gemm-estimates", "--backends", "triton,est_gemm", "--cache-dir", str(tmp_path))
    assert rep["winner"] == "est_gemm:variant=0" and rep["duration_us"] == pytest.approx(1e-3)
    assert (rep["source"]["kind"], rep["source"]["model"]) == ("estimated", "backend:est_gemm")
    (entry,) = tmp_path.glob("*.json")
    assert json.loads(entry.read_text())["result"]["source"]["label"] == "estimated by backend:est_gemm"
