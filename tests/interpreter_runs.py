"""Hand-written Triton kernels run three ways for the interpreter tests: through Triton's own
``InterpretedFunction``, through fusegen's executor one program at a time, and in batches
(fusegen.codegen.interpreter_batch); :func:`_both` asserts the three agree bit for bit."""

from __future__ import annotations

import contextlib

import numpy as np

from fusegen.codegen import triton_runtime
from fusegen.codegen.interpreter_batch import batching
from fusegen.codegen.kernel import EmittedFusion, KernelParam, KernelSource, LaunchDimensions
from fusegen.hlo.ir import Shape

_HEADER = "import triton\nimport triton.language as tl\n\n@triton.jit\n"


def _shape(dt: str, n: int) -> Shape:
    return Shape(dt, (n,))


def _run(src: str, grid: int, ins: list[np.ndarray], outs: list[tuple[str, int]], mode: str,
         constexprs: dict | None = None) -> tuple[list[np.ndarray], int]:
    """Run kernel ``k`` of ``src`` over ``grid`` programs on operands ``ins`` (outputs start as zeros): ``mode``
    ``"triton"`` through Triton's own ``InterpretedFunction`` (its grid loop and semantic layer, fusegen's
    builder), ``"one"`` fusegen's executor one program at a time, ``"batched"`` in batches. Returns the outputs
    and how many programs ran in batches."""
    types = {np.dtype(np.float32): "f32", np.dtype(np.int32): "s32", np.dtype(np.uint8): "u8",
             np.dtype(np.float16): "f16", np.dtype(np.int64): "s64", np.dtype(np.uint32): "u32",
             np.dtype(np.float64): "f64"}
    op_shapes = [_shape(types[a.dtype], a.size) for a in ins]
    out_shapes = [_shape(dt, n) for dt, n in outs]
    params = tuple(KernelParam("operand", i, s) for i, s in enumerate(op_shapes)) + tuple(
        KernelParam("output", i, s) for i, s in enumerate(out_shapes))
    ks = KernelSource(name="k", source=_HEADER + src, entry="k", params=params, constexprs=dict(constexprs or {}),
                      launch=LaunchDimensions((grid,)))
    out_shape = out_shapes[0] if len(out_shapes) == 1 else Shape("tuple", (), tuple_shapes=tuple(out_shapes))
    with batching(mode == "batched"), _counting(triton=mode == "triton") as seen:
        got = triton_runtime.run_fusion(EmittedFusion("t", kernels=(ks,)), ins, (op_shapes, out_shape),
                                        interpret_max_programs=None)
    return got, sum(seen)


@contextlib.contextmanager
def _counting(triton: bool = False):
    """The programs each grid of the block ran in batches (interpreter_batch.run_grid's answer), in a list;
    ``triton``: grids run by Triton's ``InterpretedFunction`` instead (0 batched)."""
    from triton.runtime.interpreter import InterpretedFunction

    seen: list[int] = []
    real = triton_runtime.run_grid

    def counting(fn, grid, args, kwargs, batch=None):
        if triton:
            InterpretedFunction(fn)[grid](*args, **kwargs)
            seen.append(0)
        else:
            seen.append(real(fn, grid, args, kwargs, batch))
        return seen[-1]

    triton_runtime.run_grid = counting
    try:
        yield seen
    finally:
        triton_runtime.run_grid = real


def _bits(x) -> np.ndarray:
    return np.asarray(x).reshape(-1).view(np.uint8)


def _both(src: str, grid: int, ins: list[np.ndarray], outs: list[tuple[str, int]], **kw) -> tuple[list, int]:
    """Outputs of the batched run, asserted bit-identical to fusegen's one-by-one run and to Triton's own, and its
    batched program count."""
    ref, _ = _run(src, grid, ins, outs, "triton", **kw)
    one, none = _run(src, grid, ins, outs, "one", **kw)
    got, batched = _run(src, grid, ins, outs, "batched", **kw)
    assert none == 0
    for r, a, b in zip(ref, one, got):
        np.testing.assert_array_equal(_bits(r), _bits(a))
        np.testing.assert_array_equal(_bits(r), _bits(b))
    return got, batched
