"""Moving arrays between logical index order and an HLO layout's physical order.

fusegen keeps values as numpy arrays in *logical* index order; a buffer handed to a kernel is the 1-D
array of the same elements in *physical* order (``minor_to_major``, XLA ``xla/layout_util.h``).
Tiled layouts (``T(8,128)``) are treated as their untiled minor-to-major order.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from fusegen.hlo.ir import Shape


def major_to_minor(shape: Shape) -> tuple[int, ...]:
    """Dimension numbers from most major to most minor."""
    return tuple(reversed(shape.minor_to_major()))


def to_physical(value: np.ndarray, shape: Shape) -> np.ndarray:
    """A fresh contiguous 1-D copy of ``value`` (logical ``shape.dimensions``) in physical order."""
    arr = np.asarray(value).reshape(shape.dimensions)
    return np.ascontiguousarray(np.transpose(arr, major_to_minor(shape))).reshape(-1)


def from_physical(flat: np.ndarray, shape: Shape) -> np.ndarray:
    """The logical array (``shape.dimensions``) whose physical order is ``flat``."""
    m2m = major_to_minor(shape)
    phys_dims = tuple(shape.dimensions[d] for d in m2m)
    arr = np.asarray(flat).reshape(phys_dims)
    inv = np.argsort(m2m)
    # ascontiguousarray turns a 0-d array into shape (1,): reshape back to the logical dims
    return np.ascontiguousarray(np.transpose(arr, inv)).reshape(shape.dimensions)


def dim_strides(dims: Sequence[int], minor_to_major: Sequence[int]) -> tuple[int, ...]:
    """Element stride of each logical dimension of an array ``dims`` laid out ``minor_to_major`` (XLA's
    layout order: the first listed dimension is contiguous)."""
    strides = [0] * len(dims)
    s = 1
    for d in minor_to_major:
        strides[d] = s
        s *= dims[d]
    return tuple(strides)


def physical_strides(shape: Shape) -> tuple[int, ...]:
    """Element stride of each logical dimension in the physical buffer."""
    return dim_strides(shape.dimensions, shape.minor_to_major())


def bitcast(value: np.ndarray, from_shape: Shape, to_shape: Shape) -> np.ndarray:
    """XLA ``bitcast``: reinterpret the physical buffer of ``from_shape`` as ``to_shape``.

    Same element type: moves elements by physical position. Different widths are handled by
    ``view`` on the physical bytes (``bitcast-convert``-like reinterpretation).
    """
    from fusegen.hlo.dtypes import numpy_dtype

    flat = to_physical(value, from_shape)
    if from_shape.element_type != to_shape.element_type:
        flat = flat.view(numpy_dtype(to_shape.element_type))
    return from_physical(flat, to_shape)
