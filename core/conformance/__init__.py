"""fusegen's conformance suite for plugins, as a pytest plugin.

Run it from any directory (a plugin author's repository, or an empty one: the suite brings its tests)::

    pytest -p fusegen.conformance --fusegen-plugin NAME [--fusegen-report report.json]
           [--fusegen-xfail xfails.txt] [--fusegen-tolerance 'test_corpus_output*=rtol:1e-3,atol:1e-4']

``NAME`` is an installed plugin's entry-point name (``fusegen plugins`` lists them). Without explicit test
paths only the suite (:mod:`fusegen.conformance.suite`) is collected; with paths, the suite is added to
them. The checks, the capabilities a plugin declares to gate them, and the report are described in
``docs/plugins.md`` ("Conformance suite").

Options:
    ``--fusegen-plugin NAME``: the plugin under test (required to run anything).
    ``--fusegen-xfail FILE``: test ids expected to fail, one per line, ``#`` comments; an id matches a test
        whose name equals it or whose node id contains it. Ids matching no test are warned about (stale).
    ``--fusegen-report FILE``: write a JSON report (suite version, plugin name and version, device,
        capabilities, one result per test).
    ``--fusegen-tolerance PATTERN=rtol:X,atol:Y``: tolerance for tests whose name matches the ``fnmatch``
        pattern (repeatable; beats the plugin's declared ``tolerances``).
    ``--fusegen-max-corpus N`` (8), ``--fusegen-max-examples N`` (10), ``--fusegen-device NAME`` (h200: the
        device whose launch limits apply).
    ``--fusegen-max-elements N`` (131072): corpus fusions / instructions with more operand + output elements
        are not run; ``--fusegen-max-codegen-elements N`` (32768): the same for codegen backends;
        ``--fusegen-max-matcher-fusions N`` (0, all): corpus fusions every matcher is asked about;
        ``--fusegen-max-configs N`` (8; 0: all): configs of a codegen backend whose results are checked on its
        first (smallest) corpus instruction (a seeded sample keeping the first when there are more; the
        result's ``configs_checked`` says how many of how many; later instructions check the first config). What a limit leaves out is counted in the skip reasons and the report's
        ``corpus`` section.

The corpus is the shared one plus every ``$FUSEGEN_CORPUS`` directory (:mod:`fusegen.conformance.corpus`).
"""

from __future__ import annotations

import json
import platform
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

#: Version of the suite's checks (bumped when a check is added or tightened).
SUITE_VERSION = "1.0"
SUITE_PATH = Path(__file__).resolve().with_name("suite.py")
_STATE_KEY = pytest.StashKey["_State | None"]()
_RESULTS_KEY = pytest.StashKey[dict]()


class ConformanceUsageError(pytest.UsageError):
    """Bad suite options (unknown plugin, unreadable xfail file, malformed tolerance)."""


def pytest_addoption(parser: Any) -> None:
    g = parser.getgroup("fusegen-conformance", "fusegen plugin conformance suite")
    g.addoption("--fusegen-plugin", metavar="NAME", default=None, help="Installed fusegen plugin to test.")
    g.addoption("--fusegen-xfail", metavar="FILE", default=None,
                help="Test ids expected to fail (one per line, '#' comments); stale ids are warned about.")
    g.addoption("--fusegen-report", metavar="FILE", default=None, help="Write a JSON report here.")
    g.addoption("--fusegen-tolerance", metavar="PATTERN=rtol:X,atol:Y", action="append", default=[],
                help="Tolerance override for tests matching PATTERN (fnmatch on the test name). Repeatable.")
    g.addoption("--fusegen-max-corpus", type=int, default=8, metavar="N",
                help="Most shared-corpus fusions / instructions checked per plugin (default 8; every "
                     "FUSEGEN_CORPUS fusion is checked).")
    g.addoption("--fusegen-max-examples", type=int, default=10, metavar="N",
                help="Hypothesis examples per generated kind (default 10).")
    g.addoption("--fusegen-device", default="h200", metavar="NAME",
                help="Device preset whose launch limits apply (default h200).")
    g.addoption("--fusegen-max-elements", type=int, default=None, metavar="N",
                help="Corpus fusions / instructions with more operand + output elements are not run "
                     "(default 131072); the skip reasons count them.")
    g.addoption("--fusegen-max-codegen-elements", type=int, default=None, metavar="N",
                help="The same limit for codegen-backend checks (default 32768).")
    g.addoption("--fusegen-max-matcher-fusions", type=int, default=0, metavar="N",
                help="Corpus fusions each kind matcher is asked about (default 0: all of them).")
    g.addoption("--fusegen-max-configs", type=int, default=8, metavar="N",
                help="Configs of a codegen backend whose results are checked on its first corpus instruction (default "
                     "8; 0: every one); with more, a seeded sample of N that keeps the first, its size reported.")


