"""Symbolic sizes: integers that stand for every value of a dimension or an offset.

A plan compiled for symbolic sizes runs for every binding of its symbols that satisfies its
guards. :class:`Sym` is an integer expression (a polynomial over size symbols, with floor
division and remainder as opaque atoms) that also carries a *hint*: its value for the trace
being lowered. Lowering code computes with Syms as with ints: arithmetic stays symbolic, and a
comparison, ``bool()`` or ``int()`` is answered from the hints and recorded as a *guard* (the
predicate the answer relied on), unless the answer holds for every size (identical
expressions; a difference whose sign is fixed for sizes >= 2). So decisions taken while
lowering (a dimension is 1, two strides agree, an index stays inside a padded range) are
checked again when the plan is bound to other sizes. This is PyTorch's SymInt with size hints
and guards, in miniature (torch/fx/experimental/symbolic_shapes.py).

Every size symbol is assumed to be at least 2 (PyTorch's 0/1 specialization: a dimension of
size 0 or 1 changes broadcasting and loop structure, so those sizes get plans of their own).
Offset symbols (a slice start) are only assumed >= 0.

Guards are collected by :func:`recording`; heuristics that may read a hint without making it a
condition of the plan (a kernel is large enough to run in parallel) use :func:`hint`.
"""

from __future__ import annotations

import contextlib
import operator

# -- polynomials ---------------------------------------------------------------------------
# A polynomial is a tuple of (monomial, coefficient) pairs sorted by monomial, coefficients
# non-zero; a monomial is a tuple of (atom, power) pairs sorted by atom. An atom is a symbol
# name (str) or a tuple ("//" | "%", numerator polynomial, denominator polynomial). The empty
# monomial is the constant term.

_CONST = ()


def _poly(terms: dict) -> tuple:
    return tuple(sorted(((m, c) for m, c in terms.items() if c), key=_mono_key))


def _atom_key(atom):
    return (0, atom) if isinstance(atom, str) else (1, repr(atom))


def _mono_key(item):
    mono = item[0]
    return (len(mono), tuple((_atom_key(a), p) for a, p in mono))


def _const_poly(value: int) -> tuple:
    return ((_CONST, value),) if value else ()


def _add(a: tuple, b: tuple, sign: int = 1) -> tuple:
    terms = dict(a)
    for m, c in b:
        terms[m] = terms.get(m, 0) + sign * c
    return _poly(terms)


def _mono_mul(m1: tuple, m2: tuple) -> tuple:
    powers = dict(m1)
    for atom, p in m2:
        powers[atom] = powers.get(atom, 0) + p
    return tuple(sorted(powers.items(), key=lambda ap: _atom_key(ap[0])))


def _mul(a: tuple, b: tuple) -> tuple:
    terms: dict = {}
    for m1, c1 in a:
        for m2, c2 in b:
            m = _mono_mul(m1, m2)
            terms[m] = terms.get(m, 0) + c1 * c2
    return _poly(terms)


def _as_const(p: tuple):
    if not p:
        return 0
    if len(p) == 1 and p[0][0] == _CONST:
        return p[0][1]
    return None


def _mono_div(m: tuple, d: tuple):
    """``m / d`` when the monomial d divides m, else None."""
    powers = dict(m)
    for atom, p in d:
        if powers.get(atom, 0) < p:
            return None
        powers[atom] -= p
    return tuple(sorted(((a, p) for a, p in powers.items() if p), key=lambda ap: _atom_key(ap[0])))


def _exact_div(a: tuple, b: tuple):
    """``a / b`` when b is one term that divides every term of a exactly, else None."""
    if len(b) != 1:
        return None
    ((mb, cb),) = b
    terms = {}
    for m, c in a:
        q = _mono_div(m, mb)
        if q is None or c % cb:
            return None
        terms[q] = c // cb
    return _poly(terms)


def _eval(p: tuple, env: dict) -> int:
    total = 0
    for mono, c in p:
        v = c
        for atom, power in mono:
            v *= _atom_value(atom, env) ** power
        total += v
    return total


def _atom_value(atom, env: dict) -> int:
    if isinstance(atom, str):
        return env[atom]
    op, num, den = atom
    n, d = _eval(num, env), _eval(den, env)
    return n // d if op == "//" else n % d


def _render(p: tuple, name) -> str:
    if not p:
        return "0"
    parts = []
    for mono, c in p:
        factors = []
        for atom, power in mono:
            text = name(atom) if isinstance(atom, str) else _render_atom(atom, name)
            factors.extend([text] * power)
        if abs(c) != 1 or not factors:
            factors.insert(0, str(abs(c)))
        parts.append(("- " if c < 0 else "+ ") + " * ".join(factors))
    text = " ".join(parts)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


