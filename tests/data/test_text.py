"""Character-level text data: the stdlib corpus, CharTokenizer, train_val_split and get_batch."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lazyvic
from lazyvic.data import STDLIB_MODULES, CharTokenizer, get_batch, stdlib_docstrings, train_val_split
from lazyvic.errors import DTypeError, ShapeError

_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus() -> str:
    return stdlib_docstrings()


@pytest.fixture(scope="module")
def tok(corpus) -> CharTokenizer:
    return CharTokenizer(corpus)


@pytest.fixture(scope="module")
def ids(corpus, tok) -> np.ndarray:
    return tok.encode(corpus)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("ascii")).hexdigest()


# -- corpus ------------------------------------------------------------------


def test_corpus_is_deterministic_in_process(corpus):
    assert stdlib_docstrings() == corpus


def test_corpus_is_deterministic_across_processes(corpus):
    # Another hash seed, and a process that has imported nothing else, give the same text.
    code = "import hashlib; from lazyvic.data import stdlib_docstrings; print(hashlib.sha256(stdlib_docstrings().encode('ascii')).hexdigest())"
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(_ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == _sha256(corpus)


def test_corpus_size_and_vocabulary(corpus):
    assert len(corpus) > 200_000
    vocab = set(corpus)
    assert len(vocab) < 100
    assert vocab <= {chr(c) for c in range(32, 127)} | {"\n"}
    for word in (" the ", " and ", " of ", " is ", " return"):
        assert word in corpus


def test_default_modules_are_sorted_and_unique():
    assert list(STDLIB_MODULES) == sorted(set(STDLIB_MODULES))
    assert 40 <= len(STDLIB_MODULES) <= 80


def test_corpus_max_chars_and_module_choice(corpus):
    assert stdlib_docstrings(max_chars=1000) == corpus[:1000]
    assert stdlib_docstrings(max_chars=0) == ""
    abc_only = stdlib_docstrings(["abc"])
    assert corpus.startswith(abc_only)
    assert "Abstract Base Classes" in abc_only
    # Docstrings are joined by a blank line and a repeated docstring appears once.
    assert stdlib_docstrings(["abc", "abc"]) == abc_only
    assert "\t" not in corpus and not corpus.startswith((" ", "\n"))


def test_corpus_bad_arguments():
    with pytest.raises(ValueError, match="max_chars"):
        stdlib_docstrings(max_chars=-1)
    with pytest.raises(TypeError, match="sequence of module names"):
        stdlib_docstrings("json")
    with pytest.raises(ModuleNotFoundError):
        stdlib_docstrings(["no_such_module_lazyvic"])


# -- tokenizer ---------------------------------------------------------------


def test_tokenizer_vocabulary(corpus, tok):
    assert tok.chars == "".join(sorted(set(corpus)))
    assert tok.vocab_size == len(tok.chars) < 100


def test_tokenizer_round_trip(corpus, tok, ids):
    assert ids.dtype == np.int64 and ids.shape == (len(corpus),)
    assert ids.min() >= 0 and ids.max() < tok.vocab_size
    assert tok.decode(ids) == corpus
    sample = corpus[:500]
    assert tok.decode(tok.encode(sample).tolist()) == sample
    assert tok.decode(lazyvic.tensor(tok.encode(sample))) == sample
    assert tok.encode("").shape == (0,) and tok.decode([]) == ""


def test_tokenizer_ids_follow_sorted_chars():
    tok = CharTokenizer("hello")
    assert tok.chars == "ehlo"
    np.testing.assert_array_equal(tok.encode("hello"), np.array([1, 0, 2, 2, 3], dtype=np.int64))


def test_tokenizer_unknown_character_names_it_and_its_position():
    tok = CharTokenizer("abc")
    with pytest.raises(ValueError, match=r"'z' \(U\+007A\) at position 2"):
        tok.encode("abzcz")


def test_tokenizer_decode_errors():
    tok = CharTokenizer("abc")
    with pytest.raises(ValueError, match=r"id 3 at position 1"):
        tok.decode([0, 3])
    with pytest.raises(ValueError, match="id -1"):
        tok.decode(np.array([-1]))
    with pytest.raises(ShapeError):
        tok.decode([[0, 1]])
    with pytest.raises(DTypeError):
        tok.decode([0.0, 1.0])
    with pytest.raises(ValueError, match="empty"):
        CharTokenizer("")


def test_tokenizer_config_round_trip(tok, corpus):
    config = json.loads(json.dumps(tok.to_config()))
    assert config == {"chars": tok.chars}
    again = CharTokenizer.from_config(config)
    assert again.chars == tok.chars and again.vocab_size == tok.vocab_size
    np.testing.assert_array_equal(again.encode(corpus[:200]), tok.encode(corpus[:200]))
    # The saved order is kept as is, even if it is not sorted.
    assert CharTokenizer.from_config({"chars": "cab"}).encode("abc").tolist() == [1, 2, 0]


@pytest.mark.parametrize("config", [{}, {"chars": ""}, {"chars": 3}, {"chars": "aba"}, "abc"])
def test_tokenizer_bad_config(config):
    with pytest.raises(ValueError):
        CharTokenizer.from_config(config)


# -- split -------------------------------------------------------------------


def test_train_val_split_sizes(ids):
    train, val = train_val_split(ids, 0.1)
    assert len(val) == int(len(ids) * 0.1) and len(train) + len(val) == len(ids)
    np.testing.assert_array_equal(np.concatenate([train, val]), ids)
    assert train.dtype == val.dtype == np.int64
    train, val = train_val_split(np.arange(10), 0.0)
    assert len(train) == 10 and len(val) == 0


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_train_val_split_bad_fraction(fraction):
    with pytest.raises(ValueError, match="val_fraction"):
        train_val_split(np.arange(10), fraction)


def test_train_val_split_needs_1d():
    with pytest.raises(ShapeError):
        train_val_split(np.zeros((2, 3), dtype=np.int64))


# -- batches -----------------------------------------------------------------


def test_get_batch_windows(ids):
    data = ids[:5000]
    x, y = get_batch(data, batch_size=4, block_size=16, rng=np.random.default_rng(0))
    assert isinstance(x, lazyvic.Tensor) and isinstance(y, lazyvic.Tensor)
    assert x.shape == y.shape == (4, 16)
    assert x.dtype == y.dtype == lazyvic.int64
    offsets = np.random.default_rng(0).integers(0, len(data) - 16, size=4)
    expected_x = np.stack([data[o : o + 16] for o in offsets])
    expected_y = np.stack([data[o + 1 : o + 17] for o in offsets])
    np.testing.assert_array_equal(x.numpy(), expected_x)
    np.testing.assert_array_equal(y.numpy(), expected_y)
    np.testing.assert_array_equal(x.numpy()[:, 1:], y.numpy()[:, :-1])


def test_get_batch_is_reproducible_and_reaches_the_end():
    data = np.arange(9, dtype=np.int32)
    a = get_batch(data, 64, 8, np.random.default_rng(7))
    b = get_batch(data, 64, 8, np.random.default_rng(7))
    np.testing.assert_array_equal(a[0].numpy(), b[0].numpy())
    # block_size + 1 ids allow exactly one window, and the last id is used as a target.
    np.testing.assert_array_equal(a[0].numpy(), np.tile(np.arange(8), (64, 1)))
    np.testing.assert_array_equal(a[1].numpy(), np.tile(np.arange(1, 9), (64, 1)))
    assert a[0].dtype == lazyvic.int64


def test_get_batch_bad_inputs():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="at least block_size"):
        get_batch(np.arange(8), 2, 8, rng)
    with pytest.raises(ValueError, match="batch_size and block_size"):
        get_batch(np.arange(100), 0, 8, rng)
    with pytest.raises(ValueError, match="batch_size and block_size"):
        get_batch(np.arange(100), 2, 0, rng)
    with pytest.raises(ShapeError):
        get_batch(np.zeros((10, 10), dtype=np.int64), 2, 4, rng)
    with pytest.raises(DTypeError):
        get_batch(np.zeros(100), 2, 4, rng)
