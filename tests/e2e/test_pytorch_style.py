"""The PyTorch-idiom scripts of examples/pytorch_style run unchanged under ``import lazyvic as
torch`` and agree with PyTorch.

The fixtures come from tests/fixtures/make_pytorch_style_fixtures.py (see its docstring), which
runs each script's PyTorch twin (the same file with its import block swapped back to torch) under
PyTorch 2.13 and stores its initial weights and results; here the lazyvic script starts from
those weights (``--init-from``) with the same arguments. Tolerances:

- deterministic runs (dropout off, data in order: the CNN, the word language models, the minGPT
  trainer, nanoGPT's model on fixed batches): every loss within ``rtol=1e-4`` of PyTorch's
  (float32 sums in another order, compounded over the steps: the differences seen are about
  1e-6), accuracies, learning rates and greedily generated text equal;
- runs that draw random numbers in the loop, whose streams differ between the libraries (the
  VAE's ``randn_like``, the DCGAN's noise, nanoGPT's ``torch.randint`` batches): the values that
  come before the first draw exactly (the VAE's first KL term, the discriminator's first
  D(x)), the rest within bounds on the effect of different noise, stated at each check.
"""

import importlib.util
import io
import json
import re
import tokenize
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "pytorch_style"
FIXTURES = ROOT / "tests" / "fixtures" / "pytorch_style"
SCRIPTS = ("mnist_cnn", "vae", "word_language_model", "dcgan", "nanogpt", "nanogpt_model", "mingpt_chars", "ddp_digits")


def _maker():
    path = ROOT / "tests" / "fixtures" / "make_pytorch_style_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_pytorch_style_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKER = _maker()


@pytest.fixture(autouse=True)
def _session_state():
    """The scripts set process-wide state as their PyTorch originals do (nanoGPT turns TF32 on);
    put it back, and leave the session's counters as other tests expect them (the scripts' random
    ops and sorts run on the interpreter and count as fallbacks)."""
    import lazyvic

    flags = lazyvic.backends.cuda.matmul.allow_tf32, lazyvic.backends.cudnn.allow_tf32
    yield
    lazyvic.backends.cuda.matmul.allow_tf32, lazyvic.backends.cudnn.allow_tf32 = flags
    lazyvic.metrics.reset()


def _names(source: str) -> list[tokenize.TokenInfo]:
    return [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.NAME]


@pytest.mark.parametrize("script", SCRIPTS)
def test_only_the_import_block_names_lazyvic(script):
    """The promise: the file is its PyTorch twin with the import block changed, and nothing else.
    Every ``lazyvic`` in the code is on an import line; each import line's ``# was:`` comment is
    the torch line it replaced (``...`` may abbreviate its end); the twin names no lazyvic."""
    source = (EXAMPLES / f"{script}.py").read_text()
    lines = source.splitlines()
    block = [i for i, line in enumerate(lines) if MAKER.IMPORT_LINE.match(line)]
    assert block and block == list(range(block[0], block[-1] + 1)), "one contiguous import block"
    assert any(lines[i].startswith("import lazyvic as torch") for i in block)
    for tok in _names(source):
        if tok.string == "lazyvic":
            assert tok.start[0] - 1 in block, f"{script}.py:{tok.start[0]} names lazyvic outside the import block"
    for i in block:
        code, _, comment = lines[i].partition("#")
        was = re.fullmatch(r"\s*was: (.*)", comment)
        assert was, f"{script}.py:{i + 1}: the import line says what it was ('# was: import torch ...')"
        twin_line, was = MAKER.torch_twin(code).rstrip(), was.group(1).strip()
        assert twin_line == was or (was.endswith("...") and twin_line.startswith(was[:-3])), (twin_line, was)
    twin = MAKER.torch_twin(source)
    changed = [a for a, b in zip(lines, twin.splitlines()) if a != b]
    assert len(twin.splitlines()) == len(lines) and len(changed) == len(block)
    assert all(tok.string != "lazyvic" for tok in _names(twin))
    compile(twin, f"{script}_torch.py", "exec")


@pytest.mark.parametrize("helper", ["aligned_init", "offline_data"])
def test_shared_helpers_import_neither_library(helper):
    names = {t.string for t in _names((EXAMPLES / f"{helper}.py").read_text())}
    assert not names & {"torch", "lazyvic"}


