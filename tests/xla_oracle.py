"""XLA:CPU through jaxlib as an independent oracle (../shared/reference/toolchain-on-cpu.md §4).

``JAX_ERROR`` is ``None`` when jaxlib loads, else the reason tests skip with; :func:`run_xla` compiles an HLO
module's text on the CPU client and runs it on numpy inputs.
"""

from __future__ import annotations

import numpy as np

try:  # the oracle is optional: tests skip with the reason when jaxlib is absent
    import jax
    from jax._src import xla_bridge as _xb
    from jaxlib import _hlo as _jhlo
    from jaxlib import _jax

    JAX_ERROR = None
except Exception as _e:  # pragma: no cover - depends on the environment
    JAX_ERROR = f"jaxlib oracle unavailable: {_e}"


def run_xla(text: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Outputs of the module ``text`` run by XLA:CPU on ``inputs`` (``xla_allow_excess_precision=false``)."""
    mod = _jhlo.hlo_module_from_text(text)
    mlir = _jax.mlir.hlo_to_stablehlo(mod.as_serialized_hlo_module_proto())
    backend = _xb.get_backend("cpu")
    opts = _jax.CompileOptions()
    opts.env_option_overrides = [("xla_allow_excess_precision", False)]
    exe = backend.compile_and_load(mlir, _jax.DeviceList(tuple(backend.local_devices()[:1])), opts)
    with jax.enable_x64(True):  # keep s64/f64 parameters 64-bit
        out = exe.execute([jax.device_put(a) for a in inputs])
    return [np.asarray(o) for o in out]
