"""The backward walk: ``backward``, ``grad``, tensor hooks and ``retain_grad``.

Every differentiable op records a context ``(opdef, input tensors, input nodes, attrs, output
node)`` on its output. The walk visits the tensors behind the roots in reverse topological
order and calls each op's VJP from the op table; the VJPs are themselves lazy ops, so the walk
computes nothing: the next sync runs the forward, the backward and the optimizer update as one
plan.

VJPs see the *values* their op saw (the saved nodes), so an in-place update of an input after
the forward (an optimizer step) does not change the gradient. With ``create_graph=True`` the
walk records the VJPs with history (grad mode on) and hands each VJP the input and output
tensors themselves wherever they still hold the values the op saw, so a gradient can be
differentiated again (higher-order gradients, gradient penalties).

Hooks (``Tensor.register_hook``, ``register_post_accumulate_grad_hook``) and ``retain_grad`` flags live in a registry here, keyed by
the tensor's id and dropped with the tensor (``Tensor`` has ``__slots__``). A hook may queue a
callback that runs when the walk is over (``queue_callback``). This module builds
tensors only through the tensors it is handed: it sits below ``lazyvic.tensor``.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Callable, Sequence

from lazyvic.errors import AutogradError, UnsupportedOpError
from lazyvic.modes import backward_walk, enable_grad, no_grad
from lazyvic.ops.join import MIN_PIECES
from lazyvic.trace import scope


# ------------------------------------------------------------------ hooks
class _TensorHooks:
    """The hooks and the retain_grad flag of one tensor (dropped when the tensor dies)."""

    __slots__ = ("ref", "hooks", "post", "retain")

    def __init__(self, t) -> None:
        key = id(t)
        # The callback runs before the id can be reused by another object.
        self.ref = weakref.ref(t, lambda _, key=key: _registry.pop(key, None))
        self.hooks: dict[int, Callable] = {}  # handle id -> hook, in registration order
        self.post: dict[int, Callable] = {}  # post-accumulate-grad hooks (leaves)
        self.retain = False


_registry: dict[int, _TensorHooks] = {}


def _entry(t, create: bool = False) -> _TensorHooks | None:
    e = _registry.get(id(t))
    if e is not None and e.ref() is not t:
        e = None
    if e is None and create:
        e = _registry[id(t)] = _TensorHooks(t)
    return e


class RemovableHandle:
    """What ``Tensor.register_hook`` returns (PyTorch's ``torch.utils.hooks.RemovableHandle``):
    ``remove()`` unregisters the hook (twice is harmless); as a context manager it removes the
    hook on exit."""

    _ids = itertools.count()

    def __init__(self, hooks: dict) -> None:
        self.id = next(RemovableHandle._ids)
        self._hooks = hooks

    def remove(self) -> None:
        self._hooks.pop(self.id, None)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        self.remove()


def register_hook(t, hook: Callable) -> RemovableHandle:
    """Call ``hook(grad)`` with the gradient of ``t`` each time the walk computes it; a returned
    tensor (same shape and dtype) replaces the gradient. Hooks run in registration order, on a
    leaf before the gradient is accumulated into ``.grad``, on a non-leaf before the gradient
    flows on to its inputs (``torch.Tensor.register_hook``).

    Raises:
        AutogradError: ``t`` does not require grad.
        TypeError: ``hook`` is not callable.
    """
    if not t.requires_grad:
        raise AutogradError(
            f"register_hook: cannot register a hook on a tensor that does not require grad (shape {t.shape})"
        )
    return _add_hook(t, "hooks", hook, "register_hook")


def _add_hook(t, kind: str, hook: Callable, what: str) -> RemovableHandle:
    """Register ``hook`` in ``t``'s hooks of ``kind`` ("hooks" or "post")."""
    if not callable(hook):
        raise TypeError(f"{what}: expected a callable hook, got {type(hook).__name__}")
    hooks = getattr(_entry(t, create=True), kind)
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def register_post_accumulate_grad_hook(t, hook: Callable) -> RemovableHandle:
    """Call ``hook(t)`` after each walk has accumulated a gradient into the leaf ``t``'s
    ``.grad`` (``torch.Tensor.register_post_accumulate_grad_hook``; what
    ``DistributedDataParallel`` uses to learn which gradients a backward produced).

    Raises:
        AutogradError: ``t`` does not require grad, or is not a leaf.
        TypeError: ``hook`` is not callable.
    """
    if not t.requires_grad or t._ctx is not None:
        raise AutogradError(
            f"register_post_accumulate_grad_hook: only a leaf tensor that requires grad takes one (shape {t.shape})"
        )
    return _add_hook(t, "post", hook, "register_post_accumulate_grad_hook")


class _Callbacks(threading.local):
    def __init__(self):
        self.queue: list | None = None  # the running walk's callbacks (None: no walk runs)


_callbacks = _Callbacks()


def queue_callback(fn: Callable[[], None]) -> None:
    """Run ``fn()`` once the running backward walk has finished accumulating every gradient
    (PyTorch's ``Variable._execution_engine.queue_callback``), in queueing order.

    Raises:
        AutogradError: no backward walk is running in this thread.
    """
    if _callbacks.queue is None:
        raise AutogradError("queue_callback: only a hook running inside a backward walk can queue a callback")
    _callbacks.queue.append(fn)


def is_queued(fn: Callable[[], None]) -> bool:
    """True when the running backward walk has ``fn`` queued already (compared with ``==``, so
    a bound method of the same object counts)."""
    return _callbacks.queue is not None and fn in _callbacks.queue


def _accumulated(t) -> None:
    """After ``t.grad`` took this walk's gradient: ``t``'s post-accumulate-grad hooks."""
    e = _entry(t)
    if e is not None and e.post:
        for hook in list(e.post.values()):
            hook(t)


def retain_grad(t) -> None:
    """Keep the gradient of the non-leaf ``t`` in ``t.grad`` during later walks (accumulated, as
    a leaf's, after ``t``'s hooks ran). A no-op on a leaf (``torch.Tensor.retain_grad``).

    Raises:
        AutogradError: ``t`` does not require grad.
    """
    if not t.requires_grad:
        raise AutogradError(f"retain_grad: cannot retain_grad on a tensor that has requires_grad=False ({t.shape})")
    if t._ctx is not None:
        _entry(t, create=True).retain = True


def retains_grad(t) -> bool:
    """True for a non-leaf tensor on which :func:`retain_grad` was called."""
    e = _entry(t)
    return e is not None and e.retain and t._ctx is not None


def _hooked(t, g):
    """``g`` after ``t``'s hooks; the retained ``.grad`` of a non-leaf is updated here."""
    e = _entry(t)
    if e is None:
        return g
    for hook in list(e.hooks.values()):
        r = hook(g)
        if r is None:
            continue
        if not hasattr(r, "_node") or r.shape != g.shape or r.dtype != g.dtype:
            got = f"shape {r.shape} {r.dtype}" if hasattr(r, "_node") else type(r).__name__
            raise AutogradError(
                f"hook {getattr(hook, '__name__', hook)!r} returned {got}; expected a tensor of the "
                f"gradient's shape {g.shape} and dtype {g.dtype}"
            )
        g = r
    if e.retain and t._ctx is not None:
        t.grad = _own(g) if t.grad is None else t.grad + g
    return g


def _own(g):
    """A handle on ``g`` that no other ``.grad`` holds. One gradient tensor can reach several
    tensors (both inputs of an add: an LSTM's ``bias_ih`` and ``bias_hh``); as in PyTorch, whose
    AccumulateGrad copies a gradient it cannot steal, each ``.grad`` must be its own tensor, so
    that an in-place update of one (``clip_grad_norm_``'s ``mul_``) leaves the others alone.
    In-place ops rebind the handle they are called on, so a new handle is enough (no copy) unless
    the gradient carries history (``create_graph``), which the handle must keep."""
    return g.clone() if g.requires_grad else g.detach()


# ------------------------------------------------------------- accumulation
# Disjoint padded gradients (the VJPs of slices: chunk, split, narrow, x[i]) joined by one
# cat of at least this many pieces instead of a sum of padded terms (see _Terms): the cat
# primitive's own threshold.
JOIN_MIN_PIECES = MIN_PIECES
# Products reaching one tensor (a weight used at every step) with inner sizes up to this are
# joined into one product over the stacked inner axis (see _small_products).
JOIN_MAX_INNER = 256


class _Terms(list):
    """The gradients reaching one tensor from its several uses, summed when the walk reaches it.

    Terms that are zero-paddings of disjoint ranges along one axis (a tensor used as slices:
    the gates of an LSTM cell chunked into four, the time steps of a sequence) are joined by
    one ``cat`` of their pieces (and zeros for the ranges no slice read) when that makes at
    least JOIN_MIN_PIECES pieces, else summed as the other terms, in arrival order. As a sum of
    k padded terms every element of the fused kernel tested all k paddings and the pieces'
    formulas could not vectorize (an LSTM cell's four gate gradients: one kernel of 100 us for
    a (20, 512) gradient); joined, each piece is its own kernel and the cat copies them. A
    padding adds zeros, so the joined gradient equals the sum up to the order in which the
    other terms are added to it (after the cat, not between the padded terms) and a -0.0 the
    sum made 0.0. Small products reaching one tensor are joined too (_small_products). Only
    terms of the first term's dtype join (a custom Function may hand back another dtype)."""

    __slots__ = ()

    def total(self):
        products = _small_products(self) if len(self) >= JOIN_MIN_PIECES else None
        if products is not None:
            return self._joined_products(*products)
        join = _padded_ranges(self) if len(self) >= 2 else None
        if join is None:
            total = self[0]
            for g in self[1:]:
                total = total + g
            return total
        axis, ranges, rest = join
        first = self[ranges[0][2]]
        size = first.shape[axis]
        pieces, at = [], 0
        for start, stop, k in ranges:
            if start > at:
                pieces.append(first.new_zeros(*[start - at if i == axis else n for i, n in enumerate(first.shape)]))
            pieces.append(self[k]._wrap(self[k]._node.inputs[0]))
            at = stop
        if at < size:
            pieces.append(first.new_zeros(*[size - at if i == axis else n for i, n in enumerate(first.shape)]))
        total = first.apply("cat", *pieces, axis=axis)
        for k in rest:
            total = total + self[k]
        return total

    def _joined_products(self, factors: list, rest: list):
        """sum_k a_k @ b_k as one product cat(a_k, 1) @ cat(b_k, 0), then the other terms."""
        first = self[0]
        lefts = [f[0] for f in factors]
        if all(x._node.op == "permute" and len(x.shape) == 2 for x in lefts):
            # The a_k are transposed views (g_t^T): stack the rows of their sources and read the
            # stack transposed (a strided copy of each view took 0.4 ms per (512, 700) join).
            a = first.apply("cat", *[x._wrap(x._node.inputs[0]) for x in lefts], axis=0).permute(1, 0)
        else:
            a = first.apply("cat", *lefts, axis=1)
        b = first.apply("cat", *[f[1] for f in factors], axis=0)
        total = a @ b
        for k in rest:
            total = total + self[k]
        return total


def _small_products(terms):
    """([(a_k, b_k)], indices of the other terms) when at least JOIN_MIN_PIECES terms are 2-D
    products a_k @ b_k of one shape whose inner sizes are all at most JOIN_MAX_INNER (a weight
    used at every step of a sequence: an LSTM's W_hh receives g_t^T h_t from each of its T
    steps, products of K = batch), else None. Joined, they are one product over the stacked
    inner axis: one BLAS call of K = sum K_t instead of T calls of K_t (a 35-step LSTM language
    model at batch 20: 72 products of (512 x 20) @ (20 x 128), 2.4 ms, against one of K = 700)."""
    factors, rest = [], []
    for k, g in enumerate(terms):
        node = g._node
        # The VJP of a transposed operand's product hands back (g^T a)^T transposed again.
        while (
            node.op == "permute"
            and node.inputs[0].op == "permute"
            and dict(node.attrs)["perm"] == (1, 0)
            and dict(node.inputs[0].attrs)["perm"] == (1, 0)
        ):
            node = node.inputs[0].inputs[0]
        if node.op == "matmul" and not g.requires_grad and len(node.shape) == 2 and g.dtype is terms[0].dtype:
            a, b = node.inputs
            if len(a.shape) == 2 and len(b.shape) == 2 and a.shape[1] <= JOIN_MAX_INNER:
                factors.append((g._wrap(a), g._wrap(b)))
                continue
        rest.append(k)
    if len(factors) < JOIN_MIN_PIECES:
        return None
    return factors, rest


def _padded_ranges(terms):
    """(axis, [(start, stop, term index)] sorted, indices of the other terms) when at least
    JOIN_MIN_PIECES pieces would join, else None."""
    by_axis: dict = {}
    for k, g in enumerate(terms):
        node = g._node
        if node.op != "pad" or g.requires_grad or g.dtype is not terms[0].dtype:  # create_graph: keep history
            continue
        pads = dict(node.attrs)["pads"]
        axes = [i for i, p in enumerate(pads) if p != (0, 0)]
        if len(axes) != 1:
            continue
        (axis,) = axes
        before, after = pads[axis]
        by_axis.setdefault(axis, []).append((before, node.shape[axis] - after, k))
    for axis, ranges in by_axis.items():
        ranges.sort()
        disjoint = all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:]))
        gaps = sum(1 for a, b in zip(ranges, ranges[1:]) if a[1] < b[0]) + (ranges[0][0] > 0)
        gaps += ranges[-1][1] < terms[ranges[0][2]].shape[axis]
        if disjoint and len(ranges) >= 2 and len(ranges) + gaps >= JOIN_MIN_PIECES:
            joined = {k for _, _, k in ranges}
            return axis, ranges, [k for k in range(len(terms)) if k not in joined]
    return None


