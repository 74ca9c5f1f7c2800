"""Deterministic ResNet weights drawn from a NumPy seed in state_dict order.

Shared by tests/fixtures/make_vision_fixtures.py (which feeds them to torch) and
tests/nn/test_vision.py (which feeds the same draws to lazyvic), so the fixture
need not store the weights.
"""

import numpy as np


def resnet_state(keys_and_shapes, seed: int) -> dict:
    """key -> float32 array (int64 0 for num_batches_tracked): BN scales and running
    variances U(0.5, 1.5), biases and running means N(0, 0.1), conv/linear weights
    N(0, 2 / fan_in)."""
    rng = np.random.default_rng(seed)
    state = {}
    for key, shape in keys_and_shapes:
        if key.endswith("num_batches_tracked"):
            state[key] = np.array(0, dtype=np.int64)
        elif key.endswith("running_var"):
            state[key] = rng.uniform(0.5, 1.5, size=shape).astype(np.float32)
        elif key.endswith("running_mean") or key.endswith("bias"):
            state[key] = (rng.normal(size=shape) * 0.1).astype(np.float32)
        elif ".bn" in key or key.startswith("bn") or "downsample.1" in key:
            state[key] = rng.uniform(0.5, 1.5, size=shape).astype(np.float32)
        else:
            state[key] = (rng.normal(size=shape) * np.sqrt(2.0 / int(np.prod(shape[1:])))).astype(np.float32)
    return state
