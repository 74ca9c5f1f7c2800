"""Optimizers (PyTorch's update rules). Updates are lazy ops: they fuse into the step's plan.

Hyperparameters (learning rate, betas, bias corrections) enter traces as scalar
inputs, so a learning-rate schedule does not recompile.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from lazyvic import autograd
from lazyvic.errors import CheckpointError
from lazyvic.tensor import Tensor
from lazyvic.trace import scope


class Optimizer:
    def __init__(self, params, defaults: dict):
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.defaults = defaults
        self.param_groups = []
        for g in groups:
            g = dict(g)
            g["params"] = list(g["params"])
            for k, v in defaults.items():
                g.setdefault(k, v)
            self.param_groups.append(g)
        self.state: dict = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                p.grad = None if set_to_none or p.grad is None else p.grad.zeros_like()

    def _state(self, p) -> dict:
        return self.state.setdefault(id(p), {})

    def _params(self) -> list:
        return [p for g in self.param_groups for p in g["params"]]

    def state_dict(self) -> dict:
        """PyTorch's layout: ``{"state": {index: {name: value}}, "param_groups": [...]}``.

        Parameters are numbered in group order; each group lists its indices under
        ``"params"`` and carries its hyperparameters. State tensors are detached
        handles on the current values (a later ``step()`` does not change them);
        ``"step"`` is a Python int (PyTorch keeps a 0-d tensor).
        """
        index = {id(p): i for i, p in enumerate(self._params())}
        groups, n = [], 0
        for g in self.param_groups:
            d = {k: copy.deepcopy(v) for k, v in g.items() if k != "params"}
            d["params"] = list(range(n, n + len(g["params"])))
            n += len(g["params"])
            groups.append(d)
        state = {}
        for pid, st in self.state.items():
            if pid in index and st:
                state[index[pid]] = {k: v.detach() if isinstance(v, Tensor) else v for k, v in st.items()}
        return {"state": dict(sorted(state.items())), "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore hyperparameters and state saved by :meth:`state_dict`.

        Everything is validated first: the number of groups and of parameters per
        group, and the shape of every state tensor against its parameter. Raises
        CheckpointError listing the problems; nothing is changed when it raises.
        Values are copied (cast to the parameter's dtype), so the source can change later.
        """
        if not isinstance(state_dict, dict) or "state" not in state_dict or "param_groups" not in state_dict:
            raise CheckpointError(
                f"{type(self).__name__}.load_state_dict: expected a dict with 'state' and "
                f"'param_groups', got {type(state_dict).__name__}"
            )
        groups, state = state_dict["param_groups"], state_dict["state"]
        problems = []
        if len(groups) != len(self.param_groups):
            problems.append(f"{len(groups)} parameter groups in the state dict, {len(self.param_groups)} here")
        else:
            for k, (saved, own) in enumerate(zip(groups, self.param_groups)):
                if len(saved["params"]) != len(own["params"]):
                    problems.append(
                        f"group {k}: {len(saved['params'])} parameters in the state dict, {len(own['params'])} here"
                    )
        index = {}
        if not problems:
            for saved, own in zip(groups, self.param_groups):
                index.update(zip(saved["params"], own["params"]))
            for i, st in state.items():
                p = index.get(i)
                if p is None:
                    problems.append(f"state for parameter index {i}, which no group lists")
                    continue
                for name, v in st.items():
                    shape = tuple(getattr(v, "shape", ()))
                    if name == "step" and math.prod(shape) != 1:
                        problems.append(f"state {i}.step: expected a number, got shape {shape}")
                    elif name != "step" and hasattr(v, "shape") and shape != p.shape:
                        problems.append(f"state {i}.{name}: shape {shape}, parameter shape {p.shape}")
        if problems:
            raise CheckpointError(
                f"{type(self).__name__}.load_state_dict: nothing was loaded:\n  " + "\n  ".join(problems)
            )
        # Copy everything first, then assign: a failure here leaves the optimizer as it was.
        new_state = {}
        for i, st in state.items():
            p = index[i]
            new_state[id(p)] = {name: self._copy_state(name, v, p) for name, v in st.items()}
        new_groups = []
        for saved, own in zip(groups, self.param_groups):
            g = dict(own)
            for k, v in saved.items():
                if k != "params":
                    g[k] = tuple(v) if isinstance(own.get(k), tuple) else copy.deepcopy(v)
            new_groups.append(g)
        for own, g in zip(self.param_groups, new_groups):
            own.update(g)
        self.state = new_state

    @staticmethod
    def _copy_state(name: str, v, p):
        if isinstance(v, (Tensor, np.ndarray)):
            arr = v.numpy() if isinstance(v, Tensor) else v
            if name == "step":  # PyTorch saves it as a 0-d tensor
                return int(arr.item())
            return Tensor(np.array(arr, dtype=p.dtype.np).reshape(p.shape)).to(p.device)
        return copy.deepcopy(v)

    @staticmethod
    def _zeros(p: Tensor) -> Tensor:
        # Realized zeros keep the step's trace identical from the first step on.
        return Tensor(np.zeros(p.shape, dtype=p.dtype.np)).to(p.device)

    def step(self):
        with autograd.no_grad(), scope.entered(f"optim.{type(self).__name__}"):
            for g in self.param_groups:
                for p in g["params"]:
                    if p.grad is not None:
                        self._update(p, p.grad, g)

    def _update(self, p, grad, group):
        raise NotImplementedError


