"""Front-end gaps the PyTorch-idiom examples found, each with its fix's test (the autograd one,
a gradient shared by two ``.grad`` attributes, is tested in tests/autograd/test_grad_accumulation.py)."""

import numpy as np
import pytest

import lazyvic as torch
from lazyvic.errors import DeviceError
from lazyvic.utils.data import DataLoader, TensorDataset


def test_pin_memory_is_the_tensor_itself_on_the_cpu():
    """nanoGPT's get_batch: ``x.pin_memory().to(device, non_blocking=True)``. lazyvic's host buffers
    are plain memory and device copies synchronous: nothing to pin, the same tensor back."""
    x = torch.arange(6).reshape(2, 3)
    assert x.pin_memory() is x
    y = x.pin_memory().to("cpu", non_blocking=True)
    np.testing.assert_array_equal(y.numpy(), np.arange(6).reshape(2, 3))
    (batch,) = next(iter(DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2, pin_memory=True)))
    assert batch.pin_memory().shape == (2, 2)


def test_pin_memory_refuses_a_tensor_off_the_cpu(monkeypatch):
    """PyTorch refuses to pin a tensor already on a device; the check reads the tensor's device."""
    x = torch.ones(2)
    monkeypatch.setattr(type(x), "device", property(lambda self: "cuda"))
    with pytest.raises(
        DeviceError, match=r"pin_memory: only CPU tensors can be pinned, got a tensor of shape \(2,\) on 'cuda'"
    ):
        x.pin_memory()
