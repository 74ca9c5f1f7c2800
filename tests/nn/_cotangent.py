"""The cotangent of the layer fixtures (tests/fixtures/make_layer_fixtures.py, make_sequence_fixtures.py).

Gradients there are those of ``sum(output * cotangent(output.shape))``: a fixed pattern in
[0.5, 1.5) (the fractional parts of multiples of the plastic number's inverse), so every output
element counts with a different weight, and the tests rebuild it instead of reading it from the
fixture file."""

import numpy as np


def cotangent(shape) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    return (0.5 + (np.arange(n) * 0.7548776662466927) % 1.0).astype(np.float32).reshape(shape)