def _render_atom(atom, name) -> str:
    op, num, den = atom
    d = _as_const(den)
    return f"(({_render(num, name)}) {op} {d if d is not None else '(' + _render(den, name) + ')'})"


def _atoms(p: tuple, out: dict) -> dict:
    for mono, _ in p:
        for atom, _ in mono:
            if isinstance(atom, str):
                out.setdefault(atom, None)
            else:
                _atoms(atom[1], out)
                _atoms(atom[2], out)
    return out


# -- guards --------------------------------------------------------------------------------
class Guard:
    """A predicate ``lhs <op> 0`` over symbols that a plan relies on (``op``: == != < <= > >=).

    ``lhs`` is a polynomial; ``holds(env)`` evaluates it for a binding of the symbols."""

    __slots__ = ("poly", "op")

    _OPS = {
        "==": operator.eq,
        "!=": operator.ne,
        "<": operator.lt,
        "<=": operator.le,
        ">": operator.gt,
        ">=": operator.ge,
    }

    def __init__(self, poly: tuple, op: str):
        self.poly, self.op = poly, op

    def holds(self, env: dict) -> bool:
        return self._OPS[self.op](_eval(self.poly, env), 0)

    def render(self, name=str) -> str:
        return f"{_render(self.poly, name)} {self.op} 0"

    def __eq__(self, other):
        return isinstance(other, Guard) and (self.poly, self.op) == (other.poly, other.op)

    def __hash__(self):
        return hash((self.poly, self.op))

    def __repr__(self):
        return f"Guard({self.render()})"


_guards: list | None = None  # the guards recorded by the innermost `recording()`, or None
_lower_bounds: dict = {}  # symbol -> the smallest value it may take (2 for sizes, 0 for offsets)


@contextlib.contextmanager
def recording():
    """Collect the guards recorded inside the block; yields the (ordered, unique) list."""
    global _guards
    previous, _guards = _guards, []
    try:
        yield _guards
    finally:
        _guards = previous


def _record(guard: Guard) -> None:
    if guard not in _guards:
        _guards.append(guard)


def _min_value(p: tuple):
    """A lower bound of ``p`` over every binding (None when unknown). Exact for polynomials whose
    non-constant coefficients are all non-negative (every symbol at its lower bound); a symbol
    common to every term is factored out first (it is positive), so ``B*T - B`` is seen as
    ``B * (T - 1) >= 2``."""
    common = _common_symbols(p)
    if common:
        rest = _min_value(_exact_div(p, ((tuple((a, 1) for a in common), 1),)))
        if rest is not None and rest >= 0:
            scale = 1
            for a in common:
                scale *= _lower_bounds[a]
            return rest * scale if rest > 0 else 0
    total = 0
    for mono, c in p:
        if c < 0 and mono != _CONST:
            return None
        v = c
        for atom, power in mono:
            if not isinstance(atom, str) or atom not in _lower_bounds:
                return None
            v *= _lower_bounds[atom] ** power
        total += v
    return total


def _common_symbols(p: tuple) -> list:
    """Symbols (with a positive lower bound) that divide every term of ``p``."""
    if not p:
        return []
    shared = None
    for mono, _ in p:
        names = {a for a, _ in mono if isinstance(a, str) and _lower_bounds.get(a, 0) > 0}
        shared = names if shared is None else shared & names
    return sorted(shared or ())


def _decide(p: tuple, op: str, hint_value: int) -> bool:
    """Answer ``p <op> 0`` from the hint; record a guard unless the answer holds for all sizes."""
    c = _as_const(p)
    if c is not None:
        return Guard._OPS[op](c, 0)
    known = _certain(p)
    if known is not None and op in known:
        return known[op]
    if _guards is None:
        raise TypeError(
            f"a decision on symbolic sizes ({_render(p, str)} {op} 0) outside lowering: it would hold "
            "for one size only; lower under lazyvic.trace.symbolic.recording()"
        )
    result = Guard._OPS[op](hint_value, 0)
    _record(Guard(p, op if result else _NEGATE[op]))
    return result


def _certain(p: tuple):
    """The comparisons of ``p`` with 0 whose answer is the same for every binding."""
    lo = _min_value(p)  # p >= lo
    neg = _min_value(tuple((m, -c) for m, c in p))  # -p >= neg, i.e. p <= -neg
    if lo is not None and lo > 0:
        return {"==": False, "!=": True, "<": False, "<=": False, ">": True, ">=": True}
    if neg is not None and neg > 0:
        return {"==": False, "!=": True, "<": True, "<=": True, ">": False, ">=": False}
    known = {}
    if lo == 0:
        known.update({">=": True, "<": False})
    if neg == 0:
        known.update({"<=": True, ">": False})
    return known


