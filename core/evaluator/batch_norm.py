"""``batch-norm-inference`` and ``batch-norm-training`` (XLA operation semantics; ``feature_index``,
``epsilon``). Statistics are computed in f32 (f64 for f64) over every dimension but the feature dimension;
training returns ``(output, batch_mean, batch_var)`` with the biased variance, as XLA's ``BatchNormExpander``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fusegen.evaluator.common import as_array, attr_int, shape_dtype, up
from fusegen.hlo.ir import Instruction


def _feature_view(v: np.ndarray, rank: int, f: int) -> np.ndarray:
    shp = [1] * rank
    shp[f] = v.size
    return v.reshape(shp)


def _eps(inst: Instruction) -> float:
    v = inst.attrs.get("epsilon", 1e-3)
    return float(str(v).strip())


def _inference(inst: Instruction, ops: list) -> np.ndarray:
    x, scale, offset, mean, var = (up(np.asarray(o)) for o in ops)
    f = attr_int(inst, "feature_index", x.ndim - 1)
    fv = lambda v: _feature_view(v, x.ndim, f)  # noqa: E731
    y = (x - fv(mean)) * fv(scale) / np.sqrt(fv(var) + _eps(inst)) + fv(offset)
    return as_array(y, shape_dtype(inst.shape))


def _training(inst: Instruction, ops: list) -> tuple:
    x, scale, offset = (up(np.asarray(o)) for o in ops)
    f = attr_int(inst, "feature_index", x.ndim - 1)
    axes = tuple(d for d in range(x.ndim) if d != f)
    mean = x.mean(axis=axes)
    var = ((x - _feature_view(mean, x.ndim, f)) ** 2).mean(axis=axes)
    fv = lambda v: _feature_view(v, x.ndim, f)  # noqa: E731
    y = (x - fv(mean)) * fv(scale) / np.sqrt(fv(var) + _eps(inst)) + fv(offset)
    shapes = inst.shape.tuple_shapes
    return (as_array(y, shape_dtype(shapes[0])), as_array(mean, shape_dtype(shapes[1])),
            as_array(var, shape_dtype(shapes[2])))


HANDLERS: dict[str, Callable] = {"batch-norm-inference": _inference, "batch-norm-training": _training}
