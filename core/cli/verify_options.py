"""The verdict's part of ``fusegen run``: ``--rtol``, ``--atol``, ``--expected`` and the lines under the table.

See :mod:`fusegen.verify.verdict` for what ``ok``, ``drift`` and ``mismatch`` mean and
:mod:`fusegen.config.verify_options` for the ``[verify]`` table these options override.
"""

from __future__ import annotations

import click


def verify_options(f):
    """Add ``--rtol``, ``--atol``, ``--allow-vacuous`` and ``--expected`` (parameters ``rtol``, ``atol``,
    ``allow_vacuous``, ``expected_path``)."""
    f = click.option("--allow-vacuous", "allow_vacuous", is_flag=True, default=None,
                     help="An output that is NaN/inf everywhere in kernel and reference alike compares nothing: "
                          "accept it as drift instead of failing (exit 1) ([verify] allow_vacuous).")(f)
    f = click.option("--expected", "expected_path", type=click.Path(), default=None,
                     help="A known answer (.npz with o0, o1, ... or output names, e.g. JAX's own outputs, as "
                          "np.savez writes them: ml_dtypes arrays are read by the output's type): a third oracle for "
                          "the module outputs, judged per element (integers and pred exactly). A module of N "
                          "devices: the global outputs, or a folder of part{K}.expected.npz.")(f)
    f = click.option("--atol", type=click.FloatRange(min=0), default=None,
                     help="Floor of every element type, a fraction of max(1, max|value|) (default per dtype: "
                          "f32 1e-5, f16 1e-3, bf16 1e-2; [verify] atol).")(f)
    f = click.option("--rtol", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Conditioning factor: an output may be this many times further from the f64 oracle "
                          "than the reference is and still be drift, not a mismatch (default 4; [verify] rtol).")(f)
    return f


def budget_cell(f) -> str:
    """``error/budget`` of a fusion row: ``0.031 (bf16 K=4096)``, or ``-`` without a compared kernel."""
    if f.error_budget_ratio is None:
        return "-"
    return f"{f.error_budget_ratio:.2g} ({f.budget})"


def verdict_lines(report) -> list[str]:
    """Lines for outputs that are not ``ok`` (worst element, f64 figures) and the first fusion out of budget."""
    v = report.verdict
    if v is None:
        return []
    lines = v.lines()
    if v.oracle.startswith("unavailable") and lines:
        lines.append(f"f64 oracle {v.oracle}")
    return lines
