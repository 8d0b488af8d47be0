"""One program of a plan, run with numpy arrays."""
from __future__ import annotations

from typing import Mapping, Union

import numpy as np

from . import _dsrt

# The plan format's element types (dsrt_dtype) as numpy's; bf16 comes back widened to f32.
_NUMPY = {1: np.float32, 2: np.float16, 3: np.uint16, 4: np.float64, 5: np.int64, 6: np.int32,
          7: np.int16, 8: np.int8, 9: np.uint8, 10: np.bool_, 11: np.uint16, 12: np.uint32,
          13: np.uint64}
_BF16 = 3


class Session:
    """Runs a plan's programs (``forward``, ``prefill``, ``decode``, ...) on one device.

    A tensor-parallel plan runs all its ranks on threads of this process; outputs are rank
    0's. ``device`` is ``"cpu"``, ``"cuda"`` or ``"cpu-reference"``.
    """

    def __init__(self, plan: Union[str, "_dsrt.Plan"], device: str = "cpu"):
        self._plan = _dsrt.Plan(plan) if isinstance(plan, str) else plan
        self._native = _dsrt.Session(self._plan, device)

    def input_names(self, program: str) -> list[str]:
        return [name for name, _, _ in self._plan.io(program, False)]

    def output_names(self, program: str) -> list[str]:
        return [name for name, _, _ in self._plan.io(program, True)]

    def run(self, program: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs ``program`` on ``inputs`` (every input, by name) and returns its outputs by
        name, as numpy arrays the caller owns. The GIL is released while it runs."""
        names = self.input_names(program)
        missing = [name for name in names if name not in inputs]
        unknown = [name for name in inputs if name not in names]
        if missing or unknown:
            raise _dsrt.Error(
                f"DSRT_INVALID_ARGUMENT: {program} takes {names}; missing {missing}, "
                f"unknown {unknown}")
        for index, name in enumerate(names):
            self._native.set_input(program, index, np.ascontiguousarray(inputs[name]))
        self._native.run(program)
        outputs = {}
        for index, name in enumerate(self.output_names(program)):
            data, dtype, shape = self._native.output(program, index)
            array = np.frombuffer(data, dtype=_NUMPY[dtype]).reshape(shape)
            if dtype == _BF16:
                array = (array.astype(np.uint32) << 16).view(np.float32)
            outputs[name] = array.copy()
        return outputs
