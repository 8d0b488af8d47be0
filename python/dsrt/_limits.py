"""The integer ranges the C API takes, checked before a value crosses it: out of range, the
native call's conversion fails with a TypeError that names no field."""
from __future__ import annotations

from typing import Iterable

from . import _dsrt

INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)


def within(name: str, values: Iterable[int], bounds: tuple[int, int]) -> None:
    """dsrt.Error (DSRT_INVALID_ARGUMENT) naming `name` for the first value outside
    `bounds`."""
    low, high = bounds
    for value in values:
        if not low <= value <= high:
            raise _dsrt.Error(f"DSRT_INVALID_ARGUMENT: {name} must be within [{low}, {high}], "
                              f"not {value}")
