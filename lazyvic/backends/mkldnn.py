"""``lazyvic.backends.mkldnn``: oneDNN, which lazyvic does not use (``enabled`` is accepted, without effect)."""

enabled = True


def is_available() -> bool:
    """False: lazyvic's CPU kernels are its own Numba code and BLAS, not oneDNN."""
    return False
