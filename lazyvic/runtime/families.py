"""Plans for traces of one structure and many sizes: automatic dynamic shapes.

A trace whose exact key is not in the plan cache may still have the *structure* of traces seen
before (the same ops, inputs, ranks, dtypes and non-size attributes) with other sizes: the
last, smaller batch; a sequence one token longer; the slice a loop moves over its data. The
first trace of a structure gets a plan of fixed sizes, as always. When a second trace of the
structure arrives with other sizes, the sizes that changed become *symbols*, as
torch.compile's automatic dynamic shapes do: a family fits a template to its examples
(``lazyvic.trace.family``), lowers the trace once more with symbolic sizes
(``lazyvic.trace.symbolic``: kernels take their sizes as arguments) and keeps the plan with the
guards its lowering relied on. Every later trace of the structure whose sizes the template
explains and the guards admit runs that plan: no new plan, no compile.

A trace the template does not explain (a size that follows none of the fitted expressions)
is added to the examples and the family is fitted again, up to ``MAX_PLANS`` plans per family;
after that, or when a symbolic lowering fails, the family is *disabled* (with the reason, shown
by ``lazyvic.explain`` and ``LAZYVIC_DEBUG=1``) and its traces get plans of fixed sizes.

CUDA traces, ``LAZYVIC_COMPILE=never`` and ``LAZYVIC_DYNAMIC=0`` keep plans of fixed sizes.
"""

from __future__ import annotations

import sys
from collections import OrderedDict

from lazyvic.runtime.config import config
from lazyvic.trace import family as fam
from lazyvic.trace import symbolic

MAX_EXAMPLES = 8  # examples kept per family (the first and the most recent)
MAX_PLANS = 4  # symbolic plans per family before it is disabled (sizes follow no template)
MAX_FAMILIES = 512  # families kept (least recently used first out)


class Family:
    """The traces of one structure: examples of their sizes and the symbolic plans made so far."""

    __slots__ = ("index", "kinds", "examples", "plans", "disabled", "entries")

    def __init__(self, index: int, kinds: tuple, values: tuple, entries: tuple):
        self.index = index
        self.kinds = kinds
        self.examples = [values]
        self.plans: list = []  # (Template, Plan)
        self.disabled: str | None = None
        self.entries = entries  # the first trace's key entries, to describe sites

    def find(self, values: tuple):
        """``(plan, sizes, template)`` of a plan of this family that serves a trace of site
        ``values``, or None."""
        for template, plan in self.plans:
            env = template.bind(values)
            if env is not None:
                sizes = tuple(env)
                if plan.admits(sizes):
                    return plan, sizes, template
        return None

    def add_example(self, values: tuple) -> None:
        if values not in self.examples:
            self.examples.append(values)
            if len(self.examples) > MAX_EXAMPLES:
                del self.examples[1]


_families: OrderedDict = OrderedDict()  # structure signature -> Family


def clear() -> None:
    _families.clear()


def families() -> list:
    """The families kept now (for tools and tests)."""
    return list(_families.values())


def _structure(trace):
    """``(sites, signature)`` of ``trace``, the key of its family, or None when its sizes are not
    made symbolic (another device, ``LAZYVIC_DYNAMIC=0``, ``LAZYVIC_COMPILE=never``). The
    structure is the entries' signature and the rest of the key (the outputs, the flags, the
    parameter slots): two traces of the same ops with other outputs (a tensor kept alive in one
    loop and not in another) need plans that hand back other arrays."""
    if trace.device != "cpu" or not config.dynamic or config.compile == "never":
        return None
    sites = fam.sites(trace.key[0])
    return sites, (sites.signature, trace.key[1:])


def existing(trace):
    """``(plan, sizes, template)`` of a plan of symbolic sizes that its family already has and
    that serves ``trace``, or None; nothing is fitted, compiled or remembered. For a key first
    run before its family had such a plan (the first batch of a loop), seen again later."""
    structure = _structure(trace)
    family = _families.get(structure[1]) if structure is not None else None
    if family is None or family.disabled is not None:
        return None
    return family.find(structure[0].values)


def examples(trace) -> list:
    """The site values of the traces of ``trace``'s family seen so far (``[]`` without one)."""
    structure = _structure(trace)
    family = _families.get(structure[1]) if structure is not None else None
    return list(family.examples) if family is not None else []


