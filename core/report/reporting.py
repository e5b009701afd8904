"""``fusegen.report``: the module as one self-contained HTML page (graph, fusion cards, tuning charts, summary).

:func:`report` is the library's ``fusegen report``: it collects the page's document
(:func:`fusegen.report.data.build_report`), optionally after tuning (``autotune=True``, as ``run --autotune``)
and running (``run=True``, with the caller's ``inputs`` and ``expected`` as :func:`fusegen.run` takes them),
and renders it (:func:`fusegen.report.render.render_html`). The report stands above the library
(:mod:`fusegen.api`, docs/layers.md): it reads api's sessions, runs and tunings; calling the package
``fusegen.report(...)`` calls :func:`report`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

import attrs

from fusegen.api.loading import ModuleLike, as_modules, prepare, session


@attrs.frozen
class ReportResult:
    """What :func:`report` made (every key of :meth:`to_json`, the ``--json-data`` document, is an attribute).

    Attributes:
        html: the page (UTF-8 text, a few MB: plotly and Viz.js are embedded).
        path: where it was written (``output=``), else None.
        document: the page's data: ``schema``, ``file``, ``device``, ``options``, ``phases`` (s), ``modules``
            (fusion cards, graph, run errors), ``tuning``, ``summary``.
        status: the summary's status (``ok``, ``drift``, ``mismatch``; ``-`` without ``run``).
        ok: no mismatch, no failed tuning, no plugin failure (the CLI's exit 0).
        errors: ``fusion %NAME: REASON`` of each fusion a plugin failed on.
        run: the :class:`~fusegen.api.RunResult` of ``run=True``, else None.
        notes: warnings of reading or writing XLA's autotune results files (the CLI prints them).
    """

    html: str = attrs.field(repr=False)
    path: Path | None
    document: dict = attrs.field(repr=False)
    run: Any = attrs.field(default=None, repr=False, eq=False)
    notes: tuple[str, ...] = attrs.field(default=(), repr=False, eq=False)

    @property
    def status(self) -> str:
        return self.document["summary"].get("status", "-")

    @property
    def errors(self) -> list[str]:
        return [f"fusion %{f['name']}: {f.get('reason', '')}" for m in self.document["modules"]
                for f in m["fusions"] if f.get("status") == "error"]

    @property
    def ok(self) -> bool:
        bad = self.status == "mismatch" or any(t.get("error") for t in self.document["tuning"]
                                                if t.get("source") == "autotune")
        bad = bad or any(m.get("outputs_match") is False for m in self.document["modules"])
        return not bad and not self.errors

    def __getattr__(self, name: str) -> Any:
        if name in ("schema", "fusegen_version", "file", "device", "generated", "options", "phases", "modules",
                    "tuning", "summary"):
            return self.document.get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def to_json(self) -> dict:
        """The page's data (``fusegen report --json-data``), a fresh copy."""
        return json.loads(json.dumps(self.document))

    def _repr_html_(self) -> str:  # a notebook shows the page inline
        return self.html


def collect(path: str, modules: list, s: Any, run_reports: list, compile_kernels: bool, phases: dict,
            tuning: list, options: dict) -> dict:
    """The report document of prepared ``modules`` (``run_reports``: one RunReport or None per module).

    Raises:
        fusegen.plugin_manager.PluginError, fusegen.dispatch.DispatchError.
    """
    from fusegen.report.data import build_report, module_entry

    t0 = time.perf_counter()
    major, minor = getattr(s.device, "compute_capability", (9, 0))
    capability = major * 10 + minor if major >= 7 else 90  # the device's SM; sm_90 for a non-CUDA preset
    options["compile"] = f"sm_{capability}" if compile_kernels else False
    entries = [module_entry(m, s.device, s.pm, rr, compile_kernels, capability,
                            card_prefix=f"m{k}-" if len(modules) > 1 else "")
               for k, (m, rr) in enumerate(zip(modules, run_reports))]
    phases[f"dispatch + sm_{capability} compile" if compile_kernels else "dispatch"] = time.perf_counter() - t0
    return build_report(path, s.device, entries, tuning, phases, options)


def report(module: ModuleLike, *, output: str | Path | None = None, json_data: str | Path | None = None,
           autotune: bool = False, record_dir: str | None = None, cost_model_top_k: int | None = None,
           autotune_cache_dir: str | None = None, run: bool = False, inputs: Any = None, expected: Any = None,
           seed: int = 0, compile: bool = True, rtol: float | None = None, atol: float | None = None,
           limits: Any = None, device: Any = None, config: Any = None, xla_flags: Sequence[str] = (),
           passes: Sequence[str] | None = None, pm: Any = None, progress: Any = None) -> ReportResult:
    """The HTML report of a module (``fusegen report``); in a notebook the result shows the page inline.

    Args:
        module: a Module, a list, a path or HLO text, or what :func:`fusegen.capture` returned.
        output: write the page there (default: nothing written; the CLI's default is ``NAME.report.html``).
        json_data: also write the page's data there.
        autotune, record_dir, cost_model_top_k, autotune_cache_dir: tune first and chart every measured
            candidate (``record_dir`` without ``autotune``: chart the records a previous tuning wrote there).
        run: also run every fusion (:func:`fusegen.run` with ``inputs``, ``expected``, ``seed``, ``rtol``,
            ``atol``, ``limits``) and show its error against the reference.
        compile: compile each kernel for the device's SM (registers, shared memory, spills).
        device, config, xla_flags, passes, pm, progress: as :func:`fusegen.run`.

    Raises:
        ValueError: options that need ``autotune`` or ``run`` without them, a ``record_dir`` to read that is
            not a directory; what :func:`fusegen.run` and :func:`fusegen.tune` raise;
            fusegen.autotuning.replay.RecordError (unreadable records); fusegen.report.graph.VendorError (a
            broken install); OSError (the page cannot be written).
    """
    from fusegen.api.running import run_modules
    from fusegen.api.tuning import autotune_modules
    from fusegen.report import tuning as tuning_data
    from fusegen.report.render import render_html

    if not autotune and (cost_model_top_k is not None or autotune_cache_dir is not None):
        raise ValueError("cost_model_top_k and autotune_cache_dir need autotune=True")
    if not run and (inputs is not None or expected is not None):
        raise ValueError("inputs and expected need run=True")
    if record_dir is not None and not autotune and not Path(record_dir).is_dir():
        raise ValueError(f"record_dir {record_dir}: no such directory (without autotune it is read)")
    captured = getattr(module, "__fusegen_captured__", None)
    if captured is not None and run:
        inputs, expected = captured.flatten(inputs, expected)
    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    modules = as_modules(module)
    s = session(config, device, xla_flags, pm)
    phases["parse"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    prepare(modules, s, passes)
    phases["passes"] = time.perf_counter() - t0
    tuning: list = []
    notes: tuple[str, ...] = ()
    if autotune:
        t0 = time.perf_counter()
        tuned = autotune_modules(modules, s, cache_dir=autotune_cache_dir, record_dir=record_dir,
                                 cost_model_top_k=cost_model_top_k, progress=progress)
        phases["autotune"] = time.perf_counter() - t0
        tuning = tuning_data.from_instruction_reports(list(tuned.tuned), tuned.scratch_bytes_window_us)
        notes = tuned.notes
    elif record_dir is not None:
        tuning = tuning_data.from_record_dir(record_dir)
    ran = None
    run_reports: list = [None] * len(modules)
    if run:
        t0 = time.perf_counter()
        ran = run_modules(modules, s, inputs=inputs, seed=seed, expected=expected, compile=compile, limits=limits,
                          verify=s.config.verify.with_overrides(rtol, atol), progress=progress)
        run_reports = list(ran.reports)
        phases["run"] = time.perf_counter() - t0
    name = str(getattr(modules[0], "filename", None) or modules[0].name)
    doc = collect(name, modules, s, run_reports, compile, phases, tuning,
                  {"autotune": autotune, "run": run, "record": record_dir, "compile": compile,
                   "seed": seed if run else None, "inputs": _given(inputs), "expected": _given(expected)})
    html = render_html(doc)
    path = Path(output) if output is not None else None
    if path is not None:
        path.write_text(html, encoding="utf-8")
    if json_data is not None:
        Path(json_data).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return ReportResult(html=html, path=path, document=doc, run=ran, notes=notes)


def _given(value: Any) -> str | None:
    """What the page's options say of ``inputs`` / ``expected``: the file, ``"arrays"``, or None."""
    if value is None:
        return None
    return str(value) if isinstance(value, (str, Path)) else "arrays"
