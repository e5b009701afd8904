"""``fusegen.run``: run every fusion's kernel and judge the outputs, one device or all N of an SPMD module.

:func:`run` is the library's ``fusegen run``; :func:`run_modules` is its loop (the CLI calls it too, after
loading and preparing the modules itself to time those phases); :func:`inputs_for` and :func:`expected_for`
turn what a caller gives into the arrays a run takes, and refuse what does not fit *before* anything runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import attrs
import numpy as np

from fusegen.api.loading import ModuleLike, as_modules, prepare, session
from fusegen.api.progress import progress_sink
from fusegen.api.trees import describe, tree_leaves

#: ``to_json()`` keys of a one-module run that :class:`RunResult` reads from the document.
_DOC_KEYS = ("other_instructions", "non_fusion_instructions", "outputs_match", "output_max_abs_error", "seconds",
             "plugin_errors", "timings", "reference_profile", "oracle", "first_out_of_budget", "num_partitions",
             "replica_count", "collectives", "output_shardings", "output_sharding_sources", "modules",
             "estimated_us")


@attrs.frozen
class RunResult:
    """What ``fusegen run --json`` prints, typed (every key of :meth:`to_json` is an attribute).

    Attributes:
        module: the module name (``"a; b"`` for several).
        status: ``ok``, ``drift`` or ``mismatch`` (of every module), or ``error`` when a plugin failed on a
            fusion (:attr:`errors`; the CLI's exit 2): that fusion ran on the host, so outputs judge nothing of it.
        ok: the exit status would be 0 (``ok`` or ``drift``, and no plugin failed: :attr:`errors`).
        outputs: the kernel path's outputs of the first module: for a captured function its output pytree,
            else a numpy array, or a tuple for tuple roots. (``to_json()["outputs"]`` is the verdict per output
            leaf: :attr:`verdict` ``.outputs``.)
        fusions: every fusion's :class:`~fusegen.runtime.executor.FusionReport` (kind, emitter, backend,
            launch, ``launch_dimensions``, ``max_abs_error``, ``status`` ...), all modules.
        reports: one :class:`~fusegen.runtime.executor.RunReport` per module.
        verdict: the first module's :class:`~fusegen.verify.verdict.ModuleVerdict` (``.outputs``: per leaf).
        other_instructions, non_fusion_instructions, outputs_match, output_max_abs_error, seconds (s),
        plugin_errors, timings, reference_profile, oracle, first_out_of_budget, and on N devices
        num_partitions, replica_count, collectives, output_shardings, output_sharding_sources: the same keys of
        :meth:`to_json`.
        estimated_us: fusegen.perf's estimate of the module's time on the device (``{"us", "fusions_us",
            "library_calls_us", "device", "model_version", "label": "estimate"}``; each fusion's ``estimate``).
    """

    module: str
    status: str
    ok: bool
    outputs: Any = attrs.field(repr=False, eq=False)
    fusions: tuple = attrs.field(repr=False)
    reports: tuple = attrs.field(repr=False, eq=False)
    #: the ``to_json()`` document the attributes read, built on the first such read (a finished run's reports
    #: do not change)
    _document: dict | None = attrs.field(default=None, init=False, repr=False, eq=False)

    @property
    def errors(self) -> list[str]:
        """``fusion %NAME: REASON`` of each fusion a plugin failed on (matcher, factory, ``emit``, a kernel that
        does not load or compile; the reason names the plugin): the CLI prints the rows, then these, exit 2."""
        return [f"fusion %{f.name}: {f.reason}" for f in self.fusions if f.status == "error"]

    @property
    def verdict(self) -> Any:
        return self.reports[0].verdict if self.reports else None

    def __getattr__(self, name: str) -> Any:
        if name in _DOC_KEYS:
            doc = self._document
            if doc is None:
                doc = self.to_json()
                object.__setattr__(self, "_document", doc)
            return doc.get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def to_json(self) -> dict:
        """The ``run --json`` document (:func:`fusegen.runtime.run_json.report_json`)."""
        from fusegen.runtime.run_json import report_json

        return report_json(list(self.reports))

    def to_dataframe(self) -> Any:
        """One row per fusion (the ``--json`` rows: ``name``, ``kind``, ``emitter``, ``max_abs_error``,
        ``launch_dimensions.grid`` ...; a file of several modules adds ``module``).

        Raises:
            ImportError: pandas is not installed.
        """
        from fusegen.api.frames import dataframe

        return dataframe(self.to_json()["fusions"])


# ------------------------------------------------------------------------------------------------ inputs
def _typed(v: Any) -> bool:
    """An array that carries its own dtype (numpy, a numpy scalar, jax.Array, ...): no silent cast."""
    return isinstance(v, (np.ndarray, np.generic)) or (hasattr(v, "dtype") and hasattr(v, "shape"))


def _param_values(module: Any, inputs: Any) -> list:
    """``inputs`` (a sequence in parameter order, a pytree of as many leaves, or a mapping keyed ``p0`` ... or
    by parameter name) as one value per entry parameter."""
    from fusegen.runtime.inputs import InputError, check_keys

    params = sorted(module.entry.parameters, key=lambda p: p.parameter_number)
    if isinstance(inputs, Mapping):
        check_keys(f"module {module.name}", params, inputs)
        missing = [f"p{p.parameter_number} (%{p.name})" for p in params
                   if f"p{p.parameter_number}" not in inputs and p.name not in inputs]
        if missing:
            raise InputError(f"module {module.name}: no input for parameter {', '.join(missing)}")
        return [inputs[f"p{p.parameter_number}"] if f"p{p.parameter_number}" in inputs else inputs[p.name]
                for p in params]
    values = list(inputs)
    if len(values) != len(params) and not any(p.shape.is_tuple for p in params):
        flat = tree_leaves(values)  # a pytree of arrays (e.g. (params, batch)), one leaf per parameter
        if len(flat) == len(params):
            values = flat
    if len(values) != len(params):
        raise InputError(f"module {module.name}: {len(values)} inputs ({describe(tree_leaves(values))}) for "
                         f"{len(params)} parameters")
    return values


def _checked(module: Any, p: Any, v: Any, global_shape: bool = False) -> Any:
    """One entry argument: a typed array must have the parameter's dtype (and shape, unless ``global_shape``:
    an SPMD module's global array, checked when split); an untyped value takes the parameter's type."""
    from fusegen.hlo import dtypes
    from fusegen.runtime.inputs import check_array, from_npz_dtype

    if p.shape.is_tuple:
        return v
    where, key = f"module {module.name}", f"p{p.parameter_number}"
    want = dtypes.numpy_dtype(p.shape.element_type)
    arr = np.asarray(v)
    shape = tuple(p.shape.dimensions) if global_shape else arr.shape
    if _typed(v):  # numpy and jax alike: its dtype must be the parameter's
        return from_npz_dtype(arr, check_array(where, key, p, shape, arr.dtype))
    check_array(where, key, p, shape, want)  # a Python number or list carries no type: it takes the parameter's
    return arr.astype(want)


def inputs_for(module: Any, inputs: Any = None, seed: int = 0) -> list:
    """Entry arguments of ``module``: seeded random ones (``inputs=None``; index operands in range), an ``.npz``
    path, a sequence (parameter order; a pytree of as many leaves as parameters is flattened in jax's order) or
    a mapping keyed ``p0``, ``p1`` ... or by parameter name. One rule for every array that carries a dtype
    (numpy, jax.Array): its shape and dtype must be the parameter's (no silent cast, as for an ``.npz``:
    :func:`fusegen.runtime.inputs.check_array`); a Python number or list takes the parameter's type.

    Raises:
        fusegen.runtime.inputs.InputError: a parameter is missing, a key names no parameter, or an array has
            the wrong shape or dtype (named).
    """
    from fusegen.runtime.inputs import load_inputs, make_inputs

    if inputs is None:
        return make_inputs(module, seed)
    if isinstance(inputs, (str, Path)):
        return load_inputs(module, inputs)
    params = sorted(module.entry.parameters, key=lambda p: p.parameter_number)
    return [_checked(module, p, v) for p, v in zip(params, _param_values(module, inputs))]


def spmd_inputs(module: Any, plan: Any, inputs: Any = None, seed: int = 0) -> list[list]:
    """Per device, its shard of every entry argument of an N-device ``module``: seeded (``None``), an ``.npz`` of
    the global arrays or a folder of ``part{K}.inputs.npz``, or the global arrays (as :func:`inputs_for`, the
    shape being the global one), split by the parameters' shardings.

    Raises:
        fusegen.runtime.inputs.InputError: a missing input, a wrong dtype, a shape that does not shard.
    """
    from fusegen.runtime.spmd_io import load_spmd_inputs, seeded_inputs, split_inputs

    if inputs is None:
        return seeded_inputs(module, plan, seed)
    if isinstance(inputs, (str, Path)):
        return load_spmd_inputs(module, plan, inputs)
    params = sorted(module.entry.parameters, key=lambda p: p.parameter_number)
    arrays = [_checked(module, p, v, global_shape=True) for p, v in zip(params, _param_values(module, inputs))]
    return split_inputs(module, plan, arrays, "inputs")


def expected_for(module: Any, expected: Any, plan: Any = None) -> tuple[list | None, list | None]:
    """``(expected, expected_parts)`` for a run of ``module``: a known answer per output leaf (an ``.npz`` of
    ``o0``, ``o1`` ..., or a mapping keyed so, a sequence or a pytree of arrays, e.g. JAX's outputs as they are),
    or on N devices a folder of ``part{K}.expected.npz`` (``expected_parts``). Checked before the run: the leaf
    count, and on one device each leaf's shape.

    Raises:
        fusegen.runtime.inputs.InputError: the wrong number of leaves or a wrong shape (naming the leaf count
            and shapes of both); ValueError: an unreadable ``.npz`` or a missing array in it.
    """
    from fusegen.runtime.inputs import InputError

    if expected is None:
        return None, None
    outs = module.entry.root.shape.leaves()
    types = [t.element_type for t in outs]
    if isinstance(expected, (str, Path)):
        if plan is not None and Path(expected).is_dir():
            from fusegen.runtime.spmd_io import load_expected_parts

            return None, load_expected_parts(module, plan, expected)
        from fusegen.runtime.inputs import load_expected

        return load_expected(str(expected), len(types), types=types), None
    got = [np.asarray(x) for x in (_by_output_name(module, expected, len(outs)) or tree_leaves(expected))]
    wanted = describe([_LeafShape(s) for s in outs])
    if len(got) != len(outs):
        raise InputError(f"module {module.name}: expected has {describe(got)}; the module has {len(outs)} output "
                         f"lea{'f' if len(outs) == 1 else 'ves'} ({wanted.split(': ', 1)[-1]})")
    if plan is None:
        for i, (g, s) in enumerate(zip(got, outs)):
            if tuple(g.shape) != tuple(s.dimensions):
                raise InputError(f"module {module.name}: expected leaf {i} has shape {list(g.shape)}, output {i} "
                                 f"is {_LeafShape(s)} (expected: {describe(got)}; outputs: {wanted})")
    return got, None


def _by_output_name(module: Any, expected: Any, n: int) -> list | None:
    """The arrays of a mapping keyed ``o0``, ``o1``, ... (``dict(np.load(OUT.npz))``, an ``NpzFile``) in output
    order, None for anything else (a pytree: its keys sorted as text would put ``o10`` before ``o2``).

    Raises:
        fusegen.runtime.inputs.InputError: ``o`` keys that are not exactly ``o0`` ... ``o{n-1}``.
    """
    import re

    from fusegen.runtime.inputs import InputError

    if not isinstance(expected, Mapping) or not expected or \
            not all(isinstance(k, str) and re.fullmatch(r"o\d+", k) for k in expected):
        return None
    want = [f"o{i}" for i in range(n)]
    if set(expected) != set(want):
        missing, extra = sorted(set(want) - set(expected)), sorted(set(expected) - set(want))
        raise InputError(f"module {module.name}: expected is keyed by output ({len(expected)} keys) but the module "
                         f"has {n} output lea{'f' if n == 1 else 'ves'}, o0..o{n - 1}"
                         + (f"; missing {missing[:4]}" if missing else "")
                         + (f"; no output {extra[:4]}" if extra else ""))
    return [expected[k] for k in want]


@attrs.frozen
class _LeafShape:
    """An output leaf's shape as :func:`describe` shows it (``f32[4,8]``)."""

    shape_: Any

    @property
    def shape(self) -> tuple:
        return tuple(self.shape_.dimensions)

    @property
    def dtype(self) -> Any:
        from fusegen.hlo.dtypes import numpy_dtype

        return numpy_dtype(self.shape_.element_type)

    def __str__(self) -> str:
        return describe([self]).split(": ", 1)[1]


# --------------------------------------------------------------------------------------------------- run
def devices_of(module: Any) -> int:
    """``num_partitions * replica_count`` of ``module``.

    Raises:
        fusegen.hlo.sharding.ShardingError: the counts cannot be read.
    """
    from fusegen.hlo.sharding import device_counts

    p, r = device_counts(module)
    return p * r


def run_modules(modules: list, s: Any, *, inputs: Any = None, seed: int = 0, expected: Any = None,
                compile: bool = True, limits: Any = None, verify: Any = None, jobs: int = 1, progress: Any = None,
                parse_seconds: float = 0.0, pass_seconds: Sequence[float] = (),
                output_shardings: Any = None) -> RunResult:
    """Run prepared (fused) ``modules`` with session ``s``: the loop of :func:`run` and ``fusegen run``.

    A module of N > 1 devices runs as all of them (:func:`fusegen.verify.judged_run.run_spmd_module`): ``inputs``
    and ``expected`` are then global (:func:`spmd_inputs`, :func:`expected_for`). Inputs, expected and limits of
    every module are checked before the first one runs. ``parse_seconds`` / ``pass_seconds`` (per module) go
    into each report's timings. ``output_shardings``: the output shardings of an N-device module as its capture
    stated them (a :class:`~fusegen.runtime.sharding_sidecar.StatedShardings`, one module); default: the
    ``NAME.shardings.json`` beside each module's file, when there is one (read and checked before any run).

    Raises:
        fusegen.runtime.inputs.InputError, ValueError (an unreadable ``.npz``), ShardingError,
        fusegen.evaluator.collectives.MultiDeviceUnsupported (an N-device module fusegen cannot run as N
        copies), fusegen.runtime.limits.ResourceLimitError, and what running raises (UnsupportedOpError,
        PluginError, DispatchError, EvaluationError, KernelDirError, TritonInternalsError, MemoryError).
    """
    from fusegen.runtime.executor import combined_status
    from fusegen.runtime.sharding_sidecar import stated_shardings
    from fusegen.runtime.inputs import InputError
    from fusegen.runtime.limits import RunLimits, check_module, default_max_memory
    from fusegen.verify.judged_run import run_module, run_spmd_module
    from fusegen.evaluator.spmd_plan import plan_spmd

    if (inputs is not None or expected is not None) and len(modules) > 1:
        raise InputError(f"{len(modules)} modules: inputs and expected need a single module")
    limits = limits if limits is not None else RunLimits(max_memory=default_max_memory())
    verify = verify if verify is not None else s.config.verify.with_overrides(None, None)
    sink = progress_sink(progress)
    jobs_todo = []  # everything checked before anything runs
    for m in modules:
        plan = plan_spmd(m) if devices_of(m) > 1 else None
        check_module(m, limits)
        exp, parts = expected_for(m, expected, plan)
        args = spmd_inputs(m, plan, inputs, seed) if plan is not None else inputs_for(m, inputs, seed)
        stated = (output_shardings or stated_shardings(m)) if plan is not None else None
        jobs_todo.append((m, plan, args, exp, parts, stated))
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    task = None
    if sink is not None:
        n = sum(1 for m in modules for c in m.computations for i in c.instructions if i.opcode == "fusion")
        task = sink.add_task("running fusions", total=n)
    on_fusion = (lambda r: sink.update(task, advance=1, description=r.name)) if sink is not None else None
    reports, outputs = [], []
    try:
        for k, (m, plan, args, exp, parts, stated) in enumerate(jobs_todo):
            if plan is not None:
                _, out, rep = run_spmd_module(m, args, s.device, pm=s.pm, compile_kernels=compile, on_fusion=on_fusion,
                                              limits=limits, verify=verify, expected=exp, expected_parts=parts,
                                              jobs=jobs, plan=plan, stated=stated)
            else:
                out, rep = run_module(m, args, s.device, pm=s.pm, compile_kernels=compile, on_fusion=on_fusion,
                                      limits=limits, verify=verify, expected=exp, jobs=jobs)
            rep.timings.add("parse", parse_seconds)
            rep.timings.add("passes", pass_seconds[k] if k < len(pass_seconds) else 0.0)
            reports.append(rep)
            outputs.append(out)
    finally:
        if sink is not None:
            sink.finish()
    return RunResult(module="; ".join(r.module for r in reports), status=combined_status(r.status for r in reports),
                     ok=all(r.ok for r in reports), outputs=outputs[0] if outputs else None,
                     fusions=tuple(f for r in reports for f in r.fusions), reports=tuple(reports))


def run(module: ModuleLike, *, inputs: Any = None, seed: int = 0, expected: Any = None, device: Any = None,
        config: Any = None, xla_flags: Sequence[str] = (), compile: bool = True, rtol: float | None = None,
        atol: float | None = None, limits: Any = None, jobs: int = 1, passes: Sequence[str] | None = None,
        pm: Any = None, progress: Any = None, allow_vacuous: bool | None = None) -> RunResult:
    """Run every fusion's kernel (Triton's interpreter on a CPU) and judge the outputs (``fusegen run``).

    Args:
        module: a Module, a list of them, a path or HLO text (:func:`~fusegen.api.load_all`), or what
            :func:`fusegen.capture` returned (then ``inputs`` and ``expected`` are the function's argument and
            output pytrees, and :attr:`RunResult.outputs` is its output pytree).
        inputs: see :func:`inputs_for` (one module); ``seed`` seeds random ones. A module of N > 1 devices
            (``num_partitions * replica_count``) runs as all of them: ``inputs`` are then the global arrays
            (or an ``.npz`` of them, or a folder of ``part{K}.inputs.npz``), the outputs and ``expected``
            global; refusals raise :class:`fusegen.evaluator.collectives.MultiDeviceUnsupported`.
        expected: a known answer per output leaf, the third oracle (:func:`expected_for`: a sequence or pytree of
            arrays such as JAX's own outputs, an ``.npz`` of ``o0``, ``o1`` ...).
        compile: also compile every kernel for sm_90 (the CLI's default; ``--no-compile`` is ``False``).
        rtol, atol: ``--rtol`` / ``--atol`` (the conditioning factor and the floor of every type).
        allow_vacuous: ``--allow-vacuous``: an output NaN/inf everywhere on both sides is ``drift``, not
            ``vacuous`` (``ok`` false); default ``[verify] allow_vacuous``.
        limits: a :class:`fusegen.runtime.limits.RunLimits` (default: half the machine's memory, no deadline).
        jobs: compile worker processes (``--jobs``); they start as ``python -m`` workers that never import the
            caller's ``__main__``, so a plain script needs no ``if __name__ == "__main__":`` guard.
        passes: the pipeline for an unoptimized module (``--passes``; default ``[pipeline] passes``).
        progress: ``None``, ``"tqdm"`` or a callable taking a :class:`~fusegen.api.progress.ProgressEvent`.
        device, config, xla_flags, pm: see :func:`~fusegen.api.session`.

    Raises:
        Before anything runs: fusegen.runtime.inputs.InputError (inputs or expected that do not fit, naming
        leaf counts and shapes), ValueError, and what :func:`~fusegen.api.load_all`,
        :func:`~fusegen.api.session` and :func:`~fusegen.api.prepare` raise; then what :func:`run_modules`
        raises. A plugin failing on a fusion (matcher, factory, ``emit``, kernel load/run/compile) raises
        nothing: the result's ``status`` is ``"error"`` and :attr:`RunResult.errors` names it.
    """
    from fusegen.runtime.inputs import InputError

    captured = getattr(module, "__fusegen_captured__", None)
    if captured is not None:
        inputs, expected = captured.flatten(inputs, expected)  # the function's pytrees, checked against its trees
    modules = as_modules(module)
    if (inputs is not None or expected is not None) and len(modules) > 1:
        raise InputError(f"{len(modules)} modules: inputs and expected need a single module")
    s = session(config, device, xla_flags, pm)
    prepare(modules, s, passes)
    result = run_modules(modules, s, inputs=inputs, seed=seed, expected=expected, compile=compile, limits=limits,
                         verify=s.config.verify.with_overrides(rtol, atol, allow_vacuous), jobs=jobs,
                         progress=progress, output_shardings=captured.stated_shardings() if captured is not None else None)
    if captured is not None:
        result = attrs.evolve(result, outputs=captured.unflatten(result.outputs))
    return result
