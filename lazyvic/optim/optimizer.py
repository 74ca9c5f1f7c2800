"""Optimizer: the base class of the update rules (``torch.optim.Optimizer``).

Updates are lazy ops recorded under no_grad in the scope ``optim.<Name>``, so forward, backward
and update fuse into one plan at the next sync. Everything that changes from step to step (the
learning rate, bias corrections, the step count) enters the trace as a scalar input of the plan,
never as an attribute of its key: a schedule does not recompile. State tensors start as realized
zeros, so the first step's trace is every later step's.

An update rule is three methods: ``_init_state`` (the state of a parameter's first step),
``_hyper`` (the step's Python bookkeeping, ``step += 1``, and the per-step values it returns as
floats) and ``_update`` (the tensor ops, reading those values as scalar inputs). ``step`` makes the
scalar inputs itself, so a captured step (``lazyvic.compile``) calls ``_hyper`` again at each
replay and feeds its values to the plan without recording the update again.
"""

from __future__ import annotations

import copy
import functools
import math
from collections import defaultdict

import numpy as np

from lazyvic import modes, recording
from lazyvic.errors import CheckpointError, UnsupportedOpError
from lazyvic.tensor import Tensor, _scalar_operand
from lazyvic.trace import scope

# Keyword arguments PyTorch's optimizers take for their implementation choices. lazyvic keeps
# them in the param groups (PyTorch's state_dict layout) and ignores them: every update is fused.
IMPLEMENTATION_FLAGS = ("foreach", "fused", "capturable", "differentiable")