# ----------------------------------------------------- several-output nodes
class OutputOf:
    """The op recorded on output ``index`` of a node with several outputs (a custom
    ``Function``): its context's one input is that node, whose backward runs once, with the
    gradients of all its outputs (a list), after the walk has seen every output."""

    differentiable = True

    def __init__(self, name: str, index: int) -> None:
        self.name, self.index = name, index


# -------------------------------------------------------------- the walk
def _as_tuple(x) -> tuple:
    if x is None:
        return ()
    if hasattr(x, "_node"):
        return (x,)
    return tuple(x)


def _seed_grads(what: str, roots: tuple, grads) -> dict:
    """The cotangent of each root: ``grads[k]``, or ones for a one-element root."""
    if grads is None:
        grads = []
    elif isinstance(grads, (list, tuple)) and (len(roots) > 1 or all(g is None or hasattr(g, "_node") for g in grads)):
        grads = list(grads)
    else:  # one tensor, or array data for the one root
        grads = [grads]
    if grads and len(grads) != len(roots):
        raise AutogradError(f"{what}: got {len(grads)} gradients for {len(roots)} tensors")
    seeds: dict = {}
    for k, root in enumerate(roots):
        if not hasattr(root, "_node"):
            raise TypeError(f"{what}: expected tensors, got {type(root).__name__} at index {k}")
        if not root.requires_grad:
            which = "tensor" if len(roots) == 1 else f"element {k} of the tensors"
            raise AutogradError(f"{what}: {which} does not require grad and has no grad_fn")
        g = grads[k] if grads else None
        if g is None:
            if root.numel() != 1:
                raise AutogradError(
                    f"{what}: grad can be implicitly created only for scalar outputs, got shape {root.shape}"
                )
            g = root.ones_like()
        elif not hasattr(g, "_node"):  # array data: a tensor of root's dtype (on the CPU, as before)
            g = root.new_tensor(g, device="cpu")
        if g.shape != root.shape:
            raise AutogradError(f"{what}: grad shape {g.shape} does not match tensor shape {root.shape}")
        prev = seeds.get(id(root))
        seeds[id(root)] = g if prev is None else prev + g
    return seeds


