"""The error of a pass or a pipeline (re-exported by :mod:`fusegen.passes.pipeline`): its own module so that
the checks the pipeline runs after each pass raise it without importing the pipeline."""

from __future__ import annotations

__all__ = ["PassError"]


class PassError(Exception):
    """A pass failed, or a pipeline names an unknown pass. The message names the pass (and plugin)."""
