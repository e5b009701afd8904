"""``to_dataframe()`` of the results: one row per fusion (run, explain) or per tuned instruction (tune).

pandas is optional: without it :func:`dataframe` raises an :class:`ImportError` that says how to get it.
"""

from __future__ import annotations

from typing import Any, Iterable


def dataframe(rows: Iterable[dict], drop: tuple[str, ...] = ()) -> Any:
    """A ``pandas.DataFrame`` of JSON rows, nested objects flattened one level (``launch_dimensions.grid``,
    ``timings.kernel``); keys in ``drop`` (long texts such as kernel sources) left out.

    Raises:
        ImportError: pandas is not installed (``pip install pandas``).
    """
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("to_dataframe() needs pandas: pip install pandas (to_json() gives the same rows "
                          "as dicts)") from None
    rows = [{k: v for k, v in r.items() if k not in drop} for r in rows]
    return pd.json_normalize(rows, max_level=1) if rows else pd.DataFrame()
