"""The exception of a capture that cannot be made."""

from __future__ import annotations

#: What to install for a deviceless XLA:GPU compile (pyproject.toml's ``capture`` extra).
INSTALL = "pip install 'fusegen[capture]' (jax and jax's CUDA plugin; no GPU needed)"


class CaptureError(ValueError):
    """A capture that cannot be made (jax or its CUDA plugin missing, too few host devices, shardings or static
    arguments that do not fit the function); the message says what to change. Raised before anything compiles
    wherever the arguments are at fault."""
