"""Correctness by output clustering (XLA ``ConfigRunner::ProfileAll``'s bookkeeping).

Mirrors ``xla/backends/autotuner/config_runner.cc``: trusted candidates (backends that cannot produce
wrong results) are profiled first, outputs join the first cluster whose representative they match at
relative tolerance ``rtol`` (``BufferComparator``), untrusted outputs cannot found a cluster once a
trusted one exists, and ``DemoteNonWinningClusterConfigs`` fails everything outside the winning
cluster as WRONG_RESULTS. The logic here is pure: running a candidate and comparing two outputs are
callbacks, so the corpus cases (scripted comparisons) and replay records run the same code.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import attrs
import numpy as np

from fusegen.autotuning.selection import Failure, FailureKind, ProfileResult

#: Flag default of ``xla_gpu_autotune_gemm_rtol`` (debug_options_flags.cc:489).
DEFAULT_RTOL = 0.1


def _canonical(a: np.ndarray) -> np.ndarray:
    """float64 view with infinities clamped to the dtype's largest finite value (as BufferComparator)."""
    dt = a.dtype
    x = np.asarray(a).astype(np.float64) if dt.kind != "c" else np.asarray(a)
    if dt.kind == "f" or dt.name in ("bfloat16",) or dt.name.startswith("float8") or dt.name.startswith("float4"):
        try:
            big = float(np.finfo(dt).max)
        except (TypeError, ValueError):
            big = np.inf
        x = np.where(np.isposinf(x), big, np.where(np.isneginf(x), -big, x))
    return x


def buffers_match(current: Any, expected: Any, rtol: float = DEFAULT_RTOL) -> bool:
    """Whether two outputs agree: every element has ``|a-b| / (max(|a|,|b|) + 1) < rtol``.

    ``current``/``expected`` are arrays or lists of arrays (tuple outputs). NaN matches NaN; an
    infinity is compared as the dtype's largest finite value. ``pred`` (bool) must be equal. Mirrors
    the host path of ``BufferComparator::CompareEqual`` (``xla/backends/gpu/runtime/buffer_comparator.cc``).
    """
    if isinstance(current, (list, tuple)) or isinstance(expected, (list, tuple)):
        cur = list(current) if isinstance(current, (list, tuple)) else [current]
        exp = list(expected) if isinstance(expected, (list, tuple)) else [expected]
        return len(cur) == len(exp) and all(buffers_match(c, e, rtol) for c, e in zip(cur, exp))
    a = np.asarray(current)
    b = np.asarray(expected)
    if a.size != b.size:
        return False
    a = a.reshape(-1)
    b = b.reshape(-1)
    if a.dtype == np.bool_ or b.dtype == np.bool_:
        return bool(np.array_equal(a, b))
    x = _canonical(a)
    y = _canonical(b)
    if x.dtype.kind == "c" or y.dtype.kind == "c":
        x = np.concatenate([np.real(x), np.imag(x)]).astype(np.float64)
        y = np.concatenate([np.real(y), np.imag(y)]).astype(np.float64)
    both_nan = np.isnan(x) & np.isnan(y)
    with np.errstate(invalid="ignore", over="ignore"):
        rel = np.abs(x - y) / (np.maximum(np.abs(x), np.abs(y)) + 1.0)
        ok = both_nan | (rel < rtol)
    return bool(ok.all())


@attrs.define
class Cluster:
    representative: Any
    members: list[int] = attrs.field(factory=list)
    has_trusted: bool = False


def wrong_results_message(cluster_index: int, n_clusters: int, winner: Cluster) -> str:
    """XLA's demotion message (config_runner.cc ``DemoteNonWinningClusterConfigs``)."""
    return (
        f"Output disagrees with winning cluster (member of cluster {cluster_index} of {n_clusters}; "
        f"winning cluster has {len(winner.members)} member(s), trusted={'true' if winner.has_trusted else 'false'})."
    )


def profiling_order(trusted: Sequence[bool]) -> list[int]:
    """Trusted candidates first, each group in its original order (``std::stable_partition``)."""
    return [i for i, t in enumerate(trusted) if t] + [i for i, t in enumerate(trusted) if not t]


def profile_all(
    trusted: Sequence[bool],
    run_one: Callable[[int], ProfileResult],
    compare: Callable[[Any, Any], bool],
    check_correctness: bool,
) -> list[ProfileResult]:
    """Profile every candidate and, with ``check_correctness``, cluster their outputs.

    Args:
        trusted: per candidate (original order), whether its backend cannot produce wrong results.
        run_one: ``run_one(i)`` profiles candidate ``i`` and returns its :class:`ProfileResult`
            (with ``failure`` EXECUTION_FAILED / REDZONE_CHECK_FAILED when it failed, else ``output``).
        compare: ``compare(candidate_output, representative_output) -> bool`` (match).
        check_correctness: cluster outputs and demote configs outside the winning cluster.

    Returns:
        One result per candidate, **in the original order** (profiling order is trusted first).
        Mirrors ``ConfigRunner::ProfileAll`` (config_runner.cc:62-167) and
        ``DemoteNonWinningClusterConfigs`` (191-226).
    """
    n = len(trusted)
    results: list[ProfileResult | None] = [None] * n
    clusters: list[Cluster] = []
    for i in profiling_order(trusted):
        r = run_one(i)
        r.trusted = bool(trusted[i])
        results[i] = r
        if r.failed or not check_correctness:
            continue
        r.cluster = -1
        for ci, c in enumerate(clusters):
            if compare(r.output, c.representative):
                c.members.append(i)
                c.has_trusted |= r.trusted
                r.cluster = ci
                break
        else:
            if r.trusted or not any(c.has_trusted for c in clusters):
                clusters.append(Cluster(r.output, [i], r.trusted))
                r.cluster = len(clusters) - 1
    out = [r for r in results if r is not None]
    if check_correctness and clusters:
        demote_non_winning_clusters(out, clusters)
    return out


def winning_cluster(clusters: Sequence[Cluster]) -> int:
    """Largest cluster among those with a trusted member (all clusters when none has); first on ties."""
    pool = [i for i, c in enumerate(clusters) if c.has_trusted] or list(range(len(clusters)))
    best = pool[0]
    for i in pool[1:]:
        if len(clusters[i].members) > len(clusters[best].members):
            best = i
    return best


def demote_non_winning_clusters(results: list[ProfileResult], clusters: Sequence[Cluster]) -> None:
    """Fail every non-failed result outside the winning cluster as WRONG_RESULTS (in place)."""
    w = winning_cluster(clusters)
    winner = clusters[w]
    for r in results:
        if r.failed or r.cluster == w:
            continue
        r.failure = Failure(FailureKind.WRONG_RESULTS, wrong_results_message(r.cluster, len(clusters), winner))