def parse_tolerance(spec: str) -> tuple[str, dict[str, float]]:
    """``"PATTERN=rtol:1e-3,atol:1e-5"`` -> ``("PATTERN", {"rtol": 1e-3, "atol": 1e-5})``.

    Raises:
        ConformanceUsageError: malformed spec.
    """
    pat, sep, rest = spec.rpartition("=")
    tol: dict[str, float] = {}
    try:
        if not sep or not pat:
            raise ValueError("expected PATTERN=rtol:X,atol:Y")
        for part in rest.split(","):
            k, _, v = part.partition(":")
            if k.strip() not in ("rtol", "atol"):
                raise ValueError(f"unknown key {k.strip()!r} (rtol or atol)")
            tol[k.strip()] = float(v)
    except ValueError as e:
        raise ConformanceUsageError(f"--fusegen-tolerance {spec!r}: {e}") from None
    return pat, tol


def read_xfail_file(path: str) -> list[str]:
    """Ids of an xfail file (blank lines and ``#`` comments dropped).

    Raises:
        ConformanceUsageError: the file cannot be read.
    """
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConformanceUsageError(f"--fusegen-xfail {path}: {e.strerror or e}") from None
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


class _State:
    """The plugin under test and the suite's settings for one pytest session."""

    def __init__(self, config: Any):
        from fusegen.conformance import corpus
        from fusegen.conformance.target import CapabilityError, PluginNotFound, Target, available_devices
        from fusegen.device import get_device
        from fusegen.plugin_manager import PluginError

        opt = config.option
        self.plugin_name: str = opt.fusegen_plugin
        try:
            self.target = Target(self.plugin_name)
        except (PluginNotFound, PluginError, CapabilityError) as e:
            raise ConformanceUsageError(f"fusegen.conformance: {e}") from None
        try:
            self.device = get_device(opt.fusegen_device)
        except (KeyError, ValueError) as e:
            raise ConformanceUsageError(f"--fusegen-device: {str(e).strip(chr(39))}") from None
        self.available = available_devices()
        self.max_corpus = max(0, int(opt.fusegen_max_corpus))
        self.max_examples = max(1, int(opt.fusegen_max_examples))
        self.max_compiles = 3
        self.max_elements = corpus.MAX_ELEMENTS if opt.fusegen_max_elements is None else max(0, opt.fusegen_max_elements)
        self.max_codegen_elements = (corpus.MAX_CODEGEN_ELEMENTS if opt.fusegen_max_codegen_elements is None
                                     else max(0, opt.fusegen_max_codegen_elements))
        self.max_matcher_fusions = max(0, int(opt.fusegen_max_matcher_fusions or 0))
        self.max_configs = max(0, int(opt.fusegen_max_configs if opt.fusegen_max_configs is not None else 8))
        try:
            self.corpus_roots = corpus.corpus_roots()
        except corpus.CorpusError as e:
            raise ConformanceUsageError(f"fusegen.conformance: {e}") from None
        self.dropped: dict = {}
        self.tolerance_overrides = dict(parse_tolerance(s) for s in opt.fusegen_tolerance)
        self.xfail_path = opt.fusegen_xfail
        self.xfail_ids = read_xfail_file(opt.fusegen_xfail) if opt.fusegen_xfail else []
        self.stale_xfails: list[str] = []
        self.skip_reasons: dict[str, str] = {}
        self._params: dict[str, list] | None = None

    # -- gating ------------------------------------------------------------------------------------
    def require_device(self, *devices: str) -> None:
        """Skip unless the plugin declares one of ``devices`` that this machine offers."""
        declared = set(self.target.capabilities.devices)
        usable = [d for d in devices if d in declared and d in self.available]
        if not usable:
            have = ", ".join(self.available)
            pytest.skip(f"needs device {' or '.join(devices)}: plugin {self.plugin_name!r} declares "
                        f"{', '.join(sorted(declared)) or 'none'}; this machine offers {have}")

    # -- parametrisation ---------------------------------------------------------------------------
    def params_for(self, test_name: str) -> list:
        if self._params is None:
            from fusegen.conformance.params import build_params

            self._params = build_params(self)
        return self._params.get(test_name, [pytest.param(None, id="all")])