_NEGATE = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


# -- Sym -----------------------------------------------------------------------------------
class Sym:
    """A symbolic integer with a hint (its value in the trace being lowered).

    Build symbols with :func:`symbol`; arithmetic with ints and Syms gives Syms (or plain ints
    when the result is a constant). Comparisons answer from the hints and record guards.
    """

    __slots__ = ("poly", "hint")

    def __init__(self, poly: tuple, hint: int):
        self.poly = poly
        self.hint = hint

    # construction ----------------------------------------------------------------------
    @staticmethod
    def make(poly: tuple, hint: int):
        c = _as_const(poly)
        return c if c is not None else Sym(poly, hint)

    # arithmetic --------------------------------------------------------------------------
    def __add__(self, other):
        o = _lift(other)
        if o is None:
            return NotImplemented
        return Sym.make(_add(self.poly, o[0]), self.hint + o[1])

    __radd__ = __add__

    def __sub__(self, other):
        o = _lift(other)
        if o is None:
            return NotImplemented
        return Sym.make(_add(self.poly, o[0], -1), self.hint - o[1])

    def __rsub__(self, other):
        o = _lift(other)
        if o is None:
            return NotImplemented
        return Sym.make(_add(o[0], self.poly, -1), o[1] - self.hint)

    def __neg__(self):
        return Sym.make(_add((), self.poly, -1), -self.hint)

    def __pos__(self):
        return self

    def __mul__(self, other):
        o = _lift(other)
        if o is None:
            return NotImplemented
        return Sym.make(_mul(self.poly, o[0]), self.hint * o[1])

    __rmul__ = __mul__

    def __floordiv__(self, other):
        o = _lift(other)
        if o is None:
            return NotImplemented
        return _divmod("//", (self.poly, self.hint), o)

    def __rfloordiv__(self, other):
        o = _lift(other)
        if o is None:
            return NotImplemented
        return _divmod("//", o, (self.poly, self.hint))

    def __mod__(self, other):
        o = _lift(other)
        if o is None:
            return NotImplemented
        return _divmod("%", (self.poly, self.hint), o)

    def __rmod__(self, other):
        o = _lift(other)
        if o is None:
            return NotImplemented
        return _divmod("%", o, (self.poly, self.hint))

    # comparisons (hint-answered, guarded) --------------------------------------------------
    def _cmp(self, other, op):
        o = _lift(other)
        if o is None:
            return NotImplemented
        return _decide(_add(self.poly, o[0], -1), op, self.hint - o[1])

    def __eq__(self, other):
        return self._cmp(other, "==")

    def __ne__(self, other):
        return self._cmp(other, "!=")

    def __lt__(self, other):
        return self._cmp(other, "<")

    def __le__(self, other):
        return self._cmp(other, "<=")

    def __gt__(self, other):
        return self._cmp(other, ">")

    def __ge__(self, other):
        return self._cmp(other, ">=")

    def __hash__(self):
        return hash(self.poly)

    def __bool__(self):
        return self._cmp(0, "!=")

    # conversions specialize: the plan is then valid for this value only ------------------
    def __index__(self):
        if _guards is None:
            raise TypeError(
                f"a symbolic size ({self.render()}) was used as an int outside lowering: bind the "
                "plan's symbols first (lazyvic.trace.symbolic.substitute)"
            )
        _decide(_add(self.poly, _const_poly(self.hint), -1), "==", 0)
        return self.hint

    __int__ = __index__

    def __repr__(self):
        return f"Sym({self.render()}, hint={self.hint})"

    def render(self, name=str) -> str:
        """Python source of the expression; ``name(symbol)`` gives each symbol's variable."""
        return _render(self.poly, name)

    def symbols(self) -> list:
        """The symbols the expression reads, in order of first appearance."""
        return list(_atoms(self.poly, {}))

    def evaluate(self, env: dict) -> int:
        return _eval(self.poly, env)


def _lift(x):
    """(polynomial, hint) of an int or a Sym; None for anything else."""
    if isinstance(x, Sym):
        return x.poly, x.hint
    if isinstance(x, int) and not isinstance(x, bool):
        return _const_poly(x), x
    if hasattr(x, "__index__") and not isinstance(x, (float, bool)):  # NumPy integers
        v = operator.index(x)
        return _const_poly(v), v
    return None