class SGD(Optimizer):
    """SGD with momentum, dampening, Nesterov and (L2) weight decay, as torch.optim.SGD."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        maximize: bool = False,
    ):
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: invalid lr={lr}, momentum={momentum} or weight_decay={weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum and zero dampening")
        super().__init__(
            params,
            dict(
                lr=lr,
                momentum=momentum,
                dampening=dampening,
                weight_decay=weight_decay,
                nesterov=nesterov,
                maximize=maximize,
            ),
        )

    def _update(self, p, grad, group):
        if group["maximize"]:
            grad = -grad
        if group["weight_decay"]:
            grad = grad + p * group["weight_decay"]
        mom = group["momentum"]
        if mom:
            st = self._state(p)
            buf = st.get("momentum_buffer")
            if buf is None and group["dampening"] == 0:
                # PyTorch starts with buf = grad; 0 * momentum + grad is the same value, and it
                # keeps the first step's trace identical to every later step's (one plan).
                buf = self._zeros(p)
            # A new handle, as PyTorch clones: an in-place change of p.grad must not reach the buffer.
            buf = grad.detach() if buf is None else buf * mom + grad * (1 - group["dampening"])
            st["momentum_buffer"] = buf
            grad = grad + buf * mom if group["nesterov"] else buf
        p._assign(p - grad * group["lr"])


class Adam(Optimizer):
    """Adam (Kingma & Ba 2015) with PyTorch's bias correction; L2 weight decay."""

    decoupled = False

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
    ):
        if amsgrad:
            raise NotImplementedError("Adam: amsgrad is not supported")
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"Adam: invalid lr={lr}, eps={eps} or betas={betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    def _update(self, p, grad, group):
        st = self._state(p)
        if not st:
            st["step"] = 0
            st["exp_avg"] = self._zeros(p)
            st["exp_avg_sq"] = self._zeros(p)
        st["step"] += 1
        t = st["step"]
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        if wd:
            if self.decoupled:
                p._assign(p * (1 - lr * wd))
            else:
                grad = grad + p * wd
        m = st["exp_avg"]._assign(st["exp_avg"] * b1 + grad * (1 - b1))
        v = st["exp_avg_sq"]._assign(st["exp_avg_sq"] * b2 + grad * grad * (1 - b2))
        step_size = lr / (1 - b1**t)
        inv_sqrt_bc2 = 1.0 / math.sqrt(1 - b2**t)
        p._assign(p - m * step_size / (v.sqrt() * inv_sqrt_bc2 + eps))


class AdamW(Adam):
    """AdamW (Loshchilov & Hutter 2019): decoupled weight decay, default 0.01."""

    decoupled = True

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        amsgrad: bool = False,
    ):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)


from lazyvic.optim import lr_scheduler  # noqa: E402

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]
