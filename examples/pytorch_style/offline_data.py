"""Offline stand-ins for the data the public PyTorch examples download.

Nothing here imports torch or lazyvic: the scripts beside this file run unchanged under either
library, so their data come as NumPy arrays and plain strings.

- ``digits``: the 1,797 real 8x8 handwritten digits bundled with scikit-learn (UCI ML
  hand-written digits; no download), standing in for MNIST. Pixels scaled to [0, 1], optionally
  upsampled by repeating pixels, split into a fixed train and test part.
- ``docstring_text``: English prose for the language models, the docstrings of a fixed list of
  Python standard-library modules (present on every installation; the text depends only on the
  Python version), as ``lazyvic.data.text.stdlib_docstrings`` builds the main example's corpus.
"""

from __future__ import annotations

import importlib
import inspect
import warnings

import numpy as np

# Modules that import quietly (no window, no network). Changing the list changes the text.
TEXT_MODULES = (
    "argparse",
    "collections",
    "csv",
    "dataclasses",
    "datetime",
    "difflib",
    "fractions",
    "functools",
    "heapq",
    "inspect",
    "json",
    "logging",
    "pathlib",
    "pickle",
    "random",
    "re",
    "shutil",
    "statistics",
    "string",
    "textwrap",
    "threading",
    "typing",
    "unittest",
    "zipfile",
)


def digits(size: int = 8, n_test: int = 360):
    """The scikit-learn digits as (train_x, train_y, test_x, test_y).

    Images are float32 arrays of shape (N, 1, size, size) with values in [0, 1] (``size`` a
    multiple of 8: each pixel repeated ``size // 8`` times per axis); labels int64 of shape (N,).
    The last ``n_test`` images (in the bundled order) are the test set.
    """
    from sklearn.datasets import load_digits

    if size % 8:
        raise ValueError(f"digits: size must be a multiple of 8, got {size}")
    bunch = load_digits()
    images = (bunch.images / 16.0).astype(np.float32)
    scale = size // 8
    images = images.repeat(scale, axis=1).repeat(scale, axis=2)[:, None]
    labels = bunch.target.astype(np.int64)
    return images[:-n_test], labels[:-n_test], images[-n_test:], labels[-n_test:]


def docstring_text(max_chars: int | None = None) -> str:
    """Docstrings of ``TEXT_MODULES``: each module's, then those of its public classes and functions
    (sorted by name), normalized to printable ASCII plus newlines, repeats dropped, joined by blank
    lines; cut to ``max_chars`` characters when given (CPython 3.11: about 180,000 characters)."""
    parts, seen = [], set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in TEXT_MODULES:
            module = importlib.import_module(name)
            objects = [module] + [
                value
                for key, value in sorted(vars(module).items())
                if not key.startswith("_")
                and getattr(value, "__module__", None) == name
                and (inspect.isclass(value) or inspect.isroutine(value))
            ]
            for obj in objects:
                doc = inspect.getdoc(obj) or ""
                doc = "".join(c for c in doc.replace("\t", "    ") if " " <= c <= "~" or c == "\n").strip()
                if doc and doc not in seen:
                    seen.add(doc)
                    parts.append(doc)
    text = "\n\n".join(parts)
    return text if max_chars is None else text[:max_chars]
