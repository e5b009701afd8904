"""``fusegen capture SCRIPT.py:FUNC``: a JAX function compiled deviceless for a GPU (or a mesh), with seeded
global inputs and XLA:CPU's expected outputs (:mod:`fusegen.capture`)."""

from __future__ import annotations

import os

import click

from fusegen.cli.common import fail


@click.command()
@click.argument("target", metavar="SCRIPT.py:FUNC")
@click.option("--args", "arg_specs", multiple=True, required=True, metavar="TYPE[dims]",
              help="One per argument, e.g. f32[64,128] (seeded inputs).")
@click.option("--mesh", type=click.IntRange(min=1), default=None, help="Compile for this many GPUs (a 1-D mesh).")
@click.option("--in-shardings", "in_shardings", multiple=True, metavar="SPEC",
              help="One per argument with --mesh: a partition spec over the mesh axis, e.g. 'd,None' or '' "
                   "(replicated).")
@click.option("--out-shardings", "out_shardings", multiple=True, metavar="SPEC",
              help="One per output with --mesh (default: as XLA decides).")
@click.option("--axis", default="d", show_default=True, help="The mesh axis name the specs use.")
@click.option("--device", "device_name", default="h200", show_default=True, help="The GPU to compile for.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0))
@click.option("--compiler", type=click.Choice(["xla", "fusegen"]), default="xla", show_default=True,
              help="xla: XLA:GPU's deviceless compile (jax's CUDA plugin); fusegen: jax's lowering, fused by "
                   "fusegen's own pipeline when it runs (any jax, one device).")
@click.option("-o", "--out-dir", "out_dir", required=True, type=click.Path(file_okay=False))
def capture(target, arg_specs, mesh, in_shardings, out_shardings, axis, device_name, seed, compiler, out_dir):
    """Compile SCRIPT.py's FUNC for --device (--mesh N of them) and write NAME.DEV[xN]_opt.hlo with seeded
    .inputs.npz and XLA:CPU's .expected.npz, ready for `fusegen run --inputs ... --expected ...`.
    Needs jax's CUDA plugin (pip install 'fusegen[capture]'); no GPU. Exit 2 when it cannot be made."""
    script, _, func = target.rpartition(":")
    if not script or not func:
        fail(f"{target}: expected SCRIPT.py:FUNC")
    if not os.path.isfile(script):
        fail(f"{script}: no such file")
    # before jax starts: XLA:CPU needs the mesh's devices, and the CUDA plugin must not want a GPU; put back
    # afterwards (a caller's process, e.g. a test, keeps its own environment)
    saved = {k: os.environ.get(k) for k in ("XLA_FLAGS", "JAX_PLATFORMS")}
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={max(mesh or 1, 1)}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        res = _capture(script, func, arg_specs, mesh, in_shardings, out_shardings, axis, device_name, seed, compiler,
                       out_dir)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    files = res.files
    click.echo(f"wrote {files.hlo}, {files.inputs.name}, {files.expected.name}"
               + (f", {files.shardings.name}" if files.shardings is not None else ""))


def _capture(script, func, arg_specs, mesh, in_shardings, out_shardings, axis, device_name, seed, compiler, out_dir):
    """Load ``script``, find ``func`` and capture it (exit 2 with one line when it cannot be made)."""
    import importlib.util

    from fusegen.jax_capture import CaptureError, capture as do_capture

    spec = importlib.util.spec_from_file_location("fusegen_capture_script", script)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # the user's script: one line
        fail(f"{script}: {type(e).__name__}: {e}")
    fn = getattr(mod, func, None)
    if not callable(fn):
        fail(f"{script}: no function {func!r}")
    if mesh is None and (in_shardings or out_shardings):
        fail("--in-shardings/--out-shardings need --mesh")
    try:
        res = do_capture(fn, *arg_specs, mesh=mesh, in_shardings=list(in_shardings) or None,
                         out_shardings=(list(out_shardings) if len(out_shardings) > 1 else out_shardings[0])
                         if out_shardings else None, device=device_name, out_dir=out_dir, seed=seed, axis=axis,
                         compiler=compiler)
    except (CaptureError, ValueError) as e:  # ValueError: an unknown --device
        fail(str(e))
    return res
