"""The individual conformance checks, as functions that raise :class:`CheckFailed` naming the check.

Every failure message starts with ``[check-name]`` and names the plugin and the fusion or instruction,
so a failing run says which promise the plugin broke (``launch-within-limits``, ``output-matches-evaluator``...).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fusegen.autotuning.clustering import DEFAULT_RTOL, buffers_match
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
    """Launch dimensions outside ``device``'s limits, one line each (``[]`` when all are within):
    :func:`fusegen.codegen.launch_limits.launch_problems`, the check ``fusegen run`` and ``explain`` make."""
    from fusegen.codegen.launch_limits import launch_problems as problems

    return problems(emitted, device)


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


#: XLA's autotuner accepts a candidate whose every element is within this relative tolerance of its reference
#: (``xla_gpu_autotune_gemm_rtol``'s default; :func:`fusegen.autotuning.clustering.buffers_match`).
AUTOTUNER_RTOL = DEFAULT_RTOL


class F64Oracle:
    """The f64 oracle of one instruction on its operands (:func:`fusegen.evaluator.promote.evaluate_fusion_promoted`),
    evaluated once, when first asked; ``None`` leaves when the f64 evaluation cannot run."""

    def __init__(self, inst: Any, ops: Sequence[Any]):
        self.inst, self.ops, self._leaves = inst, ops, None

    def leaf(self, k: int) -> np.ndarray | None:
        if self._leaves is None:
            from fusegen.runtime.inputs import leaves
            from fusegen.evaluator.promote import OracleUnavailable, evaluate_fusion_promoted

            try:
                self._leaves = [np.asarray(x) for x in leaves(evaluate_fusion_promoted(self.inst, list(self.ops)))]
            except OracleUnavailable:
                self._leaves = []
        return self._leaves[k] if k < len(self._leaves) else None


def result_problem(out: np.ndarray, ref: np.ndarray, element_type: str, tol: dict[str, float] | None,
                   oracle: F64Oracle, k: int) -> str | None:
    """``None`` when output leaf ``k`` is right, else a clause with its figures (``max abs error ...``).

    Right: :func:`within` the tolerance of the reference evaluator ``ref``; or, for a floating leaf the
    reference rounds more than the result (an f32 dot of default precision at tf32, XLA:GPU's arithmetic,
    computed by a backend in IEEE f32), at least as close to the f64 oracle as the reference
    (``max|out - O| <= max|ref - O|``) while every element is one XLA's autotuner accepts against the
    reference (:data:`AUTOTUNER_RTOL`). A wrong result is farther from f64 than the reference's rounding.
    """
    from fusegen.runtime.compare import abs_error
    from fusegen.evaluator.promote import is_float_type

    ok, err = within(out, ref, element_type, tol)
    if ok:
        return None
    said = f"max abs error {err:.3g}"
    o = oracle.leaf(k) if is_float_type(element_type) and np.shape(out) == np.shape(ref) else None
    if o is None or o.shape != np.shape(ref):
        return said
    dk, dr = float(abs_error(np.asarray(out), o)[0].max()), float(abs_error(np.asarray(ref), o)[0].max())
    if dk <= dr and buffers_match(out, ref, AUTOTUNER_RTOL):
        return None
    return f"{said} (vs the f64 oracle {dk:.3g}, the reference's {dr:.3g})"


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
    oracle = F64Oracle(fusion, ops)
    for k, (s, o, r) in enumerate(zip(shapes, outs, refs)):
        problem = result_problem(o, r, s.element_type, tol, oracle, k)
        if problem:
            raise CheckFailed("output-matches-evaluator",
                              f"plugin {target.name!r}, fusion %{fusion.name}: output {k} ({s.element_type}"
                              f"{list(s.dimensions)}) differs from the reference evaluator, {problem}")


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


def sample_configs(configs: Sequence[Any], limit: int, seed: int = 0) -> list[Any]:
    """All of ``configs`` when ``limit`` is 0 or not smaller; else the first (the backend's preferred one) and a
    seeded random ``limit - 1`` of the rest, in their order."""
    configs = list(configs)
    if not limit or len(configs) <= limit:
        return configs
    rng = np.random.default_rng(seed)
    rest = sorted(rng.choice(np.arange(1, len(configs)), size=limit - 1, replace=False).tolist())
    return [configs[0]] + [configs[k] for k in rest]


def config_result_problem(backend: Any, inst: Any, cfg: Any, exe: Any, ops: Sequence[Any], ref: Any,
                          tol: dict[str, float] | None) -> str | None:
    """Run ``exe`` (``backend``'s executable of ``inst`` with ``cfg``) on ``ops`` as the autotuner does (physical
    1-D buffers, zeroed outputs and scratch) and compare every output leaf with ``ref``; ``None`` when within
    ``tol``, else one clause naming the config."""
    from fusegen.codegen import triton_runtime
    from fusegen.hlo import dtypes
    from fusegen.hlo.layout_util import from_physical, to_physical
    from fusegen.runtime.inputs import leaves

    inputs = [triton_runtime.to_storage(to_physical(np.asarray(v), o.shape), o.shape.element_type)
              for v, o in zip(ops, inst.operands)]
    shapes = inst.shape.leaves()
    outputs = [triton_runtime.to_storage(np.zeros(s.numel, dtypes.numpy_dtype(s.element_type)), s.element_type)
               for s in shapes]
    n = backend.scratch_bytes(cfg)
    try:
        exe.run(inputs, outputs, np.zeros(n, np.uint8) if n else None)
    except Exception as e:
        return f"config {cfg} raised {type(e).__name__}: {e}"
    oracle = F64Oracle(inst, ops)
    for k, (s, o, r) in enumerate(zip(shapes, outputs, leaves(ref))):
        got = from_physical(triton_runtime.from_storage(o, s.element_type), s)
        problem = result_problem(got, r, s.element_type, tol, oracle, k)
        if problem:
            return f"config {cfg} output {k}: {problem}"
    return None