def _divmod(op: str, a: tuple, b: tuple):
    (pa, ha), (pb, hb) = a, b
    if hb == 0:
        raise ZeroDivisionError("integer division or modulo by zero (symbolic size)")
    ca, cb = _as_const(pa), _as_const(pb)
    if ca is not None and cb is not None:
        return ca // cb if op == "//" else ca % cb
    q = _exact_div(pa, pb)
    if q is not None:  # exact: a = q * b
        return Sym.make(q, ha // hb) if op == "//" else 0
    if cb is not None and cb > 0 and op == "%":
        # a constant modulus of a polynomial whose coefficients are all multiples of it
        if all(c % cb == 0 for m, c in pa if m != _CONST):
            return sum(c for m, c in pa if m == _CONST) % cb
    atom = (op, pa, pb)
    monomial = ((atom, 1),)
    return Sym(((monomial, 1),), ha // hb if op == "//" else ha % hb)


def symbol(name: str, hint: int, lower_bound: int = 2) -> Sym:
    """A new symbol ``name`` whose value in the trace being lowered is ``hint``; it may take any
    value ``>= lower_bound`` (2 for a size, 0 for an offset) in other bindings."""
    _lower_bounds[name] = lower_bound
    monomial = ((name, 1),)
    return Sym(((monomial, 1),), hint)


def hint(x) -> int:
    """The value of ``x`` (an int or a Sym) in the trace being lowered, WITHOUT making it a
    guard: for heuristics only (thread counts, chunk sizes), never for correctness."""
    return x.hint if isinstance(x, Sym) else x


def identical(a, b) -> bool:
    """Whether sizes ``a`` and ``b`` (ints, Syms, or tuples/lists of them) are the same
    expression, so equal for every binding; decided WITHOUT a guard. Sizes equal for some
    bindings only (``s0`` and 10) are not identical: for choices where "not equal" is always
    safe (whether a kernel may absorb a reduction), so that a plan need not be split at the
    sizes where two shapes happen to coincide."""
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (
            isinstance(a, (tuple, list))
            and isinstance(b, (tuple, list))
            and len(a) == len(b)
            and all(identical(x, y) for x, y in zip(a, b))
        )
    la, lb = _lift(a), _lift(b)
    if la is None or lb is None:
        return a == b
    return la[0] == lb[0]


def is_symbolic(x) -> bool:
    return isinstance(x, Sym)


def prod(values) -> int | Sym:
    """``math.prod`` that keeps Syms symbolic."""
    out = 1
    for v in values:
        out = out * v
    return out


def evaluate(x, env: dict) -> int:
    """The value of an int or a Sym for a binding ``env`` of its symbols."""
    return x.evaluate(env) if isinstance(x, Sym) else x


def all_hold(guards, env: dict) -> bool:
    return all(g.holds(env) for g in guards)


def contains_symbols(value) -> bool:
    """Whether a Sym is inside ``value`` (walked as :func:`substitute` walks it)."""
    if isinstance(value, Sym):
        return True
    if isinstance(value, (tuple, list)):
        return any(contains_symbols(v) for v in value)
    if isinstance(value, dict):
        return any(contains_symbols(v) for v in value.values())
    return False


def substituter(value, found: dict):
    """``value`` with every Sym inside replaced by its value, made once for a value substituted at
    many bindings: a function of ``vals`` (each Sym's ``poly`` -> its value for the binding) that
    rebuilds the tuples (named tuples too), lists and dicts on the way to a Sym (their own types
    kept) and keeps every other part as the same object; None when nothing inside ``value`` is
    symbolic. Every Sym met goes into ``found`` (poly -> Sym), whose values
    the caller computes once per binding. (A plan of symbolic sizes makes its steps concrete per
    binding: a TinyGPT training step's 144 symbolic steps took 2 ms through substitute.)"""
    if isinstance(value, Sym):
        poly = value.poly
        found.setdefault(poly, value)
        return lambda vals: vals[poly]
    if isinstance(value, (tuple, list)):
        parts = [(k, substituter(v, found)) for k, v in enumerate(value)]
        parts = [(k, f) for k, f in parts if f is not None]
        if not parts:
            return None
        base, kind = list(value), type(value)
        named = hasattr(value, "_fields")

        def build(vals):
            new = base.copy()
            for k, f in parts:
                new[k] = f(vals)
            if kind is list:
                return new
            return kind(*new) if named else kind(new)

        return build
    if isinstance(value, dict):
        parts = [(k, substituter(v, found)) for k, v in value.items()]
        parts = [(k, f) for k, f in parts if f is not None]
        if not parts:
            return None
        kind = type(value)

        def build_dict(vals):
            new = dict(value)
            for k, f in parts:
                new[k] = f(vals)
            return new if kind is dict else kind(new)

        return build_dict
    return None


__all__ = [
    "Guard",
    "Sym",
    "all_hold",
    "contains_symbols",
    "evaluate",
    "hint",
    "identical",
    "is_symbolic",
    "prod",
    "recording",
    "substituter",
    "symbol",
]