def resolve(trace, compile_symbolic):
    """A symbolic plan for ``trace``, whose exact key missed the plan cache.

    Returns ``(plan, sizes, note, template)`` — the plan, the values of its symbols for this
    trace, a description of what became symbolic when the plan is new (None when an existing
    plan serves the trace), and the template that binds its symbols — or None: the trace is the first of its structure, or its family is
    disabled; it then gets a plan of fixed sizes. ``compile_symbolic(trace, named, symbols)``
    lowers the trace for symbolic sizes.
    """
    structure = _structure(trace)
    if structure is None:
        return None
    sites, signature = structure
    family = _families.get(signature)
    if family is None:
        _families[signature] = Family(len(_families), sites.kinds, sites.values, trace.key[0])
        while len(_families) > MAX_FAMILIES:
            _families.popitem(last=False)
        return None
    _families.move_to_end(signature)
    if family.disabled is not None:
        return None
    found = family.find(sites.values)
    if found is not None:
        return found[0], found[1], None, found[2]
    family.add_example(sites.values)
    if len(family.plans) >= MAX_PLANS:
        family.disabled = f"sizes changed in {len(family.examples)} ways that {MAX_PLANS} templates did not explain"
        _debug(f"[lazyvic] dynamic shapes off for a trace of {len(trace.entries)} ops: {family.disabled}")
        return None
    template = fam.fit(family.examples, sites.kinds)
    if not template.symbols:
        return None
    syms = fam.symbols_of(template, sites.values, prefix=f"f{family.index}_s")
    names = [s.render() for s in syms]
    try:
        # The shape rules' comparisons (a ceil_mode pool's last window) are guards of the plan too.
        with symbolic.recording() as shape_guards:
            named = fam.symbolize(trace.named, template, syms)
        plan = compile_symbolic(trace, named, names)
        plan.bind_symbols(plan.symbols, tuple(shape_guards) + tuple(g for g in plan.guards if g not in shape_guards))
    except Exception as e:  # noqa: BLE001 - the family keeps plans of fixed sizes, and says why
        family.disabled = f"lowering for symbolic sizes failed ({type(e).__name__}: {str(e)[:200]})"
        _debug(f"[lazyvic] dynamic shapes off for a trace of {len(trace.entries)} ops: {family.disabled}")
        return None
    sizes = tuple(template.bind(sites.values))
    if not plan.admits(sizes):  # the plan's own hints are these sizes: cannot happen
        family.disabled = "a symbolic plan refused the sizes it was lowered for"
        return None
    family.plans.append((template, plan))
    note = describe(family, template, names)
    _debug(f"[lazyvic] dynamic shapes: {note} -> plan {plan.name} ({len(plan.guards)} guards)")
    return plan, sizes, note, template


def describe(family: Family, template, names: list) -> str:
    """What each symbol of ``template`` stands for and the values it took in the examples."""
    where = _site_names(family.entries)
    parts = []
    for name, (site, _) in zip(names, template.symbols):
        seen = sorted({ex[site] for ex in family.examples})
        shown = ", ".join(str(v) for v in seen[:6]) + (" ..." if len(seen) > 6 else "")
        parts.append(f"{_short(name)} = {where[site]} (seen {shown})")
    return "; ".join(parts)


def _short(name: str) -> str:
    return name.split("_", 1)[1] if "_" in name else name


def _site_names(entries) -> list:
    """A description of every site of a trace, in :func:`lazyvic.trace.family.sites` order."""
    out = []
    for i, (op, attrs, _inputs, shape, _dtype) in enumerate(entries):
        if op in ("buffer", "scalar"):
            out.extend(f"dim {d} of input {attrs[0]}" for d in range(len(shape)))
            continue
        size_names = fam.SIZE_ATTRS.get(op, ())
        for name, value in attrs:
            if name in size_names:
                flat: list = []
                fam._flatten(value, flat)
                out.extend(f"{name}[{k}] of {op} (entry {i})" for k in range(len(flat)))
        out.extend(f"dim {d} of {op} (entry {i})" for d in range(len(shape)))
    return out


def _debug(message: str) -> None:
    if config.debug >= 1:
        print(message, file=sys.stderr)