class Optimizer:
    """Base class: ``param_groups`` (each a dict with ``"params"`` and its hyperparameters),
    ``state`` (a ``defaultdict(dict)`` keyed by the parameter tensors, as PyTorch's, so a custom
    optimizer written against ``torch.optim.Optimizer`` can use ``self.state[p]``), ``step``,
    ``zero_grad``, ``add_param_group``, ``state_dict`` / ``load_state_dict``.

    ``params`` is an iterable of tensors, of ``(name, tensor)`` pairs (the names are kept as
    the group's ``"param_names"``) or of dicts (param groups, each with its own
    hyperparameters; missing ones come from ``defaults``).

    Raises:
        TypeError: ``params`` is a single tensor, or holds something else than tensors.
        ValueError: an empty parameter list, or a parameter in two groups.
        UnsupportedOpError: ``differentiable=True`` (a differentiable update).
    """

    # State entries that are Python numbers rather than tensors of the parameter's shape.
    scalar_state: tuple = ("step",)

    def __init__(self, params, defaults: dict):
        if isinstance(params, Tensor):
            raise TypeError(
                f"{type(self).__name__}: params should be an iterable of Tensors or dicts, "
                f"got a Tensor of shape {params.shape}"
            )
        if defaults.get("differentiable"):
            raise UnsupportedOpError(f"{type(self).__name__}: differentiable=True (a differentiable update)")
        self.defaults = defaults
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list = []
        groups = list(params)
        if not groups:
            raise ValueError(f"{type(self).__name__} got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines.extend(f"    {k}: {v}" for k, v in sorted(g.items()) if k not in ("params", "param_names"))
        return "\n".join(lines) + "\n)"

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters with its own hyperparameters (``torch.optim.Optimizer
        .add_param_group``), e.g. to unfreeze layers while training.

        Raises:
            TypeError: a bad group; ValueError: a parameter already in another group.
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"{type(self).__name__}: a param group must be a dict, got {type(param_group).__name__}")
        g = dict(param_group)
        params = g["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        if params and isinstance(params[0], tuple):
            g["param_names"] = [name for name, _ in params]
            params = [p for _, p in params]
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"{type(self).__name__} can only optimize Tensors, got {type(p).__name__}")
        g["params"] = params
        for k, v in self.defaults.items():
            g.setdefault(k, v)
        if g.get("differentiable"):
            raise UnsupportedOpError(f"{type(self).__name__}: differentiable=True (a differentiable update)")
        seen = {id(p) for group in self.param_groups for p in group["params"]}
        if len({id(p) for p in params}) != len(params) or any(id(p) in seen for p in params):
            raise ValueError(f"{type(self).__name__}: some parameters appear in more than one parameter group")
        self.param_groups.append(g)
        self._init_group_state(g)

    def _init_group_state(self, group: dict) -> None:
        """State made when a group is added (Adagrad's accumulators); none by default."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's gradient: to None (the default), or to zeros."""
        rec = recording.note_optimizer(self) if recording.active else None
        if rec is not None:  # a captured step: these gradients are the step's own, not inputs
            rec.cleared.update(id(p) for p in self._params())
        for g in self.param_groups:
            for p in g["params"]:
                p.grad = None if set_to_none or p.grad is None else p.grad.zeros_like()

    def _state(self, p) -> dict:
        return self.state[p]

    def _params(self) -> list:
        return [p for g in self.param_groups for p in g["params"]]

    @staticmethod
    def _zeros(p: Tensor, value: float = 0.0) -> Tensor:
        # Realized values keep the step's trace identical from the first step on.
        return Tensor(np.full(p.shape, value, dtype=p.dtype.np)).to(p.device)

    @staticmethod
    def _weight_decay(p: Tensor, grad: Tensor, group: dict, decay: Tensor) -> Tensor:
        """The group's weight decay applied: L2 (``grad + wd * p``, returned) or, where the group
        has ``decoupled_weight_decay`` (AdamW, Loshchilov and Hutter 2019), decoupled (``p``
        scaled by ``decay = 1 - lr * wd`` in place; ``grad`` returned as it is)."""
        wd = group["weight_decay"]
        if wd:
            if group.get("decoupled_weight_decay"):
                p._assign(p * decay)
            else:
                grad = grad + p * wd
        return grad

    @staticmethod
    def _adam_moments(st: dict, grad: Tensor, b1: float, b2: float) -> tuple:
        """Adam's moving averages (Kingma and Ba 2015) updated in ``st`` and returned:
        ``m = b1 m + (1 - b1) g`` (``exp_avg``), ``v = b2 v + (1 - b2) g^2`` (``exp_avg_sq``)."""
        m = st["exp_avg"]._assign(st["exp_avg"] * b1 + grad * (1 - b1))
        v = st["exp_avg_sq"]._assign(st["exp_avg_sq"] * b2 + grad * grad * (1 - b2))
        return m, v

    def step(self, closure=None):
        """One update of every parameter that has a gradient. ``closure`` (optional) re-evaluates
        the model and returns the loss; it runs with grad enabled before the update, and its
        loss is returned."""
        loss = None
        if closure is not None:
            with modes.enable_grad():
                loss = closure()
        rec = recording.note_optimizer(self) if recording.active else None
        with modes.no_grad(), scope.entered(f"optim.{type(self).__name__}"):
            for g in self.param_groups:
                for p in g["params"]:
                    if p.grad is not None:
                        grad = -p.grad if g.get("maximize") else p.grad
                        st = self._state(p)
                        if not st:
                            self._init_state(p, g, st)
                        h = tuple(_scalar_operand(v, p.dtype) for v in self._values(g, st))
                        if rec is not None:  # a captured step: each replay calls _values again
                            rec.dynamic(tuple(t._node for t in h), functools.partial(self._values, g, st))
                        self._update(p, grad, g, st, h)
        return loss

    def _values(self, group: dict, st: dict) -> tuple:
        """The per-step values of one parameter's update: the decoupled weight decay's factor
        ``1 - lr * wd``, then :meth:`_hyper`'s."""
        return (1 - group["lr"] * group.get("weight_decay", 0.0), *self._hyper(group, st))

    def _init_state(self, p: Tensor, group: dict, st: dict) -> None:
        """Fill ``st``, the empty state of ``p`` at its first step (nothing by default)."""

    def _hyper(self, group: dict, st: dict) -> tuple:
        """One step's Python bookkeeping (``st["step"] += 1``) and its per-step values (floats:
        the learning rate, bias corrections), in the order :meth:`_update` reads them."""
        return (group["lr"],)

    def _update(self, p: Tensor, grad: Tensor, group: dict, st: dict, h: tuple) -> None:
        """The update of ``p`` by ``grad``: tensor ops. ``h``: the values of :meth:`_values`, as
        0-d scalar inputs of ``p``'s dtype (use them as right-hand operands: ``p * h[1]``)."""
        raise NotImplementedError

    # ------------------------------------------------------------ state_dict
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
        for p, st in self.state.items():
            if id(p) in index and st:
                state[index[id(p)]] = {k: v.detach() if isinstance(v, Tensor) else v for k, v in st.items()}
        return {"state": dict(sorted(state.items())), "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore hyperparameters and state saved by :meth:`state_dict` (or by PyTorch).

        Everything is validated first: the number of groups and of parameters per
        group, and the shape of every state tensor against its parameter. Raises
        CheckpointError listing the problems; nothing is changed when it raises.
        Values are copied (cast to the parameter's dtype), so the source can change later.
        """
        name = type(self).__name__
        if not isinstance(state_dict, dict) or "state" not in state_dict or "param_groups" not in state_dict:
            raise CheckpointError(
                f"{name}.load_state_dict: expected a dict with 'state' and 'param_groups', "
                f"got {type(state_dict).__name__}"
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
                for key, v in st.items():
                    shape = tuple(getattr(v, "shape", ()))
                    if key in self.scalar_state and math.prod(shape) != 1:
                        problems.append(f"state {i}.{key}: expected a number, got shape {shape}")
                    elif key not in self.scalar_state and hasattr(v, "shape") and shape != p.shape:
                        problems.append(f"state {i}.{key}: shape {shape}, parameter shape {p.shape}")
        if problems:
            raise CheckpointError(f"{name}.load_state_dict: nothing was loaded:\n  " + "\n  ".join(problems))
        # Copy everything first, then assign: a failure here leaves the optimizer as it was.
        new_state = defaultdict(dict)
        for i, st in state.items():
            p = index[i]
            new_state[p] = {key: self._copy_state(key, v, p) for key, v in st.items()}
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

    def _copy_state(self, key: str, v, p):
        if key in self.scalar_state:  # PyTorch saves these as 0-d tensors
            value = np.asarray(v.numpy() if isinstance(v, Tensor) else v).item()
            return int(value) if key == "step" else float(value)
        if isinstance(v, (Tensor, np.ndarray)):
            arr = v.numpy() if isinstance(v, Tensor) else v
            return Tensor(np.array(arr, dtype=p.dtype.np).reshape(p.shape)).to(p.device)
        return copy.deepcopy(v)


def check_hyperparameters(name: str, **values) -> None:
    """Raise ValueError naming the optimizer and the first invalid hyperparameter (PyTorch's
    checks: rates and epsilons >= 0, betas and decays in [0, 1))."""
    for key, v in values.items():
        if key == "betas":
            if not (0.0 <= v[0] < 1.0 and 0.0 <= v[1] < 1.0):
                raise ValueError(f"{name}: invalid beta parameters: {tuple(v)} (each must be in [0, 1))")
        elif key in ("rho", "alpha"):
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name}: invalid {key} value: {v} (must be in [0, 1])")
        elif v < 0.0:
            raise ValueError(f"{name}: invalid {key} value: {v} (must be >= 0)")


__all__ = ["Optimizer"]
