"""Test set-up: compiled kernels and Numba's cache go to a folder inside the checkout."""

import os
from pathlib import Path

_root = Path(__file__).resolve().parent.parent
os.environ.setdefault("LAZYVIC_CACHE_DIR", str(_root / ".cache" / "lazyvic"))
os.environ.setdefault("NUMBA_CACHE_DIR", str(_root / ".cache" / "numba"))