def _topological_order(roots: tuple) -> list:
    """The tensors (and several-output nodes) behind ``roots`` that require grad, inputs first."""
    order, seen = [], set()
    stack = [(r, False) for r in reversed(roots)]
    while stack:
        t, expanded = stack.pop()
        if expanded:
            order.append(t)
            continue
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.append((t, True))
        if t._ctx is not None and t._ctx[1] is not None:
            for i in t._ctx[1]:
                if i.requires_grad and id(i) not in seen:
                    stack.append((i, False))
    return order


def _leading_to(order: list, targets: tuple) -> set:
    """Ids of the entries of ``order`` from which a path leads back to a target."""
    needed = {id(t) for t in targets}
    for t in order:  # inputs come first
        ctx = t._ctx
        # A freed context may have led to a target: the walk reaches it and says so.
        if ctx is not None and (ctx[1] is None or any(id(i) in needed for i in ctx[1])):
            needed.add(id(t))
    return needed


def run_backward(
    what: str,
    roots: tuple,
    grads,
    retain_graph: bool,
    create_graph: bool,
    targets: tuple | None,
    accumulate: bool,
) -> dict:
    """Walk the graph behind ``roots`` with cotangents ``grads``.

    ``accumulate``: add each leaf's gradient into its ``.grad`` (only the ``targets``' when
    given, which may be non-leaves). Returns ``{id(target): gradient}`` for the targets reached.
    """
    seeds = _seed_grads(what, roots, grads)
    order = _topological_order(roots)
    needed = _leading_to(order, targets) if targets is not None else None
    target_ids = {id(t) for t in targets} if targets is not None else set()
    outer, _callbacks.queue = _callbacks.queue, []
    try:
        with backward_walk():
            captured = _walk(what, order, seeds, retain_graph, create_graph, accumulate, target_ids, needed)
        queue, _callbacks.queue = _callbacks.queue, outer
        for fn in queue:
            fn()
    finally:
        _callbacks.queue = outer
    return captured


