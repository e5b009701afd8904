"""fusegen: turns every fusion of an XLA:GPU-optimized HLO module into a kernel, through plugins.

The library API (:mod:`fusegen.api`): ``fusegen.load(path_or_text)``, ``fusegen.explain(module, ...)``,
``fusegen.run(module, inputs=..., ...)`` and ``fusegen.tune(module, ...)`` return typed results whose
``to_json()`` is what the matching command's ``--json`` prints. They are imported on first use, so
``import fusegen`` stays cheap.
"""

__version__ = "0.1.0"

_API = ("load", "load_all", "explain", "run", "tune", "UnsupportedInstructionError")


def __getattr__(name: str):
    if name in _API or name == "api":
        import importlib

        api = importlib.import_module("fusegen.api")  # not `from fusegen import api`: that asks here again
        return api if name == "api" else getattr(api, name)
    raise AttributeError(f"module 'fusegen' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
