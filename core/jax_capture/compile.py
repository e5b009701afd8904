"""``fusegen.capture``: a JAX function as XLA:GPU compiles it for one GPU or a mesh of them, without a GPU.

Takes what ``jax.jit`` takes: pytrees of arrays, ``jax.ShapeDtypeStruct`` (seeded draws; a struct's own
``NamedSharding`` is its sharding) or ``"f32[64,128]"`` specs; ``static_argnums`` / ``static_argnames``;
``in_shardings`` / ``out_shardings`` as a pytree prefix of the arguments / outputs (``PartitionSpec``,
``NamedSharding``, ``"d,None"`` text, ``None`` for replicated). The deviceless compile is the recipe of
``../shared/tools/jax_gpu_hlo/``: ``jax.experimental.topologies.get_topology_desc(platform="cuda",
topology="1x1xN", target_config=...)`` with fusegen's device description as XLA's ``GpuTargetConfigProto``
(needs jax's CUDA plugin, the ``capture`` extra; ``JAX_PLATFORMS=cpu`` on a machine without a GPU). XLA:CPU's
outputs for the example inputs are the expected answer: over N host devices with the same shardings when jax
has them (``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before jax starts), else unsharded on one.
``compiler="fusegen"`` instead lowers with any jax (no plugin: CI's CPU jax) and leaves the fusion to fusegen's
own pipeline (one device). No XLA counterpart.
"""

from __future__ import annotations

import functools
import inspect
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from fusegen.jax_capture.captured import Captured
from fusegen.jax_capture.errors import INSTALL, CaptureError
from fusegen.jax_capture.specs import parse_arg_spec, parse_spec, seeded, target_config_text


def _jax() -> Any:
    try:
        import jax
    except ImportError as e:
        raise CaptureError(f"capture needs jax ({e}): {INSTALL}") from None
    return jax