def get_state(config: Any) -> _State | None:
    """The session's plugin-under-test state (None without ``--fusegen-plugin``)."""
    return config.stash.get(_STATE_KEY, None)


# ------------------------------------------------------------------------------------------- hooks
def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "fusegen_check(name): the conformance check a test performs")
    name = config.getoption("fusegen_plugin", None)
    if not name:
        return
    config.stash[_STATE_KEY] = _State(config)
    config.stash[_RESULTS_KEY] = {}
    suite = str(SUITE_PATH)
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS
    if not explicit:
        config.args = [suite]
    elif not any(Path(a.split("::", 1)[0]).resolve() == SUITE_PATH for a in config.args if a):
        config.args = [*config.args, suite]


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent: Any) -> Any:
    # The suite's own package directories are plain directories to pytest: importing fusegen's
    # __init__ files as test packages would give them a second module name.
    if SUITE_PATH.is_relative_to(path) and path != path.parent and (path / "__init__.py").is_file():
        return pytest.Dir.from_parent(parent, path=path)
    return None


class _SuiteModule(pytest.Module):
    """The suite, imported under its package name whatever the rootdir or import mode."""

    def _getobj(self) -> Any:
        import importlib

        return importlib.import_module("fusegen.conformance.suite")


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent: Any) -> Any:
    if Path(module_path).resolve() == SUITE_PATH:
        return _SuiteModule.from_parent(parent, path=Path(module_path), nodeid="fusegen/conformance/suite.py")
    return None


def _matches(entry: str, item: Any) -> bool:
    return entry == item.name or entry in item.nodeid


def pytest_collection_modifyitems(session: Any, config: Any, items: list) -> None:
    st = get_state(config)
    if st is None or not st.xfail_ids:
        return
    used: set[str] = set()
    for item in items:
        for entry in st.xfail_ids:
            if _matches(entry, item):
                used.add(entry)
                item.add_marker(pytest.mark.xfail(reason=f"listed in --fusegen-xfail {st.xfail_path}", strict=False))
                break
    st.stale_xfails = [e for e in st.xfail_ids if e not in used]
    for e in st.stale_xfails:
        warnings.warn(pytest.PytestWarning(f"fusegen.conformance: stale xfail id {e!r} in {st.xfail_path} matches "
                                           f"no collected test"), stacklevel=1)


def _check_of(report: Any) -> str:
    text = str(getattr(report, "longreprtext", "") or "")
    import re

    m = re.search(r"CheckFailed: \[([a-z0-9-]+)\]", text)
    return m.group(1) if m else ""


