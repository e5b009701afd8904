"""``fusegen.capture``: a user's JAX function as XLA compiles it for a GPU (and a mesh of them), ready to run.

Compiles ``fn`` deviceless for the named GPU, ``N`` of them with ``mesh=N`` (jax's CUDA plugin, ``pip install -e
'.[gpu]'``; no GPU needed: ``jax.experimental.topologies.get_topology_desc(platform="cuda",
topology="1x1xN", target_config=...)`` with fusegen's own device description as XLA's
``GpuTargetConfigProto``), and writes into ``out_dir``:

* ``NAME.DEV_opt.hlo`` (``NAME.DEVxN_opt.hlo`` on a mesh): the optimized module (per partition on a mesh);
* ``NAME.DEV[xN].inputs.npz``: the global inputs ``p0, p1, ...`` (the given arrays, or seeded draws);
* ``NAME.DEV[xN].expected.npz``: XLA:CPU's outputs ``o0, o1, ...`` of the same function with the same
  shardings over N host devices (``XLA_FLAGS=--xla_force_host_platform_device_count=N`` must be set before
  jax starts; ``fusegen capture`` sets it).

so that ``fusegen run NAME.DEV[xN]_opt.hlo --inputs ...inputs.npz --expected ...expected.npz`` checks it. On a
mesh the function is jitted with ``in_shardings`` / ``out_shardings`` over a 1-D mesh axis (``axis``, default
``"d"``); a function with a ``mesh`` parameter gets the mesh (for ``jax.shard_map`` inside). No XLA
counterpart; the recipe of ``../shared/tools/jax_gpu_hlo/``.

Errors: :class:`CaptureError` (a ``ValueError``) with what to change.
"""

from __future__ import annotations

import functools
import inspect
import re
from pathlib import Path
from typing import Any, Callable, Sequence

import attrs
import numpy as np

__all__ = ["CaptureError", "CaptureResult", "capture", "target_config_text", "parse_arg_spec", "parse_spec"]


class CaptureError(ValueError):
    """A capture that cannot be made (missing CUDA plugin, too few host devices, a bad spec)."""


@attrs.frozen
class CaptureResult:
    """What :func:`capture` wrote: the module, inputs and expected paths, and the module's text."""

    hlo: Path
    inputs: Path
    expected: Path
    text: str


def target_config_text(device: Any) -> str:
    """``device`` (a :class:`fusegen.device.DeviceDescription`) as the ``GpuTargetConfigProto`` text jaxlib
    reads (the fields of XLA's ``specs/*.txtpb`` that jaxlib 0.10 understands)."""
    d = device
    major, minor = d.compute_capability
    info = [("threads_per_block_limit", d.threads_per_block_limit), ("threads_per_warp", d.threads_per_warp),
            ("shared_memory_per_block", d.shared_memory_per_block), ("shared_memory_per_core", d.shared_memory_per_core),
            ("threads_per_core_limit", d.threads_per_core_limit), ("core_count", d.core_count),
            ("fpus_per_core", d.fpus_per_core), ("block_dim_limit_x", d.block_dim_limit[0]),
            ("block_dim_limit_y", d.block_dim_limit[1]), ("block_dim_limit_z", d.block_dim_limit[2]),
            ("memory_bandwidth", d.memory_bandwidth), ("l2_cache_size", d.l2_cache_size),
            ("clock_rate_ghz", d.clock_rate_ghz), ("device_memory_size", d.device_memory_size),
            ("shared_memory_per_block_optin", d.shared_memory_per_block_optin)]
    lines = ["gpu_device_info {"] + [f"  {k}: {v}" for k, v in info]
    lines += ["  cuda_compute_capability {", f"    major: {major}", f"    minor: {minor}", "  }",
              f"  registers_per_core_limit: {d.registers_per_core_limit}",
              f"  registers_per_block_limit: {d.registers_per_block_limit}", "}",
              f'platform_name: "{d.platform}"', "dnn_version_info {", "  major: 9", "  minor: 8", "}",
              f'device_description_str: "{d.model}"']
    return "\n".join(lines) + "\n"


def parse_arg_spec(text: str) -> tuple[tuple[int, ...], np.dtype]:
    """``f32[64,128]`` -> ``((64, 128), float32)`` (HLO element type spellings; ``f32[]`` is a scalar).

    Raises:
        CaptureError: not ``TYPE[dims]``.
    """
    from fusegen.hlo.dtypes import numpy_dtype

    m = re.fullmatch(r"\s*([a-z0-9]+)\[([\d,\s]*)\]\s*", text)
    if not m:
        raise CaptureError(f"--args {text!r}: expected TYPE[dims], e.g. f32[64,128]")
    try:
        dt = np.dtype(numpy_dtype(m.group(1)))
    except Exception:
        raise CaptureError(f"--args {text!r}: unknown element type {m.group(1)!r}") from None
    return tuple(int(x) for x in m.group(2).split(",") if x.strip()), dt


def parse_spec(text: str) -> tuple:
    """A partition spec: ``""`` (replicated), ``"d"``, ``"d,None"``, ``"None,d"`` -> a tuple for ``PartitionSpec``."""
    if not text.strip():
        return ()
    return tuple(None if t.strip() in ("None", "none", "_", "") else t.strip() for t in text.split(","))