def _fixture(case: str):
    data = np.load(FIXTURES / f"{case}.npz")  # the gpt_steps case is nanogpt's
    script = MAKER.CASES[case][0] if case in MAKER.CASES else "nanogpt"
    assert str(data["source_sha256"]) == MAKER.source_sha256(script), (
        f"{script}.py changed since the fixture {case}.npz was made: "
        "rerun tests/fixtures/make_pytorch_style_fixtures.py with PyTorch"
    )
    return data


def _run(case: str, tmp_path, *extra):
    """The lazyvic script's main() with the fixture's arguments, from PyTorch's initial weights;
    returns (its results, PyTorch's)."""
    script, argv = MAKER.CASES[case]
    expected = json.loads(str(_fixture(case)["results"]))
    args = argv.split() + ["--init-from", str(FIXTURES / f"{case}.init.npz"), *extra]
    if script in MAKER.WRITES:
        args += [MAKER.WRITES[script][0], str(tmp_path / MAKER.WRITES[script][1])]
    return MAKER.load_example(script).main(args), expected


def _close(got, want, rtol=1e-4, atol=0.0):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol)


def test_mnist_cnn_matches_pytorch(tmp_path, capsys):
    """Conv2d, max_pool2d, log_softmax + nll_loss, Adadelta and StepLR over two epochs of three
    batches (the last one shorter), the test set evaluated after each epoch."""
    got, want = _run("mnist_cnn", tmp_path)
    assert len(got["train_loss"]) == len(want["train_loss"]) == 6
    _close(got["train_loss"], want["train_loss"])
    _close(got["test_loss"], want["test_loss"])
    # within one of the 360 test images: after two epochs some are near ties (top two
    # log-probabilities 1.6e-4 apart), which the last bits of the products decide
    assert np.abs(np.subtract(got["test_accuracy"], want["test_accuracy"])).max() <= 1 / 360 + 1e-12
    assert got["lr"] == want["lr"] == [1.0, 0.7]
    assert "Test set: Average loss" in capsys.readouterr().out


def test_mnist_cnn_trains_with_dropout_and_shuffling():
    """The script's own random parts (functional dropout, a shuffling DataLoader): it learns."""
    got = MAKER.load_example("mnist_cnn").main(["--epochs", "1", "--steps", "12", "--batch-size", "128"])
    assert len(got["train_loss"]) == 12
    assert np.mean(got["train_loss"][-3:]) < got["train_loss"][0] - 0.5


def test_vae_matches_pytorch(tmp_path):
    """Each step draws its own noise (``randn_like``), so only the first step's KL term (computed
    before the first draw) is exact; the BCE + KL losses per pixel-sum stay within 1% of PyTorch's
    and the test losses (evaluated on mu, no noise) within 0.5% after six Adam steps."""
    got, want = _run("vae", tmp_path)
    _close(got["kld"][0], want["kld"][0], rtol=1e-5)
    _close(got["train_loss"], want["train_loss"], rtol=1e-2)
    _close(got["test_loss"], want["test_loss"], rtol=5e-3)
    assert got["test_loss"][1] < got["test_loss"][0]
    samples = got["samples"]
    assert samples.shape == (64, 8, 8) and samples.min() >= 0 and samples.max() <= 1


def test_word_language_model_matches_pytorch(tmp_path):
    """LSTM with truncated BPTT over a moving slice (the last batch shorter), detached hidden
    states, clip_grad_norm_, hand-written SGD through ``p.data.add_``, the learning rate divided by
    4 after the worse second epoch, the best state saved and reloaded for the test loss. Every
    slice offset is its own plan in lazyvic today (dynamic shapes are being added), hence the
    small corpus."""
    got, want = _run("word_language_model", tmp_path)
    assert len(got["train_loss"]) == len(want["train_loss"])
    _close(got["train_loss"], want["train_loss"])
    _close(got["val_loss"], want["val_loss"])
    assert got["lr"] == want["lr"] == [20.0, 20.0, 5.0]
    _close(got["test_loss"], want["test_loss"])


def test_word_language_model_gru_tied_matches_pytorch(tmp_path):
    got, want = _run("word_language_model_gru_tied", tmp_path)
    _close(got["train_loss"], want["train_loss"])
    _close(got["val_loss"] + [got["test_loss"]], want["val_loss"] + [want["test_loss"]])


