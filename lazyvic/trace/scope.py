"""Module scopes: which ``nn.Module`` (or optimizer, or backward of one) recorded a node.

``Node.__init__`` reads ``local.state.current`` (one thread-local read per op); ``Module.__call__``
and the optimizers set it through :func:`enter_module` / :func:`entered`. Scopes are for people
(the visualizer, ``explain``): they never enter a trace key, so they cause no recompiles.

A module's scope is its dotted path from the outermost module being called
(``transformer.h.0.attn`` in TinyGPT); the outermost module itself, and a module called
outside any parent, is named by its class.

Thread safety: the scope is per thread (``local.state``: a :class:`ScopeState` per thread, held
by a ``threading.local``), so two threads calling models at once each record under their own
module path. ``scope.current`` reads the calling thread's scope.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

from lazyvic.trace.tape import Tape


class ScopeState:
    """One thread's scope: ``current`` (the innermost scope now, read by ``Node.__init__``), the
    outermost module being called (``root``), the dotted name of each of its submodules
    (``names``), whether those names were recomputed during this call (``refreshed``: at most
    once, so that a module that is no submodule does not cost a walk of the model at every call)
    and the depth of module calls. A plain object: one thread-local read finds it, then its
    attributes cost what a module global's do (the backward walk sets ``current`` per op).

    It also holds the thread's :class:`~lazyvic.trace.tape.Tape` (``tape``), which
    ``Node.__init__`` reads through the same thread-local read; the sync replaces it
    (``lazyvic.sync``)."""

    __slots__ = ("current", "root", "names", "refreshed", "depth", "tape")

    def __init__(self):
        self.current: str | None = None
        self.root = None
        self.names: dict = {}
        self.refreshed = False
        self.depth = 0
        self.tape = Tape()


class _Local(threading.local):
    def __init__(self):
        self.state = ScopeState()


local = _Local()  # local.state: the calling thread's ScopeState

# Names of each outermost module's submodules, computed once per module (weak: the cache
# keeps no model alive). Shared by threads: a model called from two threads has one naming.
_names_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def __getattr__(name: str):
    if name == "current":  # the calling thread's scope (read by the backward walk and tools)
        return local.state.current
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _names(root) -> dict:
    names = {id(m): path for path, m in root.named_modules()}
    names[id(root)] = type(root).__name__
    _names_cache[root] = names
    return names


def module_path(module) -> str:
    """The scope of ``module`` if it were called now (in this thread)."""
    st = local.state
    if st.depth == 0:
        return type(module).__name__
    path = st.names.get(id(module))
    if path is None and not st.refreshed:  # added after the first call, or not a submodule at all
        st.names = _names(st.root)
        st.refreshed = True
        path = st.names.get(id(module))
    if path is None:
        current = st.current
        path = f"{current}.{type(module).__name__}" if current else type(module).__name__
    return path


def enter_module(module) -> str | None:
    """Enter ``module``'s scope (``Module.__call__``); returns what :func:`leave_module` restores."""
    st = local.state
    prev = st.current
    if st.depth == 0:
        names = _names_cache.get(module)
        st.root, st.names, st.refreshed = module, names if names is not None else _names(module), names is None
    st.current = module_path(module)
    st.depth += 1
    return prev


def leave_module(prev: str | None) -> None:
    st = local.state
    st.current = prev
    st.depth -= 1
    if st.depth == 0:
        st.root, st.names, st.refreshed = None, {}, False


@contextlib.contextmanager
def entered(name: str | None):
    """Record the nodes made inside under scope ``name`` (``optim.AdamW``, ``... (backward)``)."""
    st = local.state
    prev = st.current
    st.current = name
    try:
        yield
    finally:
        st.current = prev


def set_current(name: str | None) -> str | None:
    """Set the scope without a context manager (the backward walk, per op); returns the previous one."""
    st = local.state
    prev, st.current = st.current, name
    return prev
