"""Typed exceptions raised by lazyvic.

Every error names the op (or file) that caused it and what was expected, so a
user never has to read a Numba traceback to find a bad shape.
"""


class LazyvicError(Exception):
    """Base class of every lazyvic error."""


class ShapeError(LazyvicError, ValueError):
    """Shapes do not fit the op (names the op and every shape involved)."""


class DTypeError(LazyvicError, TypeError):
    """A dtype is not supported, or not accepted by the op."""


class IndexError_(LazyvicError, IndexError):
    """An index or axis is out of range (exported as ``lazyvic.errors.IndexError``)."""


class ArgumentError(LazyvicError, ValueError, RuntimeError):
    """An argument outside what the op accepts: a stride, a step or a size of 0, an unknown mode
    (names the op, the argument and its value). A ``ValueError`` and, as PyTorch raises for most
    of these (``non-positive stride is not supported``), a ``RuntimeError``."""


class UnsupportedOpError(LazyvicError, NotImplementedError):
    """An op (or an ONNX node) has no implementation in lazyvic."""


class LinAlgError(LazyvicError, RuntimeError):
    """A linear-algebra routine could not factor its input: a singular matrix for ``inv`` or
    ``solve``, one that is not positive definite for ``cholesky``, an iteration that did not
    converge (names the op, the shape and the batch element). Raised at the sync that computes
    it; a ``RuntimeError``, as PyTorch's ``torch.linalg.LinAlgError``."""


class AutogradError(LazyvicError, RuntimeError):
    """Autograd was asked for something it cannot do (e.g. backward() on a non-scalar)."""


class CheckpointError(LazyvicError, ValueError):
    """A checkpoint or state_dict does not match what was expected."""


class DeviceError(LazyvicError, RuntimeError):
    """A device is unknown or unavailable, or one op got tensors on different devices."""


class OnnxError(LazyvicError, ValueError):
    """An ONNX file or model is invalid, or cannot be converted (names the file, the node and the problem)."""


class DistributedError(LazyvicError, RuntimeError):
    """A collective or process group failed: not initialized, a rank that did not answer within
    the timeout, ranks that disagree (names the collective, the rank and what was expected).
    A ``RuntimeError``, as PyTorch's ``DistBackendError``."""


# PyTorch users catch IndexError; keep a public name that reads naturally.
IndexError = IndexError_  # noqa: A001

__all__ = [
    "LazyvicError",
    "ShapeError",
    "DTypeError",
    "IndexError",
    "ArgumentError",
    "UnsupportedOpError",
    "LinAlgError",
    "AutogradError",
    "CheckpointError",
    "OnnxError",
    "DeviceError",
    "DistributedError",
]


class CheckError(LazyvicError, AssertionError):
    """``LAZYVIC_CHECK=1``: a compiled plan's bits differ from the interpreter's (names the first
    kernel that differs, its source and the first differing element; ``runtime/check.py``)."""
