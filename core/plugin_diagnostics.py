"""Saying why a plugin, or a name it would register, is not there: quarantined (with the reason), disabled,
installed but not loaded, or not installed; and where a plugin's import failed (``FILE:LINE``).

Used wherever a user names something a plugin registers (``[plugins.<name>]``, ``[pipeline] passes``,
``--fusegen-plugin``), so that a quarantined plugin is never reported as "not installed" or "unknown".
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from fusegen.config.names import normalize_name

__all__ = ["why_not_loaded", "import_error_location", "import_failure", "quarantine_note"]


def why_not_loaded(pm: Any, name: str) -> str | None:
    """Why plugin ``name`` (compared normalized) is not among ``pm``'s loaded plugins, as a clause to follow
    "plugin 'x' ...": ``"is quarantined: <reason>"``, ``"is disabled ([plugins] disable)"``, ``"is installed
    but not loaded (...)"``; ``None`` when it is loaded or not installed at all."""
    key = normalize_name(name)
    if any(normalize_name(n) == key for n in pm.infos):
        return None
    for n, info in pm.broken.items():
        if normalize_name(n) == key:
            return f"is quarantined: {info.reason}"
    if key in pm.disabled:
        return "is disabled ([plugins] disable)"
    if key in pm.entry_point_names:
        if os.environ.get("FUSEGEN_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0"):
            why = "FUSEGEN_DISABLE_PLUGIN_AUTOLOAD is set; name it in FUSEGEN_LOAD_PLUGINS or [plugins] enable"
        else:
            why = ("its distribution is not in FUSEGEN_AUTOLOAD_DISTRIBUTIONS; add it there, or name the plugin in "
                   "FUSEGEN_LOAD_PLUGINS or [plugins] enable")
        return f"is installed but not loaded ({why})"
    return None


def import_error_location(exc: BaseException) -> str | None:
    """``FILE:LINE`` where an import failed: a ``SyntaxError``'s own position, else the innermost traceback
    frame outside ``importlib`` (the plugin's line that raised)."""
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, SyntaxError) and e.filename:
            return f"{e.filename}:{e.lineno}"
        e = e.__cause__ or e.__context__
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "importlib" not in f.filename and not f.filename.startswith("<frozen")]
    if frames:
        return f"{frames[-1].filename}:{frames[-1].lineno}"
    return None


def import_failure(exc: BaseException) -> str:
    """The quarantine reason of a plugin whose import raised: ``import failed at FILE:LINE: Error: message``."""
    where = import_error_location(exc)
    msg = str(exc.msg if isinstance(exc, SyntaxError) and exc.msg else exc)
    return f"import failed{f' at {where}' if where else ''}: {type(exc).__name__}: {msg}"


def quarantine_note(pm: Any) -> str:
    """``"; not loaded, so what they register is missing: plugin 'x' (dist) is quarantined: <reason>; ..."`` for a message
    about an unknown name (a pass, a backend); ``""`` when no plugin is quarantined. ``pm``: the plugin manager
    (the process-wide one is the caller's to fetch: this module stands beside the manager, which uses it)."""
    lines = [f"plugin {i.name!r} ({i.distribution}) is quarantined: {i.reason}" for i in
             (getattr(pm, "broken", None) or {}).values()]
    return "; not loaded, so what they register is missing: " + "; ".join(lines) if lines else ""
