"""Array types of the planner, for annotations: numpy arrays by dtype (shapes and units are in
each function's docstring)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Int64Array = npt.NDArray[np.int64]
"""An int64 array (tokens, rows, requests, indices)."""
Int32Array = npt.NDArray[np.int32]
"""An int32 array (compact DP tables)."""
FloatArray = npt.NDArray[np.float64]
"""A float64 array (milliseconds, seconds, fractions)."""
BoolArray = npt.NDArray[np.bool_]
"""A bool array (masks)."""


def sorted_unique(values: npt.ArrayLike) -> np.ndarray:
    """[U] the distinct values of `values` (flattened), ascending, in their dtype: what
    `np.unique(values)` returns, without its masked-array check (numpy 2.x imports `numpy.ma`,
    about 10 ms, on the first plain `np.unique`; the plan path needs none of it)."""
    out = np.sort(np.asarray(values).ravel())
    if out.size > 1:
        out = out[np.concatenate(([True], out[1:] != out[:-1]))]
    return out