def _first_line(e: BaseException) -> str:
    """The first line of ``e``'s message, with the next one when it is only a status (XLA's
    ``"UNIMPLEMENTED: \nCan't lower ..."``, whose reason is on the second line)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    if not lines:
        return ""
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def _register_cuda_plugin_without_cuda() -> bool:
    """Register jax's CUDA plugin when it is installed but jax left it out (True if it was registered now).

    Without ``JAX_PLATFORMS=cpu``, jax's first use initializes the plugin, whose CUDA version check fails on a
    machine without the CUDA libraries, and jax goes on without it. A deviceless compile needs no CUDA runtime,
    so the plugin's own ``initialize()`` is run again with that check skipped
    (``JAX_SKIP_CUDA_CONSTRAINTS_CHECK``, the plugin's switch); jax's default backend stays as it was.
    """
    import importlib
    import os

    from jax._src import xla_bridge

    if "cuda" in getattr(xla_bridge, "_topology_factories", {"cuda": None}):
        return False  # registered already (or a jax whose registry this does not know)
    try:
        plugin = importlib.import_module("jax_plugins.xla_cuda12")
    except ImportError:
        return False
    saved = os.environ.get("JAX_SKIP_CUDA_CONSTRAINTS_CHECK")
    os.environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = "1"
    try:
        plugin.initialize()
    except Exception:
        return False
    finally:
        if saved is None:
            os.environ.pop("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", None)
        else:
            os.environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = saved
    return "cuda" in xla_bridge._topology_factories


def _topology(jax: Any, dev: Any, n: int) -> Any:
    from jax.experimental import topologies

    def get() -> Any:
        return topologies.get_topology_desc(platform="cuda", topology=f"1x1x{n}", target_config=target_config_text(dev))

    try:
        try:
            return get()
        except NotImplementedError:
            if not _register_cuda_plugin_without_cuda():
                raise
            return get()
    except Exception as e:
        raise CaptureError(f"no deviceless XLA:GPU compile ({type(e).__name__}: {_first_line(e)}): "
                           f"{INSTALL}; set JAX_PLATFORMS=cpu on a machine without a GPU; or capture(..., "
                           "compiler='fusegen') to lower with this jax and fuse with fusegen's own pipeline") from None


def _static(args: tuple, static_argnums: Any, static_argnames: Sequence[str], kwargs: dict) -> tuple[dict, tuple]:
    """``({argnum or name: value}, dynamic args)``, checking that each static value is hashable."""
    nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums or ())
    fixed = []
    for k in nums:
        i = k + len(args) if k < 0 else k
        if not 0 <= i < len(args):
            raise CaptureError(f"static_argnums {k}: the function was given {len(args)} positional arguments")
        fixed.append(i)
    names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames or ())
    extra = sorted(set(kwargs) - set(names))
    if extra:
        raise CaptureError(f"keyword argument(s) {extra} are not static: pass them positionally, or name them in "
                           "static_argnames")
    static = {i: args[i] for i in fixed} | {k: kwargs[k] for k in names if k in kwargs}
    for k, v in static.items():
        try:
            hash(v)
        except TypeError:
            raise CaptureError(f"static argument {k!r} ({type(v).__name__}) is not hashable, as jax.jit needs a "
                               "static argument to be") from None
    return static, tuple(a for i, a in enumerate(args) if i not in fixed)


def _leaf_values(jax: Any, dyn: tuple, rng: np.random.Generator) -> tuple[list, Any, list]:
    """``(global arrays, treedef, each leaf's own NamedSharding or None)`` of the dynamic arguments: arrays as
    given, ShapeDtypeStructs and ``"f32[4,8]"`` specs drawn, Python numbers as jax makes them."""
    is_leaf = lambda x: isinstance(x, (str, jax.ShapeDtypeStruct))  # noqa: E731
    leaves, tree = jax.tree_util.tree_flatten(dyn, is_leaf=is_leaf)
    values, own = [], []
    for x in leaves:
        sh = None
        if isinstance(x, str):
            shape, dt = parse_arg_spec(x)
            x = seeded(shape, dt, rng)
        elif isinstance(x, jax.ShapeDtypeStruct):
            sh = getattr(x, "sharding", None)
            x = seeded(tuple(x.shape), np.dtype(x.dtype), rng)
        elif isinstance(x, (bool, int, float, complex)):
            x = np.asarray(jax.numpy.asarray(x))  # jax's default type for a Python number (f32 without x64)
        elif not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise CaptureError(f"argument leaf of type {type(x).__name__} is not an array, a ShapeDtypeStruct or "
                               "a spec like 'f32[64,128]' (make it static: static_argnums)")
        else:
            sh = getattr(x, "sharding", None)
            x = np.asarray(x)
        values.append(x)
        own.append(sh if type(sh).__name__ == "NamedSharding" else None)
    return values, tree, own


def _mesh_axes(jax: Any, mesh: Any, shardings: list, axis: str) -> dict[str, int] | None:
    """``{axis name: size}`` of the mesh: ``mesh=N`` (one axis ``axis``), a dict, a ``jax.sharding.Mesh``, or the mesh
    of the first NamedSharding given; None for one device without a mesh."""
    if mesh is None:
        named = next((s for s in shardings if type(s).__name__ == "NamedSharding"), None)
        return dict(named.mesh.shape) if named is not None else None
    if isinstance(mesh, int):
        if mesh < 1:
            raise CaptureError(f"mesh={mesh}: give the number of devices (at least 1)")
        return {axis: mesh}
    if isinstance(mesh, dict):
        return {str(k): int(v) for k, v in mesh.items()}
    if hasattr(mesh, "shape") and hasattr(mesh, "axis_names"):
        return dict(mesh.shape)
    raise CaptureError(f"mesh={mesh!r}: give N, {{'axis': size, ...}} or a jax.sharding.Mesh")


def _specs(jax: Any, prefix: Any, full: Any, what: str, axes: dict | None) -> list:
    """One PartitionSpec (or None: unspecified) per leaf of ``full`` from a pytree prefix of specs."""
    from jax.sharding import NamedSharding, PartitionSpec

    is_spec = lambda x: x is None or isinstance(x, (str, PartitionSpec, NamedSharding))  # noqa: E731

    def spec(s: Any) -> Any:
        if s is None:
            return PartitionSpec()
        if isinstance(s, NamedSharding):
            return s.spec
        if isinstance(s, str):
            return PartitionSpec(*parse_spec(s))
        return s

    if isinstance(prefix, list):
        prefix = tuple(prefix)
    try:
        per_leaf = jax.tree_util.tree_map(lambda s, sub: [spec(s)] * len(jax.tree_util.tree_leaves(sub)),
                                          prefix, full, is_leaf=is_spec)
    except (ValueError, TypeError) as e:
        why = " ".join(line.strip() for line in str(e).splitlines()[:2])
        raise CaptureError(f"{what} is not a pytree prefix of the {what.split('_')[0]}puts: {why}") from None
    out = [s for group in jax.tree_util.tree_leaves(per_leaf, is_leaf=lambda x: isinstance(x, list)) for s in group]
    _check_axes(out, axes, what)
    return out


def _check_axes(specs: list, axes: dict | None, what: str) -> None:
    """Every mesh axis a spec names is one of the mesh's."""
    for s in specs:
        names = [n for d in s for n in ((d,) if isinstance(d, str) else (d or ()))]
        missing = [n for n in names if axes is None or n not in axes]
        if missing:
            raise CaptureError(f"{what} name mesh axis {missing[0]!r}, " + (
                f"the mesh has {sorted(axes)}" if axes else "but there is no mesh: pass mesh=N (or a dict of axes)"))


def capture(fn: Callable, *args: Any, static_argnums: int | Sequence[int] = (), static_argnames: Sequence[str] = (),
            mesh: Any = None, in_shardings: Any = None, out_shardings: Any = None, device: str = "h200",
            compiler: str = "xla", expected: bool = True, out_dir: str | Path | None = None, name: str | None = None,
            seed: int = 0, axis: str = "d", **kwargs: Any) -> Captured:
    """Compile ``fn(*args, **kwargs)`` for ``device`` (``mesh`` of them) as XLA:GPU does, without a GPU.

    Args:
        args: the positional arguments, as ``jax.jit(fn)`` would be called: pytrees of arrays (the example
            inputs), ``jax.ShapeDtypeStruct`` or ``"f32[64,128]"`` specs (seeded draws, ``seed``).
        static_argnums, static_argnames, kwargs: static arguments, as ``jax.jit`` takes them (keyword arguments
            must be static).
        mesh: ``N`` (a 1-D mesh axis named ``axis``), ``{"data": 2, "model": 4}``, or a ``jax.sharding.Mesh``;
            default: the mesh of a ``NamedSharding`` in ``in_shardings`` or on a ShapeDtypeStruct, else one device.
            A function with a ``mesh`` parameter gets the mesh (for ``jax.shard_map`` inside).
        in_shardings, out_shardings: pytree prefixes of the dynamic arguments / the outputs, each node a
            ``PartitionSpec``, a ``NamedSharding`` (its spec is taken; its mesh shape must be ``mesh``'s), text for
            :func:`~fusegen.jax_capture.specs.parse_spec`, or ``None`` (replicated). Default: replicated inputs
            (or a ShapeDtypeStruct's own sharding), outputs as XLA decides.
        device: the fusegen device preset to compile for (``h200``, ``h100``, ...).
        compiler: ``"xla"`` (XLA:GPU's deviceless compile: jax's CUDA plugin) or ``"fusegen"`` (jax's lowering, any
            jax; fusegen's pipeline fuses it when it runs; one device only).
        expected: also run ``fn`` on XLA:CPU for the example inputs (:attr:`Captured.expected`).
        out_dir: also write the module, inputs and expected outputs there (:meth:`Captured.write`).
        name: the module's name (default ``fn.__name__``).

    Returns:
        a :class:`~fusegen.jax_capture.Captured` that ``fusegen.run`` / ``explain`` / ``tune`` / ``report`` take.

    Raises:
        CaptureError: before compiling, for jax or its CUDA plugin missing (naming the ``capture`` extra), static
            arguments that are not hashable, keyword arguments that are not static, leaves that are not arrays,
            shardings that are no prefix of the arguments or name an axis the mesh lacks, ``compiler="fusegen"``
            with a mesh; then for a compile or an XLA:CPU run that fails (its first line). ValueError: an unknown
            ``device``.
    """
    jax = _jax()
    from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

    from fusegen.device import get_device

    if compiler not in ("xla", "fusegen"):
        raise CaptureError(f"compiler={compiler!r}: 'xla' (XLA:GPU's deviceless compile) or 'fusegen' (fusegen's "
                           "own pipeline)")
    dev = get_device(device)
    label = name or getattr(fn, "__name__", "fn")
    top = tuple(jax.ShapeDtypeStruct(tuple(a[0]), a[1]) if _shape_dtype_pair(a) else a for a in args)
    static, dyn = _static(top, static_argnums, static_argnames, kwargs)
    values, in_tree, own = _leaf_values(jax, dyn, np.random.default_rng(seed))
    given = in_shardings
    if given is not None and isinstance(given, (list, tuple)) and not isinstance(given, PartitionSpec) \
            and len(given) == len(top) != len(dyn):
        given = tuple(g for i, g in enumerate(given) if i not in static)  # one entry per argument, static ones too
    prefix_shardings = [s for s in jax.tree_util.tree_leaves(given, is_leaf=lambda x: isinstance(x, NamedSharding))
                        if isinstance(s, NamedSharding)]
    axes = _mesh_axes(jax, mesh, prefix_shardings + [s for s in own if s is not None], axis)
    n = math.prod(axes.values()) if axes else 1
    if compiler == "fusegen" and n > 1:
        raise CaptureError(f"compiler='fusegen' compiles one device (fusegen has no SPMD partitioner); a mesh of {n} "
                           f"needs compiler='xla': {INSTALL}")
    if given is not None:
        specs = _specs(jax, given, dyn, "in_shardings", axes)
    else:
        specs = [s.spec if s is not None else PartitionSpec() for s in own]
        _check_axes(specs, axes, "the ShapeDtypeStructs' shardings")
    structs = in_tree.unflatten([jax.ShapeDtypeStruct(v.shape, v.dtype) for v in values])
    wants_mesh = axes is not None and "mesh" in inspect.signature(fn).parameters
    kw = {k: v for k, v in static.items() if isinstance(k, str)}
    pos = sorted(k for k in static if isinstance(k, int))

    def named(m: Any) -> Callable:
        """``fn`` of the dynamic arguments (static ones put back; the mesh where it asks for one)."""
        @functools.wraps(fn)
        def g(*dyn_args: Any) -> Any:
            it = iter(dyn_args)
            full = [static[i] if i in static else next(it) for i in range(len(dyn_args) + len(pos))]
            return fn(*full, **kw, **({"mesh": m} if wants_mesh else {}))

        g.__name__ = g.__qualname__ = label
        return g

    def jitted(devices: list) -> tuple[Any, list]:
        """``fn`` jitted over ``devices`` (the topology's or the host's) and each input leaf's sharding."""
        if axes is None:
            one = SingleDeviceSharding(devices[0])
            return jax.jit(named(None), in_shardings=in_tree.unflatten([one] * len(values)), keep_unused=True), \
                [one] * len(values)
        m = Mesh(np.array(devices[:n]).reshape(tuple(axes.values())), tuple(axes))
        ins = [NamedSharding(m, s) for s in specs]
        extra = {}
        if out_shardings is not None:
            outs = jax.eval_shape(named(m), *structs)
            extra["out_shardings"] = jax.tree_util.tree_unflatten(
                jax.tree_util.tree_structure(outs), [NamedSharding(m, s) for s in _specs(jax, out_shardings, outs,
                                                                                          "out_shardings", axes)])
        return jax.jit(named(m), in_shardings=in_tree.unflatten(ins), keep_unused=True, **extra), ins

    topo = _topology(jax, dev, n) if compiler == "xla" else None
    try:
        if topo is not None:
            gpu_fn, gpu_in = jitted(list(topo.devices))
            lowered = gpu_fn.lower(*in_tree.unflatten([jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=s)
                                                       for v, s in zip(values, gpu_in)]))
            compiled = lowered.compile()
            text = compiled.as_text()
        else:
            lowered = jax.jit(named(None), keep_unused=True).lower(*structs)
            text = lowered.as_text(dialect="hlo")
    except Exception as e:
        raise CaptureError(f"compiling {label}: {type(e).__name__}: {_first_line(e)}") from None
    out_infos, out_tree = jax.tree_util.tree_flatten(lowered.out_info)
    outs = _expected(jax, jitted, named, values, in_tree, n, wants_mesh, label) if expected else None
    from fusegen.api.loading import load

    module = load(text, filename=f"<capture of {label}>")
    captured = Captured(name=label, device=dev.name, devices=n, compiler=compiler, text=text, module=module,
                        in_tree=in_tree, out_tree=out_tree, static=static, arg_count=len(top),
                        inputs_flat=tuple(values),
                        expected_flat=tuple(np.asarray(o) for o in jax.tree_util.tree_leaves(outs))
                        if outs is not None else None,
                        in_shardings=tuple(str(tuple(s)) for s in specs),
                        out_structs=tuple(jax.ShapeDtypeStruct(tuple(o.shape), o.dtype) for o in out_infos),
                        out_shardings=_out_shardings(jax, compiled, out_infos) if topo is not None and n > 1
                        else ())
    if out_dir is not None:
        import attrs

        captured = attrs.evolve(captured, files=captured.write(out_dir))
    return captured


def _out_shardings(jax: Any, compiled: Any, out_infos: list) -> tuple[str, ...]:
    """Each output leaf's HloSharding text from jax (``compiled.output_shardings``), () when jax has none."""
    from fusegen.runtime.sharding_sidecar import hlo_sharding_texts

    leaves = jax.tree_util.tree_leaves(compiled.output_shardings)
    texts = hlo_sharding_texts(leaves, [len(o.shape) for o in out_infos]) if len(leaves) == len(out_infos) else None
    return texts or ()


def _shape_dtype_pair(a: Any) -> bool:
    """``((64, 128), np.float32)``: an argument given by shape and dtype (the form before ShapeDtypeStruct)."""
    if not (isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], (tuple, list))
            and all(isinstance(d, int) for d in a[0])):
        return False
    try:
        np.dtype(a[1])
    except TypeError:
        return False
    return not hasattr(a[1], "shape")


def _expected(jax: Any, jitted: Callable, named: Callable, values: list, in_tree: Any, n: int, wants_mesh: bool,
              label: str) -> Any:
    """XLA:CPU's outputs for the example inputs: over ``n`` host devices with the same shardings when there are
    that many, else (a function without a ``mesh`` parameter) unsharded on one: the same values."""
    cpus = jax.devices("cpu")
    try:
        if n == 1 or len(cpus) >= n:
            cpu_fn, cpu_in = jitted(cpus)
            return cpu_fn(*in_tree.unflatten([jax.device_put(v, s) for v, s in zip(values, cpu_in)]))
        if wants_mesh:
            raise CaptureError(f"{label} takes the mesh (shard_map inside), and XLA:CPU has {len(cpus)} host devices "
                               f"for its {n}: set XLA_FLAGS=--xla_force_host_platform_device_count={n} before jax "
                               "starts, or capture(..., expected=False)")
        return jax.jit(named(None))(*in_tree.unflatten(values))
    except CaptureError:
        raise
    except Exception as e:
        raise CaptureError(f"running {label} on XLA:CPU: {type(e).__name__}: "
                           f"{_first_line(e)}") from None
