"""Module scopes: which ``nn.Module`` (or optimizer, or backward of one) recorded a node.

``Node.__init__`` reads :data:`current` (one module-level read per op); ``Module.__call__``
and the optimizers set it through :func:`entered`. Scopes are for people (the visualizer,
``explain``): they never enter a trace key, so they cause no recompiles.

A module's scope is its dotted path from the outermost module being called
(``transformer.h.0.attn`` in TinyGPT); the outermost module itself, and a module called
outside any parent, is named by its class.
"""

from __future__ import annotations

import contextlib
import weakref

current: str | None = None  # the innermost scope now, read by Node.__init__

# The outermost module being called, the dotted name of each of its submodules, and whether
# those names were recomputed during this call (at most once: a module that is no submodule
# must not cost a walk of the model at every call).
_root: list = [None, {}, False]  # [module, {id(submodule): path}, refreshed]
_depth = [0]
# Names of each outermost module's submodules, computed once per module (weak: the cache
# keeps no model alive).
_names_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _names(root) -> dict:
    names = {id(m): path for path, m in root.named_modules()}
    names[id(root)] = type(root).__name__
    _names_cache[root] = names
    return names


def module_path(module) -> str:
    """The scope of ``module`` if it were called now."""
    if _depth[0] == 0:
        return type(module).__name__
    root, names, refreshed = _root
    path = names.get(id(module))
    if path is None and not refreshed:  # added after the first call, or not a submodule at all
        names = _root[1] = _names(root)
        _root[2] = True
        path = names.get(id(module))
    if path is None:
        path = f"{current}.{type(module).__name__}" if current else type(module).__name__
    return path


def enter_module(module) -> str | None:
    """Enter ``module``'s scope (``Module.__call__``); returns what :func:`leave_module` restores."""
    global current
    prev = current
    if _depth[0] == 0:
        names = _names_cache.get(module)
        _root[0], _root[1], _root[2] = module, names if names is not None else _names(module), names is None
    current = module_path(module)
    _depth[0] += 1
    return prev


def leave_module(prev: str | None) -> None:
    global current
    current = prev
    _depth[0] -= 1
    if _depth[0] == 0:
        _root[0], _root[1], _root[2] = None, {}, False


@contextlib.contextmanager
def entered(name: str | None):
    """Record the nodes made inside under scope ``name`` (``optim.AdamW``, ``... (backward)``)."""
    global current
    prev = current
    current = name
    try:
        yield
    finally:
        current = prev


def set_current(name: str | None) -> str | None:
    """Set the scope without a context manager (the backward walk, per op); returns the previous one."""
    global current
    prev, current = current, name
    return prev
