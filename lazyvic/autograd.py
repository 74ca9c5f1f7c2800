"""Reverse-mode autograd over the lazy graph.

Every differentiable op records a context ``(opdef, input tensors, input
nodes, attrs, output node)`` on its output. ``backward`` walks these contexts in
reverse topological order and calls each op's VJP from the op table; the VJPs
are themselves lazy ops, so backward computes nothing: the next sync runs the
forward, the backward and the optimizer update as one plan.

VJPs see the *values* their op saw (the saved nodes), so an in-place update of
an input after the forward (an optimizer step) does not change the gradient.
"""

from __future__ import annotations

from lazyvic.errors import AutogradError
from lazyvic.modes import backward_walk, enable_grad, in_backward, is_grad_enabled, no_grad, set_grad_enabled
from lazyvic.trace import scope

__all__ = ["backward", "enable_grad", "in_backward", "is_grad_enabled", "no_grad", "set_grad_enabled"]


def backward(root, grad=None, retain_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) into ``leaf.grad`` for every leaf that requires grad.

    Raises:
        AutogradError: if ``root`` does not require grad, or is not a scalar and
            no ``grad`` of its shape is given.
    """
    if not root.requires_grad:
        raise AutogradError("backward: tensor does not require grad and has no grad_fn")
    if grad is None:
        if root.numel() != 1:
            raise AutogradError(
                f"backward: grad can be implicitly created only for scalar outputs, got shape {root.shape}"
            )
        grad = root.ones_like()
    elif not hasattr(grad, "_node"):  # array data: a tensor of root's dtype (on the CPU, as before)
        grad = root.new_tensor(grad, device="cpu")
    if grad.shape != root.shape:
        raise AutogradError(f"backward: grad shape {grad.shape} does not match tensor shape {root.shape}")

    # Topological order of the tensors with a context (iterative DFS).
    order, seen = [], set()
    stack = [(root, False)]
    while stack:
        t, expanded = stack.pop()
        if id(t) in seen and not expanded:
            continue
        if expanded:
            order.append(t)
            continue
        seen.add(id(t))
        stack.append((t, True))
        if t._ctx is not None and t._ctx[1] is not None:
            for i in t._ctx[1]:
                if i.requires_grad and id(i) not in seen:
                    stack.append((i, False))

    grads = {id(root): grad}
    with backward_walk():
        _walk(order, grads, retain_graph)


def _walk(order: list, grads: dict, retain_graph: bool) -> None:
    """Call the VJPs in reverse topological order, accumulating cotangents into ``grads``."""
    # Each VJP's nodes carry "<forward scope> (backward)"; the scope is restored after the walk.
    with no_grad(), scope.entered(scope.current):
        for t in reversed(order):
            g = grads.pop(id(t), None)
            if g is None:
                continue
            ctx = t._ctx
            if ctx is None:
                t.grad = g if t.grad is None else t.grad + g
                continue
            opdef, inputs, nodes, attrs, out_node = ctx
            fwd = out_node.scope if out_node is not None else None
            scope.set_current(f"{fwd} (backward)" if fwd else "(backward)")
            if inputs is None:
                raise AutogradError(
                    f"backward: trying to backward through the graph a second time (the saved values of "
                    f"{opdef.name} were freed by the first backward); use backward(retain_graph=True)"
                )
            saved = [g._wrap(n) for n in nodes]
            cotangents = opdef.vjp(g, saved, g._wrap(out_node), attrs)
            for inp, gi in zip(inputs, cotangents):
                if gi is None or not inp.requires_grad:
                    continue
                if gi.shape != inp.shape:
                    raise AutogradError(
                        f"internal: VJP of {opdef.name} gave shape {gi.shape} for input of shape {inp.shape}"
                    )
                prev = grads.get(id(inp))
                grads[id(inp)] = gi if prev is None else prev + gi
            if not retain_graph:
                # Free the saved values but keep the op: the tensor stays a non-leaf with its
                # grad_fn (as in PyTorch), and a second backward through it is an error.
                t._ctx = (opdef, None, None, None, None)
