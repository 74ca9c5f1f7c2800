"""``lazyvic.nn.functional``: the same functions as :mod:`lazyvic.functional` (PyTorch's spelling)."""

from lazyvic.functional import *  # noqa: F401,F403
from lazyvic.functional import __all__  # noqa: F401
