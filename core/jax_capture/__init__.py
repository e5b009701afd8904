"""A user's JAX function as XLA compiles it for a GPU (or a mesh of them), ready for fusegen to run.

``fusegen.capture(fn, *args, ...)`` (:func:`~fusegen.jax_capture.compile.capture`) returns a :class:`Captured`
that ``fusegen.run`` / ``explain`` / ``tune`` / ``report`` take, with the function's argument and output pytrees;
``fusegen capture SCRIPT.py:FUNC`` is the command. The package is not called ``fusegen.capture``: that name is
the function.
"""

from fusegen.jax_capture.captured import CaptureFiles, Captured
from fusegen.jax_capture.compile import capture
from fusegen.jax_capture.errors import INSTALL, CaptureError
from fusegen.jax_capture.specs import parse_arg_spec, parse_spec, seeded, target_config_text

__all__ = ["INSTALL", "CaptureError", "CaptureFiles", "Captured", "capture", "parse_arg_spec", "parse_spec", "seeded",
           "target_config_text"]
