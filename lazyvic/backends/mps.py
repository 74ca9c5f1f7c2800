"""``lazyvic.backends.mps``: Apple's Metal backend, which lazyvic does not have."""


def is_available() -> bool:
    """False: lazyvic has no Metal (MPS) backend."""
    return False


def is_built() -> bool:
    """False: lazyvic has no Metal (MPS) backend."""
    return False
