"""``lazyvic.Size``: PyTorch's ``torch.Size``, a tuple of ints with ``numel()``.

``Tensor.shape`` and ``Tensor.size()`` return plain tuples; a Size compares equal to the tuple of
the same ints, so ``x.shape == lazyvic.Size([2, 3])`` holds. Below every other layer (imports
nothing of lazyvic).
"""

from __future__ import annotations

import math
import numbers


class Size(tuple):
    """A tuple of ints: ``Size([2, 3])``,
    ``Size((2, 3))``, ``Size()``. Slicing and ``+`` give a Size; ``numel()`` is the product.

    Raises TypeError for an element that is not an int (a 0-d integer tensor is one)."""

    def __new__(cls, sizes=()):
        items = []
        for i, s in enumerate(sizes):
            if isinstance(s, bool) or not (isinstance(s, numbers.Integral) or hasattr(s, "__index__")):
                raise TypeError(f"Size: takes an iterable of int (item {i} is {type(s).__name__})")
            items.append(s.__index__())
        return super().__new__(cls, items)

    def numel(self) -> int:
        """The number of elements of a tensor of this shape (1 for ``Size([])``)."""
        return math.prod(self)

    def __getitem__(self, index):
        out = super().__getitem__(index)
        return Size(out) if isinstance(index, slice) else out

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple(self) + tuple(other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple(other) + tuple(self))

    def __repr__(self) -> str:
        return f"lazyvic.Size([{', '.join(str(s) for s in self)}])"

    def __reduce__(self):
        return (Size, (tuple(self),))