def _seeded(shape: tuple[int, ...], dt: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if dt.kind == "f" or dt.name in ("bfloat16",):
        return (rng.standard_normal(shape) * 0.5).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    return rng.integers(0, 8, shape).astype(dt)


def capture(fn: Callable, *example_args: Any, mesh: int | None = None, in_shardings: Sequence | None = None,
            out_shardings: Any = None, device: str = "h200", out_dir: str | Path = ".", name: str | None = None,
            seed: int = 0, axis: str = "d") -> CaptureResult:
    """Compile ``fn`` for ``device`` (``mesh`` of them), run it on XLA:CPU, write the three files.

    Args:
        example_args: arrays (the inputs), or ``jax.ShapeDtypeStruct`` / ``(shape, dtype)`` / ``"f32[64,128]"``
            (seeded draws).
        mesh: number of devices (``None``: one device, no shardings).
        in_shardings, out_shardings: partition specs over ``axis`` (tuples such as ``("d", None)``, ``()`` for
            replicated, or text for :func:`parse_spec`); default replicated inputs, outputs as XLA decides.

    Raises:
        CaptureError: jax's CUDA plugin missing, fewer host CPU devices than ``mesh``, bad specs.
    """
    try:
        import jax
        from jax.experimental import topologies
        from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding
    except ImportError as e:
        raise CaptureError(f"capture needs jax ({e}); pip install -e '.[gpu]'") from None
    from fusegen.device import get_device

    dev = get_device(device)
    n = mesh or 1
    rng = np.random.default_rng(seed)
    args = []
    for a in example_args:
        if isinstance(a, str):
            shape, dt = parse_arg_spec(a)
            args.append(_seeded(shape, dt, rng))
        elif isinstance(a, jax.ShapeDtypeStruct):
            args.append(_seeded(tuple(a.shape), np.dtype(a.dtype), rng))
        elif isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], (tuple, list)):
            args.append(_seeded(tuple(a[0]), np.dtype(a[1]), rng))
        else:
            args.append(np.asarray(a))
    try:
        topo = topologies.get_topology_desc(platform="cuda", topology=f"1x1x{n}", target_config=target_config_text(dev))
    except Exception as e:
        raise CaptureError(f"no deviceless CUDA compile ({type(e).__name__}: {e}); install jax's CUDA plugin: "
                           "pip install -e '.[gpu]' (and JAX_PLATFORMS=cpu on a machine without a GPU)") from None
    cpus = jax.devices("cpu")
    if len(cpus) < n:
        raise CaptureError(f"XLA:CPU has {len(cpus)} host devices, the mesh needs {n}: set "
                           f"XLA_FLAGS=--xla_force_host_platform_device_count={n} before jax starts")
    specs = [PartitionSpec(*parse_spec(s) if isinstance(s, str) else s) for s in (in_shardings or [()] * len(args))]
    if len(specs) != len(args):
        raise CaptureError(f"{len(specs)} in_shardings for {len(args)} arguments")

    label = name or getattr(fn, "__name__", "fn")

    def named(m: Any) -> Callable:
        """``fn`` (given the mesh where it asks for one) under the name the module is called after."""
        wants_mesh = m is not None and "mesh" in inspect.signature(fn).parameters

        @functools.wraps(fn)
        def f(*xs: Any) -> Any:
            return fn(*xs, mesh=m) if wants_mesh else fn(*xs)

        f.__name__ = f.__qualname__ = label
        return f

    def jitted(devices: list) -> Any:
        if mesh is None:
            sh = SingleDeviceSharding(devices[0])
            return jax.jit(named(None), in_shardings=tuple(sh for _ in args)), [sh] * len(args)
        m = Mesh(np.array(devices[:n]), (axis,))
        f = named(m)
        ins = [NamedSharding(m, s) for s in specs]
        kw = {}
        if out_shardings is not None:
            outs = out_shardings if isinstance(out_shardings, list) else [out_shardings]
            made = [NamedSharding(m, PartitionSpec(*parse_spec(o) if isinstance(o, str) else o)) for o in outs]
            kw["out_shardings"] = made[0] if not isinstance(out_shardings, list) else tuple(made)
        return jax.jit(f, in_shardings=tuple(ins), **kw), ins

    gpu_fn, gpu_in = jitted(list(topo.devices))
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s) for a, s in zip(args, gpu_in)]
    try:
        text = gpu_fn.lower(*structs).compile().as_text()
        cpu_fn, cpu_in = jitted(cpus)
        outs = cpu_fn(*[jax.device_put(a, s) for a, s in zip(args, cpu_in)])
    except Exception as e:
        raise CaptureError(f"compiling {getattr(fn, '__name__', fn)}: {type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else ''}") from None
    leaves = jax.tree_util.tree_leaves(outs)
    base = Path(out_dir) / (f"{label}.{dev.name}" + (f"x{n}" if mesh else ""))
    base.parent.mkdir(parents=True, exist_ok=True)
    hlo = Path(f"{base}_opt.hlo")
    hlo.write_text(text)
    inputs, expected = Path(f"{base}.inputs.npz"), Path(f"{base}.expected.npz")
    np.savez(inputs, **{f"p{i}": a for i, a in enumerate(args)})
    np.savez(expected, **{f"o{i}": np.asarray(o) for i, o in enumerate(leaves)})
    return CaptureResult(hlo, inputs, expected, text)