def _walk(what, order, grads, retain_graph, create_graph, accumulate, target_ids, needed) -> dict:
    """Call the VJPs in reverse topological order, accumulating cotangents into ``grads``."""
    captured = {}
    state = scope.local.state
    # Each VJP's nodes carry "<forward scope> (backward)"; the scope is restored after the walk.
    with enable_grad() if create_graph else no_grad(), scope.entered(state.current):
        for t in reversed(order):
            g = grads.pop(id(t), None)
            if g is None:
                continue
            if isinstance(g, _Terms):
                state.current = _backward_name(t._node.scope)  # the join's nodes: t's backward scope
                g = g.total()
            ctx = t._ctx
            if _registry and not isinstance(g, list):  # a list: the gradients of a several-output node's outputs
                g = _hooked(t, g)  # (hooks and retain_grad flags live in _registry)
            if id(t) in target_ids:
                captured[id(t)] = g
            if ctx is None:  # a leaf
                if accumulate and (needed is None or id(t) in target_ids):
                    t.grad = _own(g) if t.grad is None else t.grad + g
                    if _registry:
                        _accumulated(t)
                continue
            if accumulate and id(t) in target_ids:  # backward(inputs=[a non-leaf])
                t.grad = _own(g) if t.grad is None else t.grad + g
            opdef, inputs, nodes, attrs, out_node = ctx
            if inputs is None:
                raise AutogradError(
                    f"{what}: trying to backward through the graph a second time (the saved "
                    f"values of {opdef.name} were freed by the first backward); use backward(retain_graph=True)"
                )
            if needed is not None and not any(id(i) in needed for i in inputs):
                continue
            if isinstance(opdef, OutputOf):
                slots = grads.setdefault(id(inputs[0]), [None] * inputs[0].n_outputs)
                slots[opdef.index] = g
            else:
                state.current = _backward_name(out_node.scope if out_node is not None else None)
                saved, out = _saved(t, inputs, nodes, out_node, create_graph)
                cotangents = opdef.vjp(g, saved, out, attrs)
                for inp, gi in zip(inputs, cotangents):
                    if gi is None or not inp.requires_grad or (needed is not None and id(inp) not in needed):
                        continue
                    if gi.shape != inp.shape:
                        raise AutogradError(
                            f"internal: VJP of {opdef.name} gave shape {gi.shape} for input of shape {inp.shape}"
                        )
                    prev = grads.get(id(inp))
                    if prev is None:
                        grads[id(inp)] = gi
                    elif isinstance(prev, _Terms):
                        prev.append(gi)
                    else:
                        grads[id(inp)] = _Terms((prev, gi))
            if not retain_graph:
                # Free the saved values but keep the op: the tensor stays a non-leaf with its
                # grad_fn (as in PyTorch), and a second backward through it is an error.
                t._ctx = (opdef, None, None, None, None)
                release = getattr(opdef, "release", None)  # a custom Function's saved tensors
                if release is not None:
                    release()
    return captured


