"""The individual conformance checks, as functions that raise :class:`CheckFailed` naming the check.

Every failure message starts with ``[check-name]`` and names the plugin and the fusion or instruction,
so a failing run says which promise the plugin broke (``launch-within-limits``, ``output-matches-evaluator``...).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fusegen.runtime.compare import tolerance


class CheckFailed(AssertionError):
    """A conformance check failed.

    Attributes:
        check: the check's name (``launch-within-limits``...).
    """

    def __init__(self, check: str, message: str):
        self.check = check
        super().__init__(f"[{check}] {message}")


def emit_with_plugin(target: Any, fusion: Any, device: Any, check: str) -> tuple[Any, Any, Any]:
    """Analyse and dispatch ``fusion`` with every installed plugin and emit it with ``target``'s emitter.

    Returns:
        ``(analysis, factory, emitted)``.

    Raises:
        CheckFailed: the fusion is not served by one of ``target``'s factories, or emitting raised.
    """
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.dispatch import get_emitter_fusion_kind, get_fusion_emitter

    analysis = FusionAnalysis.create(fusion, device)
    kind = get_emitter_fusion_kind(analysis, target.pm).kind
    emitter, factory = get_fusion_emitter(analysis, kind, target.pm)
    if factory is None or factory.plugin != target.name:
        by = f"{factory.plugin}:{factory.name}" if factory is not None else "no emitter"
        raise CheckFailed(check, f"plugin {target.name!r}: fusion %{fusion.name} ({kind}) is served by {by}, "
                                 f"not by this plugin")
    try:
        emitted = emitter.emit()
    except Exception as e:
        raise CheckFailed(check, f"plugin {target.name!r}: emitter {factory.name!r} raised on fusion %{fusion.name}: "
                                 f"{type(e).__name__}: {e}") from e
    return analysis, factory, emitted


def launch_problems(emitted: Any, device: Any) -> list[str]:
    """Launch dimensions outside ``device``'s limits, one line each (``[]`` when all are within).

    Limits: grid x <= ``block_dim_limit[0]`` (2^31-1), y and z <= ``block_dim_limit[1:]`` (65535), at most
    3 grid axes, at least one program; ``num_warps * threads_per_warp <= threads_per_block_limit``;
    ``shared_memory_bytes <= shared_memory_per_block_optin``.
    """
    out = []
    for ks in emitted.kernels:
        ld = ks.launch
        grid = tuple(ld.grid)
        if not 1 <= len(grid) <= 3:
            out.append(f"kernel {ks.name}: grid {grid} has {len(grid)} axes (1 to 3 allowed)")
        for axis, (g, lim) in enumerate(zip(grid, device.block_dim_limit)):
            if not isinstance(g, (int, np.integer)) or g < 1 or g > lim:
                out.append(f"kernel {ks.name}: grid[{axis}]={g} outside [1, {lim}]")
        threads = int(ld.num_warps) * device.threads_per_warp
        if ld.num_warps < 1 or threads > device.threads_per_block_limit:
            out.append(f"kernel {ks.name}: num_warps={ld.num_warps} gives {threads} threads per block, "
                       f"limit {device.threads_per_block_limit}")
        if ld.shared_memory_bytes > device.shared_memory_per_block_optin:
            out.append(f"kernel {ks.name}: {ld.shared_memory_bytes} bytes of shared memory, limit "
                       f"{device.shared_memory_per_block_optin}")
    return out


def check_launch(target: Any, fusion_name: str, emitted: Any, device: Any) -> None:
    problems = launch_problems(emitted, device)
    if problems:
        raise CheckFailed("launch-within-limits", f"plugin {target.name!r}, fusion %{fusion_name} on {device.name}: "
                                                  + "; ".join(problems))


def within(out: np.ndarray, ref: np.ndarray, element_type: str, tol: dict[str, float] | None) -> tuple[bool, float]:
    """``(ok, max abs error)``: every element within ``atol + rtol*|ref|`` (NaNs and infinities must agree)."""
    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape:
        return False, float("inf")
    if out.size == 0:
        return True, 0.0
    rtol, atol = tolerance(element_type)
    if tol:
        rtol, atol = tol.get("rtol", rtol), tol.get("atol", atol)
    wide = np.complex128 if out.dtype.kind == "c" or ref.dtype.kind == "c" else np.float64
    a, b = out.astype(wide), ref.astype(wide)
    agree = (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & np.isinf(b) & (a == b))
    diff = np.where(agree, 0.0, np.abs(a - b))
    diff = np.where(np.isnan(diff), np.inf, diff)
    ok = bool(np.all(diff <= atol + rtol * np.abs(np.where(agree, 0.0, b))))
    return ok, float(diff.max())


def check_outputs(target: Any, fusion: Any, emitted: Any, ops: Sequence[Any], ref: Any,
                  tol: dict[str, float] | None, device: Any) -> None:
    """Run ``emitted`` in Triton's interpreter and compare every output leaf with ``ref``.

    A launch outside the device limits is refused (running it could take forever) and reported as
    ``launch-within-limits``.
    """
    from fusegen.codegen import triton_runtime
    from fusegen.runtime.inputs import leaves

    check_launch(target, fusion.name, emitted, device)
    try:
        outs = triton_runtime.run_fusion(emitted, list(ops), fusion)
    except Exception as e:
        from fusegen.runtime.plugin_failures import kernel_location

        where = kernel_location(e)  # the generated kernel file and line, when the failure is in it
        raise CheckFailed("output-matches-evaluator", f"plugin {target.name!r}, fusion %{fusion.name}: running the "
                                                      f"kernels failed{f' at {where}' if where else ''}: "
                                                      f"{type(e).__name__}: {e}") from e
    shapes = fusion.shape.leaves()
    refs = leaves(ref)
    if len(outs) != len(refs):
        raise CheckFailed("output-matches-evaluator", f"plugin {target.name!r}, fusion %{fusion.name}: "
                                                      f"{len(outs)} outputs, reference has {len(refs)}")
    for k, (s, o, r) in enumerate(zip(shapes, outs, refs)):
        ok, err = within(o, r, s.element_type, tol)
        if not ok:
            raise CheckFailed("output-matches-evaluator",
                              f"plugin {target.name!r}, fusion %{fusion.name}: output {k} ({s.element_type}"
                              f"{list(s.dimensions)}) differs from the reference evaluator, max abs error {err:.3g}")


def check_compiles(target: Any, fusion_name: str, emitted: Any, device: Any, capability: int = 90) -> list[Any]:
    """Compile every kernel for ``sm_<capability>``; the compiled shared memory must fit the device."""
    from fusegen.codegen import triton_runtime

    results = []
    for ks in emitted.kernels:
        try:
            res = triton_runtime.compile_for_target(ks, capability=capability)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise CheckFailed("compiles-sm90", f"plugin {target.name!r}, fusion %{fusion_name}: kernel {ks.name} "
                                               f"does not compile for sm_{capability}: {type(e).__name__}: {first}") from e
        if res.shared_bytes > device.shared_memory_per_block_optin:
            raise CheckFailed("launch-within-limits", f"plugin {target.name!r}, fusion %{fusion_name}: kernel "
                                                      f"{ks.name} compiled to {res.shared_bytes} bytes of shared memory, "
                                                      f"limit {device.shared_memory_per_block_optin}")
        results.append(res)
    return results


def source_fingerprint(emitted: Any) -> list[tuple]:
    return [(ks.name, ks.source, ks.entry, tuple((p.kind, p.index) for p in ks.params),
             tuple(sorted(ks.constexprs.items())), tuple(ks.launch.grid), ks.launch.num_warps,
             ks.launch.shared_memory_bytes) for ks in emitted.kernels] + [
        ("copies", tuple(emitted.copies)), ("aliases", tuple(sorted(emitted.output_aliases.items())))]
