"""``torch.autograd.functional``: ``vjp``, ``jvp``, ``jacobian``, ``hessian``, ``hvp``, ``vhp``,
built on :func:`lazyvic.autograd.grad` (reverse mode over the lazy graph; results are lazy).

``jvp`` and ``hvp`` use the double-backward trick (PyTorch's too): the vector-Jacobian product
is linear in its cotangent ``u``, so differentiating ``u -> vjp(u) . v`` with respect to ``u``
gives the Jacobian-vector product. ``jacobian`` takes one backward walk per output element
(``vectorize`` is accepted and changes nothing; ``strategy="forward-mode"`` computes the same
values by reverse mode). ``create_graph=True`` keeps the results differentiable (the engine
records backward with history).

Inputs are copied as detached leaves that require grad (as PyTorch does), so the function's own
graph to the caller's tensors is not touched; with ``create_graph`` they stay connected, so
the results differentiate back to the caller's tensors.
"""

from __future__ import annotations

from lazyvic.autograd.engine import grad
from lazyvic.errors import ArgumentError, AutogradError, ShapeError
from lazyvic.indexing import stack
from lazyvic.modes import enable_grad


def _is_tensor(value) -> bool:
    return hasattr(value, "_node")


def _as_tuple(name: str, arg, fn_name: str) -> tuple:
    """(is_tuple, tuple of tensors)."""
    if _is_tensor(arg):
        return False, (arg,)
    if isinstance(arg, (tuple, list)) and all(_is_tensor(a) for a in arg):
        return True, tuple(arg)
    raise TypeError(
        f"The {name} given to {fn_name} must be either a Tensor or a tuple of Tensors but got {type(arg).__name__}."
    )


def _prepare(inputs: tuple, create_graph: bool) -> tuple:
    out = []
    for x in inputs:
        if not x.dtype.is_floating_point:
            raise AutogradError(f"autograd.functional: inputs must be floating-point tensors, got {x.dtype.name}")
        if create_graph and x.requires_grad:
            out.append(x.view_as(x))  # keeps the caller's graph, for higher derivatives
        else:
            out.append(x.detach().requires_grad_(True))
    return tuple(out)


def _grads(outputs: tuple, inputs: tuple, cotangents, create_graph: bool, strict: bool, fn_name: str) -> tuple:
    """The vector-Jacobian products, zeros for an input the outputs do not reach."""
    wanted = [(o, c) for o, c in zip(outputs, cotangents) if o.requires_grad]
    if not wanted:
        if strict:
            raise AutogradError(
                f"{fn_name}: the output of the user-provided function is independent of its inputs (strict=True)"
            )
        return tuple(None for _ in inputs)
    outs, cots = zip(*wanted)
    return grad(outs, inputs, cots, retain_graph=True, create_graph=create_graph, allow_unused=True)


def _fill(grads: tuple, inputs: tuple, strict: bool, fn_name: str, what: str) -> tuple:
    out = []
    for k, (g, x) in enumerate(zip(grads, inputs)):
        if g is None:
            if strict:
                raise AutogradError(
                    f"{fn_name}: the output of the user-provided function is independent of input {k} (strict=True)"
                )
            g = x.zeros_like()
        out.append(g)
    return tuple(out)


def _finish(tensors: tuple, create_graph: bool) -> tuple:
    return tuple(t if create_graph or t is None else t.detach() for t in tensors)


def _check_v(name: str, v: tuple, like: tuple, fn_name: str) -> None:
    if len(v) != len(like):
        raise ShapeError(f"{fn_name}: v has {len(v)} tensors, expected {len(like)} (one per {name})")
    for k, (a, b) in enumerate(zip(v, like)):
        if a.shape != b.shape:
            raise ShapeError(f"{fn_name}: entry {k} of v has shape {a.shape}, the {name} has shape {b.shape}")


def _call(func, inputs: tuple, fn_name: str) -> tuple:
    with enable_grad():
        result = func(*inputs)
    return _as_tuple("outputs of the user-provided function", result, fn_name)


