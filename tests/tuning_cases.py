"""XLA's autotuner cases (``../shared/corpus/xla/cases/config_runner__*.json``) as the report tests replay them:
the candidates' outputs that reproduce a case's compare results."""

from __future__ import annotations


def _outputs_for(case: dict) -> dict[str, list[float]]:
    """Outputs that reproduce the case's compare results: ``match(x vs y)`` pairs share an output."""
    short = {"a": "trusted_a", "b": "trusted_b", "ub": "untrusted_matches_b", "un": "untrusted_matches_none"}
    out = {c["n"]: [float(i)] for i, c in enumerate(case["cands"])}
    for r in case["compare_results"]:
        if r.startswith("match("):
            x, y = r[len("match("):-1].split(" vs ")
            out[short[x]] = out[short[y]]
    return out