def test_dcgan_matches_pytorch(tmp_path):
    """The first D(x) comes before any noise is drawn: exact. Later values depend on the
    generator's noise (a batch of 32 N(0, 1) draws per step): D(x) within 0.002, the losses
    within 0.02 and D(G(z)) within 0.01 of PyTorch's over six steps from the same weights."""
    got, want = _run("dcgan", tmp_path)
    _close(got["D_x"][0], want["D_x"][0], rtol=1e-5)
    _close(got["D_x"], want["D_x"], rtol=0, atol=2e-3)
    _close(got["loss_D"], want["loss_D"], rtol=0, atol=2e-2)
    _close(got["loss_G"], want["loss_G"], rtol=0, atol=2e-2)
    _close(got["D_G_z1"], want["D_G_z1"], rtol=0, atol=1e-2)
    fake = got["fake"]
    assert fake.shape == (32, 1, 16, 16) and np.abs(fake).max() <= 1


def test_nanogpt_learns_as_pytorch(tmp_path):
    """The whole script: its batches come from ``torch.randint``, so the runs see different
    windows; from the same weights, the estimated losses (4 batches of 8 windows per split)
    stay within 0.15 of PyTorch's, and both fall. The sample has the asked length."""
    got, want = _run("nanogpt", tmp_path)
    assert [e[0] for e in got["eval"]] == [e[0] for e in want["eval"]] == [0, 15, 30]
    _close([e[1:] for e in got["eval"]], [e[1:] for e in want["eval"]], rtol=0, atol=0.15)
    assert got["eval"][-1][1] < got["eval"][0][1] - 0.4
    assert len(got["sample"]) == len(want["sample"]) == 21


def test_nanogpt_saves_and_resumes(tmp_path):
    """The best checkpoint (model, AdamW state with its two groups, model_args, iter_num,
    best_val_loss) is written with torch.save and ``--resume`` continues from its step."""
    import lazyvic

    args = "--max-chars 20000 --n-embd 16 --block-size 16 --batch-size 8 --eval-iters 4 --max-new-tokens 4".split()
    args += ["--out-dir", str(tmp_path), "--warmup-iters", "2", "--lr-decay-iters", "12"]
    first = MAKER.load_example("nanogpt").main(args + ["--max-iters", "8", "--eval-interval", "4"])
    saved = lazyvic.load(str(tmp_path / "ckpt.pt"))
    assert saved["iter_num"] in (4, 8) and saved["best_val_loss"] == min(e[2] for e in first["eval"][1:])
    assert len(saved["optimizer"]["param_groups"]) == 2 and saved["model_args"]["n_embd"] == 16
    resumed = MAKER.load_example("nanogpt").main(args + ["--max-iters", "12", "--eval-interval", "4", "--resume"])
    assert [e[0] for e in resumed["eval"]] == list(range(saved["iter_num"], 13, 4))
    assert len(resumed["train_loss"]) == 12 - saved["iter_num"]
    assert abs(resumed["eval"][0][2] - saved["best_val_loss"]) < 0.3  # other random windows


@pytest.mark.parametrize("flash", [True, False], ids=["sdpa", "masked"])
def test_nanogpt_model_matches_pytorch(flash):
    """nanoGPT's classes on fixed batches: GPT forward and loss, weight tying, AdamW with its
    decay/no-decay groups and a changing lr, clipping; then ``generate`` greedily past the block
    size (context cropped, top-k 1) gives PyTorch's tokens."""
    data = _fixture("nanogpt_steps")
    tag = "flash" if flash else "masked"
    init = {k[len(tag) + 6 :]: data[k] for k in data.files if k.startswith(f"{tag}.init.")}
    _, losses, tokens = MAKER.gpt_steps(MAKER.load_example("nanogpt"), flash, init)
    _close(losses, data[f"{tag}.losses"])
    assert tokens == data[f"{tag}.tokens"].tolist()


def test_mingpt_chars_matches_pytorch(tmp_path):
    """A Dataset slicing a token tensor by an int, a DataLoader, the Trainer's callbacks and
    ``nn.TransformerEncoder`` with the causal mask; greedy samples equal PyTorch's."""
    got, want = _run("mingpt_chars", tmp_path)
    _close(got["train_loss"], want["train_loss"])
    assert got["samples"] == want["samples"] and len(got["samples"]) == 2
