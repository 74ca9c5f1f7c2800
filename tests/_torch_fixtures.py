"""Reading the .npz fixtures that make_torch_fixtures.py writes (shared by the nn and optim tests)."""

import json
from pathlib import Path

import numpy as np

from lazyvic import nn

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PARAM_NAMES = ("0.weight", "0.bias", "2.weight", "2.bias")


def arrays(name: str) -> dict:
    """Every array in ``name`` (a file in tests/fixtures)."""
    with np.load(FIXTURES / name) as data:
        return {k: data[k] for k in data.files}


def spec(name: str) -> list:
    """The list of cases the fixture script ran, stored as JSON in the file."""
    with np.load(FIXTURES / name) as data:
        return json.loads(str(data["spec"]))


def mlp(ref: dict) -> nn.Sequential:
    """The 5-7-3 MLP of the fixtures, with the initial weights the torch run started from."""
    model = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    model.load_state_dict({k: ref[f"init.{k}"] for k in PARAM_NAMES})
    return model