def pytest_runtest_logreport(report: Any) -> None:
    if not _ACTIVE:
        return
    results = _ACTIVE[-1]
    r = results.get(report.nodeid)
    if r is None:
        r = results[report.nodeid] = {"nodeid": report.nodeid, "test": report.nodeid.rsplit("::", 1)[-1],
                                      "outcome": "passed", "duration_s": 0.0}
    r["duration_s"] = round(r["duration_s"] + float(getattr(report, "duration", 0.0)), 4)
    for key, value in getattr(report, "user_properties", ()) or ():
        if key.startswith("fusegen_"):  # what a check says it covered (e.g. configs_checked)
            r[key[len("fusegen_"):]] = value
    if hasattr(report, "wasxfail"):
        r["outcome"] = "xfailed" if report.skipped else "xpassed"
        r["message"] = str(report.wasxfail)
    elif report.skipped:
        r["outcome"] = "skipped"
        lr = report.longrepr
        r["message"] = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
    elif report.failed:
        r["outcome"] = "failed" if report.when == "call" else "error"
        r["check"] = _check_of(report)
        lines = [ln for ln in str(report.longreprtext).splitlines() if ln.startswith("E ")]
        r["message"] = "\n".join(ln[2:].strip() for ln in lines)[:2000]


_ACTIVE: list[dict] = []  # result tables of the running sessions (a report carries no config)


def pytest_sessionstart(session: Any) -> None:
    st = get_state(session.config)
    if st is None:
        return
    _ACTIVE.append(session.config.stash[_RESULTS_KEY])
    session.config.stash[_T0] = time.time()


_T0 = pytest.StashKey[float]()


def build_report(config: Any) -> dict:
    """The JSON report of this session (see ``--fusegen-report``)."""
    import fusegen

    st = get_state(config)
    results = list(config.stash.get(_RESULTS_KEY, {}).values())
    summary: dict[str, int] = {}
    for r in results:
        summary[r["outcome"]] = summary.get(r["outcome"], 0) + 1
    t = st.target
    return {
        "suite": "fusegen.conformance", "suite_version": SUITE_VERSION, "fusegen_version": fusegen.__version__,
        "plugin": {"name": t.name, "version": t.version, "distribution": t.info.distribution,
                   "module": t.info.module, "group": t.info.group},
        "capabilities": t.capabilities.to_json(),
        "device": {"limits": st.device.name, "model": st.device.model, "available": list(st.available),
                   "outputs_checked_on": "cpu-interpreter (Triton interpreter)",
                   "compile_target": "sm_90", "host": platform.machine()},
        "options": {"max_corpus": st.max_corpus, "max_examples": st.max_examples,
                    "max_elements": st.max_elements, "max_codegen_elements": st.max_codegen_elements,
                    "max_matcher_fusions": st.max_matcher_fusions, "max_configs": st.max_configs,
                    "tolerance_overrides": st.tolerance_overrides, "xfail_file": st.xfail_path},
        "corpus": {"roots": [str(r) for r in st.corpus_roots],
                   "left_out": {k: d.to_json() for k, d in st.dropped.items()}},
        "stale_xfail_ids": list(st.stale_xfails),
        "summary": summary,
        "duration_s": round(time.time() - config.stash.get(_T0, time.time()), 2),
        "results": results,
    }


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    st = get_state(session.config)
    if st is None:
        return
    res = session.config.stash[_RESULTS_KEY]
    if any(r is res for r in _ACTIVE):
        _ACTIVE.pop(next(i for i, r in enumerate(_ACTIVE) if r is res))
    path = session.config.getoption("fusegen_report")
    if path:
        report = build_report(session.config)
        Path(path).write_text(json.dumps(report, indent=2, default=str) + "\n")


def pytest_report_header(config: Any) -> list[str] | None:
    st = get_state(config)
    if st is None:
        return None
    t = st.target
    c = t.capabilities
    return [f"fusegen.conformance {SUITE_VERSION}: plugin {t.name} {t.version} ({t.info.distribution}); "
            f"kinds {list(c.kinds)}, dtypes {list(c.dtypes)}, devices {list(c.devices)} ({c.source}); "
            f"machine offers {', '.join(st.available)}; launch limits of {st.device.name}"]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: Any, config: Any) -> None:
    st = get_state(config)
    if st is None or not st.stale_xfails:
        return
    terminalreporter.section("fusegen.conformance: stale xfail ids")
    for e in st.stale_xfails:
        terminalreporter.line(f"{e!r} (in {st.xfail_path}) matches no collected test")
