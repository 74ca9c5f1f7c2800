"""``lazyvic.backends.cudnn``: PyTorch's cuDNN switches, accepted and without effect (lazyvic does
not use cuDNN; see :mod:`lazyvic.backends`). Defaults are PyTorch's."""

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """False: lazyvic does not use cuDNN."""
    return False


def version() -> None:
    """None: no cuDNN is loaded."""
    return None
