"""Custom differentiable functions: ``torch.autograd.Function``.

A subclass declares ``forward(ctx, *args)`` and ``backward(ctx, *grad_outputs)`` as static
methods (or PyTorch 2's ``forward(*args)`` plus ``setup_context(ctx, inputs, output)``).
``MyFn.apply(*args)`` runs ``forward`` without recording history (its ops are ordinary lazy
ops) and gives the outputs one backward node. The walk calls ``backward`` once, with the
gradients of all outputs, and the ops ``backward`` records are lazy like any VJP's: they fuse
into the training step's plan.

Differences from PyTorch: ``ctx.mark_dirty`` (in-place forwards) raises UnsupportedOpError;
``once_differentiable`` records the backward without history, so a second-order walk through
it sees no dependence instead of raising.
"""

from __future__ import annotations

import functools
import weakref

from lazyvic.autograd.engine import OutputOf
from lazyvic.errors import AutogradError, ShapeError, UnsupportedOpError
from lazyvic.modes import is_grad_enabled, no_grad


class FunctionCtx:
    """The ``ctx`` handed to ``forward``/``setup_context`` and ``backward``: save tensors with
    :meth:`save_for_backward`, read them back as :attr:`saved_tensors`; ``needs_input_grad`` has
    one bool per argument of ``apply``. Any other attribute may be set freely (``ctx.k = 3``)."""

    def __init__(self) -> None:
        self.needs_input_grad: tuple = ()
        self.materialize_grads = True
        self._saved = None  # tuple of (tensor, the node it held when saved) or None entries
        self._freed = False
        self._non_differentiable: set = set()
        self._name = "Function"

    def save_for_backward(self, *tensors) -> None:
        """Keep ``tensors`` (or None) for ``backward``. Their values as of now are what
        ``backward`` sees, even when a tensor is updated in place later.

        Raises:
            TypeError: an argument is neither a tensor nor None.
        """
        for k, t in enumerate(tensors):
            if t is not None and not hasattr(t, "_node"):
                raise TypeError(
                    f"{self._name}.save_for_backward: argument {k} is a {type(t).__name__}, expected a tensor or None"
                )
        self._saved = tuple(None if t is None else (t, t._node) for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        """The tensors given to :meth:`save_for_backward`. During a ``create_graph=True`` walk
        they are the tensors themselves (with history), otherwise detached handles.

        Raises:
            AutogradError: the saved tensors were freed by an earlier walk (no retain_graph).
        """
        if self._freed:
            raise AutogradError(
                f"{self._name}: trying to backward through the graph a second time (the saved tensors "
                f"were freed by the first backward); use backward(retain_graph=True)"
            )
        if self._saved is None:
            return ()
        keep = is_grad_enabled()  # the walk turns grad mode on only for create_graph=True
        out = []
        for entry in self._saved:
            if entry is None:
                out.append(None)
                continue
            t, node = entry
            out.append(t if keep and t._node is node else t._wrap(node))
        return tuple(out)

    def mark_non_differentiable(self, *outputs) -> None:
        """Outputs of ``forward`` that get no gradient (``requires_grad=False``); ``backward``
        still receives a (zero) gradient for them."""
        self._non_differentiable.update(id(o) for o in outputs)

    def mark_dirty(self, *tensors) -> None:
        """Not supported: a lazy forward rebinds a tensor instead of writing into it.

        Raises:
            UnsupportedOpError: always.
        """
        raise UnsupportedOpError(
            f"{self._name}: ctx.mark_dirty (a forward that modifies its inputs in place) is not supported; "
            f"return a new tensor instead"
        )

    def set_materialize_grads(self, value: bool) -> None:
        """Whether ``backward`` gets zeros (True, the default) or None for an output without a
        gradient."""
        self.materialize_grads = bool(value)


class _FunctionBackward:
    """The op of a Function's backward node: calls ``cls.backward`` with the outputs' gradients
    and checks what it returns against the arguments of ``apply``."""

    differentiable = True

    def __init__(self, cls, ctx: FunctionCtx, n_args: int, tensor_args: list, outputs: list) -> None:
        self.name = f"{cls.__name__}Backward"
        self.cls, self.ctx, self.n_args = cls, ctx, n_args
        self.tensor_args = tensor_args  # (argument index, shape, dtype) of each tensor argument
        self.outputs = outputs  # (shape, dtype) of each output, None for a non-tensor output

    def vjp(self, grads: list, saved, out, attrs) -> list:
        ref = next(g for g in grads if g is not None)
        if self.ctx.materialize_grads:
            grads = [g if g is not None or meta is None else _zeros(ref, *meta) for g, meta in zip(grads, self.outputs)]
        result = self.cls.backward(self.ctx, *grads)
        result = result if isinstance(result, tuple) else (result,)
        if len(result) < self.n_args or any(r is not None for r in result[self.n_args :]):
            raise AutogradError(
                f"{self.name}: {self.cls.__name__}.backward returned an incorrect number of gradients "
                f"(expected {self.n_args}, one per argument of apply; got {len(result)})"
            )
        positions = {k for k, _, _ in self.tensor_args}
        for k, r in enumerate(result[: self.n_args]):
            if r is not None and k not in positions:
                raise AutogradError(
                    f"{self.name}: backward returned a gradient for argument {k}, which is not a tensor (expected None)"
                )
        cotangents = []
        for k, shape, dtype in self.tensor_args:
            g = result[k]
            if g is not None:
                if not hasattr(g, "_node"):
                    raise TypeError(f"{self.name}: gradient {k} is a {type(g).__name__}, expected a tensor or None")
                if g.shape != shape:
                    g = _sum_to(self.name, k, g, shape)
                if g.dtype != dtype:
                    g = g.to(dtype)
            cotangents.append(g)
        return cotangents

    def release(self) -> None:
        """Free the saved tensors after a walk without retain_graph."""
        self.ctx._saved = None
        self.ctx._freed = True


def _zeros(ref, shape: tuple, dtype):
    z = ref.new_zeros(*shape)
    return z if z.dtype == dtype else z.to(dtype)


def _sum_to(name: str, k: int, g, shape: tuple):
    """``g`` summed over the axes along which ``shape`` broadcasts to it (PyTorch accepts such a
    gradient and sums it back to the argument's shape)."""
    lead = g.ndim - len(shape)
    ok = lead >= 0 and all(s == gs or s == 1 for s, gs in zip(shape, g.shape[lead:]))
    if not ok:
        raise ShapeError(f"{name}: backward returned a gradient of shape {g.shape} for argument {k} of shape {shape}")
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
    if axes:
        g = g.sum(dim=axes, keepdim=True)
    return g.reshape(*shape) if g.shape != shape else g


class BackwardNode:
    """The backward node a Function's outputs share (see ``engine.OutputOf``)."""

    __slots__ = ("requires_grad", "_ctx", "_users", "n_outputs", "__weakref__")

    def __init__(self, op: _FunctionBackward, inputs: tuple, n_outputs: int) -> None:
        self.requires_grad = True
        self._ctx = (op, inputs, None, None, None)
        self._users = None
        self.n_outputs = n_outputs


class Function:
    """Base class of custom differentiable operations (``torch.autograd.Function``).

    Subclass it with static methods ``forward(ctx, *args)`` and ``backward(ctx, *grad_outputs)``
    (``backward`` returns one gradient, or None, per argument of ``forward`` after ``ctx``), and
    call ``MyFn.apply(*args)``; never call ``forward`` directly. ``forward`` may instead take
    only ``*args`` when the class defines ``setup_context(ctx, inputs, output)``.

    Shapes and dtypes: ``backward`` must return, per tensor argument, a gradient of its shape
    (one that broadcasts to it is summed back, as PyTorch does) and is cast to its dtype.

    Raises (at ``apply`` or in the backward walk):
        AutogradError: ``backward`` returned the wrong number of gradients, or a gradient for a
            non-tensor argument; a second walk through freed saved tensors.
        ShapeError: a gradient whose shape does not fit its argument.
        UnsupportedOpError: ``ctx.mark_dirty``.
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("Function.forward must be overridden in the subclass")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not overridden")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("Function.backward must be overridden in the subclass")

    def __init__(self, *args, **kwargs) -> None:
        raise RuntimeError(f"{type(self).__name__}: call {type(self).__name__}.apply(...), not the class")

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = FunctionCtx()
        ctx._name = f"{cls.__name__}"
        ctx.needs_input_grad = tuple(hasattr(a, "_node") and a.requires_grad for a in args)
        separate_setup = cls.setup_context is not Function.setup_context
        with no_grad():
            if separate_setup:
                output = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, output)
            else:
                output = cls.forward(ctx, *args, **kwargs)
        if not (is_grad_enabled() and any(ctx.needs_input_grad)):
            return output
        is_tuple = isinstance(output, tuple)
        outputs = output if is_tuple else (output,)
        tensor_args = [(k, a) for k, a in enumerate(args) if hasattr(a, "_node")]
        meta = [(o.shape, o.dtype) if hasattr(o, "_node") else None for o in outputs]
        op = _FunctionBackward(cls, ctx, len(args), [(k, a.shape, a.dtype) for k, a in tensor_args], meta)
        inputs = tuple(a for _, a in tensor_args)
        node = BackwardNode(op, inputs, len(outputs))
        for a in inputs:
            if a._ctx is not None:  # a non-leaf input: an in-place update of it re-points the node
                if a._users is None:
                    a._users = []
                a._users.append(weakref.ref(node))
        results = []
        for k, o in enumerate(outputs):
            if not hasattr(o, "_node"):
                results.append(o)
                continue
            h = o.detach()  # a new handle: never an input, nor a tensor the caller holds
            if id(o) not in ctx._non_differentiable and h.dtype.is_floating_point:
                h.requires_grad = True
                h._ctx = (OutputOf(op.name, k), (node,), None, None, h._node)
            if ctx._saved is not None:  # a saved output is this handle (with history) from now on
                ctx._saved = tuple((h, e[1]) if e is not None and e[0] is o else e for e in ctx._saved)
            results.append(h)
        return tuple(results) if is_tuple else results[0]


def once_differentiable(backward):
    """Decorator for ``backward``: run it without recording history (PyTorch's
    ``torch.autograd.function.once_differentiable``), for a backward that is not itself
    differentiable."""

    @functools.wraps(backward)
    def wrapper(ctx, *grad_outputs):
        with no_grad():
            return backward(ctx, *grad_outputs)

    return wrapper


__all__ = ["Function", "FunctionCtx", "once_differentiable"]