# "<scope> (backward)" for each forward scope seen (module paths: a few per model).
backward_names: dict = {}


def _backward_name(fwd) -> str:
    """The scope of the nodes a VJP records: "<forward scope> (backward)"."""
    name = backward_names.get(fwd)
    if name is None:
        if len(backward_names) > 4096:
            backward_names.clear()
        name = backward_names[fwd] = f"{fwd} (backward)" if fwd else "(backward)"
    return name


def _saved(t, inputs, nodes, out_node, create_graph: bool):
    """The input values and output value a VJP reads. Without ``create_graph``: plain handles
    on the saved nodes. With it: the tensors themselves where they still hold those values (so
    the VJP is recorded with history), else handles on the saved values (constants)."""
    if nodes is None:  # a several-output node keeps its own saved tensors
        return None, None
    if not create_graph:
        return [t._wrap(n) for n in nodes], t._wrap(out_node)
    saved = [i if i._node is n else t._wrap(n) for i, n in zip(inputs, nodes)]
    return saved, (t if t._node is out_node else t._wrap(out_node))


# ---------------------------------------------------------- public entry points
def backward(
    tensors,
    grad_tensors=None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    grad_variables=None,
    inputs=None,
) -> None:
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of the leaves behind them
    (``torch.autograd.backward``). Lazy: adds nodes, computes nothing.

    Args:
        tensors: a tensor or a sequence of tensors (each requires grad).
        grad_tensors: their cotangents (same shapes); None for a one-element tensor means 1.
        retain_graph: keep the saved values for another walk (default: ``create_graph``).
        create_graph: record the gradients with history, so they can be differentiated.
        inputs: accumulate only into these tensors' ``.grad`` (leaves or not).

    Raises:
        AutogradError: a tensor does not require grad; a non-scalar tensor without a gradient;
            a gradient of another shape; a second walk through freed values.
    """
    if grad_variables is not None:
        grad_tensors = grad_variables
    roots = _as_tuple(tensors)
    targets = None
    if inputs is not None:
        targets = _as_tuple(inputs)
        if not targets:
            raise AutogradError("backward: inputs= is an empty sequence")
        for k, x in enumerate(targets):
            if not x.requires_grad:
                raise AutogradError(f"backward: inputs[{k}] (shape {x.shape}) does not require grad")
    retain = create_graph if retain_graph is None else retain_graph
    run_backward("backward", roots, grad_tensors, retain, create_graph, targets, accumulate=True)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
) -> tuple:
    """The gradients of ``outputs`` with respect to ``inputs``, as a tuple with one entry per
    input (``torch.autograd.grad``). No ``.grad`` is touched (retained non-leaf grads and hooks
    behave as in ``backward``). Lazy: the returned tensors are pending.

    Args:
        outputs: a tensor or a sequence of tensors that require grad.
        inputs: a tensor or a sequence of tensors (leaves or not) that require grad.
        grad_outputs: cotangents of ``outputs``; None for a one-element output means 1.
        retain_graph: keep the saved values for another walk (default: ``create_graph``).
        create_graph: record the gradients with history (higher-order gradients).
        allow_unused: return None for an input the outputs do not depend on, instead of raising.
        materialize_grads: return zeros instead of None for such inputs (implies allow_unused).

    Raises:
        AutogradError: an output or input does not require grad, an unused input without
            ``allow_unused``, or the errors of :func:`backward`.
        UnsupportedOpError: ``is_grads_batched=True``.
    """
    if is_grads_batched:
        raise UnsupportedOpError("grad: is_grads_batched=True (vmap over grad_outputs) is not supported")
    if materialize_grads and allow_unused is False:
        raise AutogradError("grad: materialize_grads=True needs allow_unused to be True or not given")
    allow_unused = materialize_grads if allow_unused is None else allow_unused
    outs, ins = _as_tuple(outputs), _as_tuple(inputs)
    if not outs or not ins:
        raise AutogradError(f"grad: got {len(outs)} outputs and {len(ins)} inputs; both must be non-empty")
    for k, x in enumerate(ins):
        if not hasattr(x, "_node"):
            raise TypeError(f"grad: inputs[{k}] is a {type(x).__name__}, expected a tensor")
        if not x.requires_grad:
            raise AutogradError(f"grad: inputs[{k}] (shape {x.shape}) does not require grad")
    retain = create_graph if retain_graph is None else retain_graph
    captured = run_backward("grad", outs, grad_outputs, retain, create_graph, ins, accumulate=False)
    result = []
    for k, x in enumerate(ins):
        g = captured.get(id(x))
        if g is None:
            if not allow_unused:
                raise AutogradError(
                    f"grad: inputs[{k}] (shape {x.shape}) was not used in the graph of the outputs; "
                    f"pass allow_unused=True to get None for it"
                )
            if materialize_grads:
                g = x.zeros_like()
        result.append(g)
    return tuple(result)


__all__: Sequence[str] = ["backward", "grad", "register_hook", "retain_grad", "retains_grad", "RemovableHandle"]
