"""How plugin, matcher, emitter and backend names compare wherever a user writes one (config files, flags,
environment): one rule, used by the config loader and the plugin registry alike."""

from __future__ import annotations

import re

__all__ = ["normalize_name"]


def normalize_name(name: str) -> str:
    """A plugin, matcher, emitter or backend name as names are compared everywhere (``--fusegen-plugin``,
    ``[plugins] enable/disable``, ``[plugins.<name>]``, ``FUSEGEN_LOAD_PLUGINS``): the rule pip applies to
    distribution names (PEP 503), runs of ``-``, ``_`` and ``.`` are one ``-`` and letters are lower case,
    so ``input_slices``, ``input-slices`` and ``Input.Slices`` are one name."""
    return re.sub(r"[-_.]+", "-", name).lower()
