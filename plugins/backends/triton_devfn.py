"""``device_jit``: a ``@triton.jit`` for device (helper) functions that generated kernels call.

Compiled kernels inline a ``JITFunction`` callee as usual. Triton's interpreter, driven on one kernel through
``InterpretedFunction`` (fusegen never sets ``TRITON_INTERPRET``, see :mod:`fusegen.codegen.triton_runtime`),
rejects a plain ``JITFunction`` called from inside it ("Cannot call @triton.jit'd outside of the scope of a
kernel"); this subclass runs such a call as an interpreted device function instead, so one generated module
serves both the interpreter and the sm_90 compiler.
"""

from __future__ import annotations

from typing import Any

from triton.runtime.jit import JITFunction


class DeviceFunction(JITFunction):
    """A ``JITFunction`` whose Python-level call (only ever made by the interpreter) is interpreted."""

    _interpreted: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # The enclosing kernel's GridExecutor has already patched triton.language for this module's globals;
        # only the AST rewrite (cached) is needed here.
        fn = self._interpreted
        if fn is None:
            from triton.runtime.interpreter import InterpretedFunction

            fn = self._interpreted = InterpretedFunction(self.fn).rewrite()
        return fn(*args, **kwargs)


def device_jit(fn: Any) -> DeviceFunction:
    """Decorator: ``@device_jit`` instead of ``@triton.jit`` on helper functions of a generated kernel."""
    return DeviceFunction(fn)