def vjp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), v^T J): the vector-Jacobian product of ``func`` at ``inputs`` with ``v``
    (a tensor, or a tuple, of the outputs' shapes; may be None for a single one-element output).
    Each result has the structure of what it stands for (a tensor or a tuple).

    Raises:
        ShapeError: ``v`` of other shapes. ArgumentError: ``v`` missing for a larger output.
        AutogradError: ``strict`` and an input the outputs do not depend on."""
    is_tuple, xs = _as_tuple("inputs", inputs, "vjp")
    xs = _prepare(xs, create_graph)
    out_tuple, outs = _call(func, xs, "vjp")
    if v is None:
        if len(outs) != 1 or outs[0].numel() != 1:
            raise ArgumentError(
                "vjp: the vector v can only be None if the user-provided function returns a single Tensor with a single element"
            )
        vs = (outs[0].ones_like(),)
    else:
        vs = _as_tuple("v", v, "vjp")[1]
        _check_v("outputs", vs, outs, "vjp")
    grads = _fill(_grads(outs, xs, vs, create_graph, strict, "vjp"), xs, strict, "vjp", "input")
    outs, grads = _finish(outs, create_graph), _finish(grads, create_graph)
    return (outs if out_tuple else outs[0]), (grads if is_tuple else grads[0])


def jvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), J v): the Jacobian-vector product of ``func`` at ``inputs`` with ``v`` (of
    the inputs' shapes; may be None for a single one-element input), by the double-backward trick.

    Raises:
        ShapeError: ``v`` of other shapes. ArgumentError: ``v`` missing for a larger input.
        AutogradError: ``strict`` and an output that does not depend on the inputs."""
    is_tuple, xs = _as_tuple("inputs", inputs, "jvp")
    xs = _prepare(xs, create_graph)
    if v is None:
        if len(xs) != 1 or xs[0].numel() != 1:
            raise ArgumentError(
                "jvp: the vector v can only be None if the input to the user-provided function is a single Tensor with a single element"
            )
        vs = (xs[0].ones_like(),)
    else:
        vs = _as_tuple("v", v, "jvp")[1]
        _check_v("inputs", vs, xs, "jvp")
    out_tuple, outs = _call(func, xs, "jvp")
    # u -> u^T J is linear; its gradient with respect to u, dotted with v, is J v
    us = tuple(o.zeros_like().requires_grad_(True) if o.dtype.is_floating_point else o.zeros_like() for o in outs)
    with enable_grad():
        g = _fill(_grads(outs, xs, us, True, strict, "jvp"), xs, strict, "jvp", "input")
    reached = [(g_k, v_k) for g_k, v_k in zip(g, vs) if g_k.requires_grad]
    if reached:
        gs, vv = zip(*reached)
        jv = grad(gs, us, vv, retain_graph=True, create_graph=create_graph, allow_unused=True)
    else:
        jv = tuple(None for _ in us)
    jv = _fill(jv, outs, strict, "jvp", "output")
    outs, jv = _finish(outs, create_graph), _finish(jv, create_graph)
    return (outs if out_tuple else outs[0]), (jv if out_tuple else jv[0])


def jacobian(
    func,
    inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
):
    """The Jacobian of ``func`` at ``inputs``: for output ``o`` and input ``x``, a tensor of shape
    ``o.shape + x.shape`` (``J[i..., j...] = d o[i...] / d x[j...]``); nested as PyTorch nests
    it: a tensor for one input and one output, a tuple over inputs (or outputs), a tuple over
    outputs of tuples over inputs. One backward walk per output element.

    Raises:
        ArgumentError: an unknown ``strategy``. AutogradError: ``strict`` and an output that does
            not depend on an input."""
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ArgumentError(
            f'jacobian: expected strategy to be either "forward-mode" or "reverse-mode", got {strategy!r}'
        )
    is_tuple, xs = _as_tuple("inputs", inputs, "jacobian")
    xs = _prepare(xs, create_graph)
    out_tuple, outs = _call(func, xs, "jacobian")
    table = []
    for o in outs:
        rows = [[] for _ in xs]
        flat = o.reshape(-1)
        for i in range(flat.shape[0]):
            grads = _grads((flat[i],), xs, (None,), create_graph, strict, "jacobian")
            grads = _fill(grads, xs, strict, "jacobian", "input")
            for k, g in enumerate(grads):
                rows[k].append(g)
        blocks = []
        for k, x in enumerate(xs):
            block = stack(rows[k], 0).reshape(*o.shape, *x.shape) if rows[k] else x.new_zeros(*o.shape, *x.shape)
            blocks.append(block if create_graph else block.detach())
        table.append(tuple(blocks))
    if out_tuple:
        return tuple(row if is_tuple else row[0] for row in table)
    return table[0] if is_tuple else table[0][0]


def hessian(
    func,
    inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
):
    """The Hessian of the scalar function ``func`` at ``inputs``: for inputs ``x`` and ``y`` a
    tensor of shape ``x.shape + y.shape``; a tensor for one input, else a tuple of tuples.

    Raises:
        ShapeError: ``func`` not returning a single one-element tensor."""
    is_tuple, xs = _as_tuple("inputs", inputs, "hessian")

    def gradient(*args):
        out = func(*args)
        if not _is_tensor(out) or out.numel() != 1:
            raise ShapeError(
                "hessian: the function given to hessian should return a single Tensor with a single element"
            )
        grads = _grads((out.reshape(()),), args, (None,), True, strict, "hessian")
        return _fill(grads, args, strict, "hessian", "input")

    result = jacobian(gradient, xs, create_graph=create_graph, strict=strict, strategy=outer_jacobian_strategy)
    if is_tuple:
        return result
    return result[0][0]


def _scalar_output(func, xs: tuple, fn_name: str):
    with enable_grad():
        out = func(*xs)
    if not _is_tensor(out) or out.numel() != 1:
        raise ShapeError(
            f"{fn_name}: the function given to {fn_name} should return a single Tensor with a single element"
        )
    return out


def _vector_hessian(fn_name: str, func, inputs, v, create_graph: bool, strict: bool):
    is_tuple, xs = _as_tuple("inputs", inputs, fn_name)
    xs = _prepare(xs, create_graph)
    if v is None:
        if len(xs) != 1 or xs[0].numel() != 1:
            raise ArgumentError(
                f"{fn_name}: the vector v can only be None if the input to the user-provided function is a single Tensor with a single element"
            )
        vs = (xs[0].ones_like(),)
    else:
        vs = _as_tuple("v", v, fn_name)[1]
        _check_v("inputs", vs, xs, fn_name)
    out = _scalar_output(func, xs, fn_name)
    with enable_grad():
        g = _fill(_grads((out.reshape(()),), xs, (None,), True, strict, fn_name), xs, strict, fn_name, "input")
    reached = [(g_k, v_k) for g_k, v_k in zip(g, vs) if g_k.requires_grad]
    if reached:
        gs, vv = zip(*reached)
        product = grad(gs, xs, vv, retain_graph=True, create_graph=create_graph, allow_unused=True)
    else:
        product = tuple(None for _ in xs)
    product = _finish(_fill(product, xs, strict, fn_name, "input"), create_graph)
    out = out if create_graph else out.detach()
    return out, (product if is_tuple else product[0])


def vhp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), v^T H): the vector-Hessian product of the scalar function ``func`` with ``v``
    (of the inputs' shapes), by differentiating the gradient dotted with ``v``.

    Raises:
        ShapeError: a non-scalar output, ``v`` of other shapes."""
    return _vector_hessian("vhp", func, inputs, v, create_graph, strict)


def hvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), H v): the Hessian-vector product of the scalar function ``func`` with ``v``.
    The Hessian of a twice-differentiable function is symmetric, so this is ``vhp``'s product
    (PyTorch computes it by the double-backward trick; the values agree).

    Raises:
        ShapeError: a non-scalar output, ``v`` of other shapes."""
    return _vector_hessian("hvp", func, inputs, v, create_graph, strict)


__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]
