"""Save and load a run's initial weights, so two libraries can start from the same numbers.

Random initializations differ between PyTorch and lazyvic (different random streams). Every
script here takes ``--save-init FILE.npz`` (write the modules' freshly initialized state) and
``--init-from FILE.npz`` (overwrite it before training); ``tests/fixtures/
make_pytorch_style_fixtures.py`` saves PyTorch's initial weights and the tests start lazyvic from
them. Written with NumPy and methods both libraries share (``state_dict``, ``new_tensor``,
``load_state_dict``), so it needs neither import.
"""

from __future__ import annotations

import numpy as np


def save_init(path: str, **modules) -> None:
    """Write every ``state_dict()`` entry of each module as ``"<name>/<key>"`` in one ``.npz``."""
    arrays = {}
    for name, module in modules.items():
        for key, value in module.state_dict().items():
            arrays[f"{name}/{key}"] = value.detach().cpu().numpy()
    np.savez_compressed(path, **arrays)


def load_init(path: str, **modules) -> None:
    """Load what :func:`save_init` wrote into the same modules (strict: every key, every shape)."""
    with np.load(path) as arrays:
        for name, module in modules.items():
            state = module.state_dict()
            module.load_state_dict({key: value.new_tensor(arrays[f"{name}/{key}"]) for key, value in state.items()})
