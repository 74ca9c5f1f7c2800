"""Trace families: one structure, many sizes.

Two traces of the same *structure* (the same ops, inputs, ranks, dtypes and non-size
attributes) may differ in their sizes: the batch, a sequence length, the slice a loop moves
over its data. A family keeps the examples it has seen and fits a :class:`Template` to them:
which integers are constants, which are *size symbols* read from the input shapes (a dim that
changed between examples; dims that changed together share a symbol, PyTorch's "duck
sizing"), and how every size-like attribute (a reshape target, an expand shape, a slice's
bounds) follows from the symbols. An attribute that no expression explains becomes a *free*
symbol read from the attribute itself (a slice start that moves with a loop index).

The template is a hypothesis checked on every use: :meth:`Template.bind` reads the symbols from
a new trace's values and returns the binding only if every value the template predicts is the
value the trace has; a plan lowered for the template (its guards checked too) then computes
exactly what a plan for the new trace would. A trace the template does not explain is added to
the examples and the template is fitted again.

Sites are positions in a trace's flat tuple of integer values (see :func:`sites`); the fitting
works on value tuples only, so it is independent of how traces are stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lazyvic import ops as optable
from lazyvic.trace import symbolic

# Attributes whose integers are sizes or offsets (they may follow the symbols); every other
# attribute is part of the structure.
SIZE_ATTRS = {
    "reshape": ("shape",),
    "expand": ("shape",),
    "slice": ("starts", "stops"),
    "pad": ("pads",),
    "rand": ("shape",),
    "randn": ("shape",),
    "avg_pool2d_backward": ("input_size",),
    "adaptive_avg_pool2d": ("output_size",),
    "adaptive_avg_pool2d_backward": ("input_size",),
    "conv_transpose2d": ("out_hw",),  # (a strided convolution's input gradient)
}
# Attributes whose integers are offsets (they may be 0): their free symbols have lower bound 0.
OFFSET_ATTRS = {"slice": ("starts", "stops"), "pad": ("pads",)}


def _flatten(value, out: list) -> None:
    if isinstance(value, (tuple, list)):
        for v in value:
            _flatten(v, out)
    else:
        out.append(value)


def _skeleton(value):
    """``value`` with every int replaced by None (the shape of a nested size attribute)."""
    if isinstance(value, (tuple, list)):
        return tuple(_skeleton(v) for v in value)
    return None


@dataclass(frozen=True)
class Sites:
    """Where the integers of a trace are: ``values`` (flat), and for each site its kind:
    ``"input"`` (a dim of an input buffer: symbols are read there), ``"size"`` (a size
    attribute), ``"offset"`` (an offset attribute), ``"shape"`` (a derived shape: it follows from
    the others by the ops' shape rules, so templates never constrain it)."""

    signature: tuple
    values: tuple
    kinds: tuple


def sites(entries) -> Sites:
    """The structure signature and the integer sites of a trace's entries
    ``(op, attrs, inputs, shape, dtype_name)`` (``attrs`` a sorted tuple of (name, value))."""
    sig, values, kinds = [], [], []
    for op, attrs, inputs, shape, dtype in entries:
        if op in ("buffer", "scalar"):
            sig.append((op, attrs, len(shape), dtype))
            values.extend(shape)
            kinds.extend(["input" if op == "buffer" else "shape"] * len(shape))
            continue
        if op in SIZE_ATTRS:
            key = (op, attrs)
            found = _attr_sites.get(key)
            if found is None:
                found = _attr_sites[key] = _split_attrs(op, attrs)
                if len(_attr_sites) > MAX_ATTR_SITES:  # (the attributes of loops long gone)
                    _attr_sites.clear()
            attrs = found[0]
            values.extend(found[1])
            kinds.extend(found[2])
        sig.append((op, attrs, inputs, len(shape), dtype))
        values.extend(shape)
        kinds.extend(["shape"] * len(shape))
    return Sites(tuple(sig), tuple(values), tuple(kinds))


# (op, attrs) -> _split_attrs: a loop's reshapes, expands and slices repeat from step to step
# (sites of a 35-step LSTM language model's trace, about 300 entries: 1.4 -> 0.5 ms a step).
_attr_sites: dict = {}
MAX_ATTR_SITES = 1 << 16


def _split_attrs(op: str, attrs: tuple) -> tuple:
    """``(structural attrs, size values, their kinds)`` of an op with size attributes."""
    size_names, offset_names = SIZE_ATTRS[op], OFFSET_ATTRS.get(op, ())
    structural, values, kinds = [], [], []
    for name, value in attrs:
        if name in size_names:
            flat: list = []
            _flatten(value, flat)
            values.extend(flat)
            kinds.extend(["offset" if name in offset_names else "size"] * len(flat))
            structural.append((name, _skeleton(value)))
        else:
            structural.append((name, value))
    return tuple(structural), tuple(values), tuple(kinds)


# -- expressions over symbols --------------------------------------------------------------
@dataclass(frozen=True)
class Expr:
    """``coef * prod((s + add) // div for (s, add, div) in factors) + const``: a symbol, an
    affine ``a*s + b``, a pooling or strided convolution's output size ``(s + b) // d``, or a
    product of such factors (a reshape to ``oH * oW``). A factor with ``add`` 0 and ``div`` 1 is
    the symbol itself."""

    coef: int
    factors: tuple  # (symbol index, add, div) each
    const: int = 0

    def __call__(self, env: list) -> int:
        v = self.coef
        for s, add, div in self.factors:
            v *= (env[s] + add) // div
        return v + self.const


@dataclass(frozen=True)
class Same:
    """A size attribute equal to a derived shape (``site``, of an earlier entry) in every example:
    it takes the value that shape's rule gives, an exact relation where a fitted expression could
    be another that agrees on the examples (a stride-2 convolution after a 2x2 pool gives
    ``(H + 2) // 4``, and at H = 16 and 28 ``H // 4`` gives the same)."""

    site: int


@dataclass(frozen=True)
class Ratio:
    """A size attribute that is one symbol divided exactly by another in every example: the
    batch of a model whose inputs are only (B*T) and T (an ONNX graph that flattens its tokens)."""

    num: int
    den: int

    def __call__(self, env: list) -> int:
        return env[self.num] // env[self.den] if env[self.den] else -1


def _plain(i: int) -> tuple:
    return (i, 0, 1)


# Divisors tried for ``(s + b) // d`` (strides, pooling windows).
MAX_DIVISOR = 8
# Examples from which floors, quotients and lines ``a*s + b`` are fitted: with two, many
# symbols give many coincidences (a packed LSTM batch's 16 sequence lengths: ``(s + 45) // 2``
# fitted a maximum length at two sizes; a pooled ``H // 2`` was ``4*B + 8``); before, such a
# size is a free symbol, which the plan's guards relate to the others at every size.
FLOOR_EXAMPLES = 3


def _factor_values(factor: tuple, symbols: list) -> tuple:
    s, add, div = factor
    return tuple((x + add) // div for x in symbols[s])


def _fit_single(ys: tuple, symbols: list, any_slope: bool = False, floors: bool = True):
    """``ys`` as a function of one of ``symbols`` (value tuples, one value per example), or None:
    the simplest that fits, in this order: the symbol; ``s + b``; ``(s + b) // d`` or ``a*s``;
    ``a*s + b`` (then the smallest ``|b|``); an exact quotient of two symbols (:class:`Ratio`)
    ranks before a floor. Two examples fit many rules (``H // 2`` at H = 40,
    48 is also ``4*B + 8`` at B = 3, 4), and a wrong one is only found at the next size (a new
    plan). Unless ``any_slope``, ``a*s + b`` with ``b`` not 0 has ``|a|`` at most MAX_DIVISOR
    (a stride): ``(s // 2) ** 2`` at s = 40 and 48 is ``22*s - 480`` too. Without ``floors``
    (fewer than FLOOR_EXAMPLES examples), no floors, quotients or lines other than ``s + b`` and
    ``a*s``."""
    n = len(ys)
    found = []  # (rank, |b|, expression)
    for i, s in enumerate(symbols):
        if s is None:  # (a symbol not to fit to: see fit)
            continue
        if s == ys:
            return Expr(1, (_plain(i),))
        pts = [(s[k], ys[k]) for k in range(n)]
        x0, y0 = pts[0]
        for x1, y1 in pts[1:]:
            if x1 != x0:
                a, r = divmod(y1 - y0, x1 - x0)
                b = y0 - a * x0
                steep = abs(a) > MAX_DIVISOR and b != 0
                if r == 0 and a != 0 and (any_slope or not steep) and all(a * x + b == y for x, y in pts):
                    rank = 1 if a == 1 else 2 if b == 0 else 3
                    if rank < 3 or floors:
                        found.append((rank, abs(b), Expr(a, (_plain(i),), b)))
                break
        if not floors:
            continue
        for d in range(2, MAX_DIVISOR + 1):
            for b in range(y0 * d - x0, y0 * d - x0 + d):  # the b with (x0 + b) // d == y0
                if all((x + b) // d == y for x, y in zip(s, ys)):
                    found.append((2, abs(b), Expr(1, ((i, b, d),))))
                    break
        for j, t in enumerate(symbols):  # an exact quotient is likelier than a floor that fits
            if j != i and t is not None and all(v and x % v == 0 and x // v == y for x, v, y in zip(s, t, ys)):
                found.append((1.5, 0, Ratio(i, j)))
    return min(found, key=lambda f: f[:2])[2] if found else None


def _fit_product(ys: tuple, symbols: list, floors: list, generic: bool = True) -> Expr | None:
    """``ys`` as ``c * f_1 * f_2 (* f_3)`` over the factors: the symbols, the ``floors``
    ``(s, b, d)`` fitted at other sites and a stride's halves, thirds and quarters ``(s + b) // d``
    (b 0 or 1), or None. Of the products that fit, the one with the fewest floors not seen at
    other sites, then a coefficient of 1, then the fewest floors: with even sizes, ``H * W`` is
    ``4 * (H // 2) * (W // 2)`` as well, and with two examples ``(H // 2) * (W // 2)`` is
    ``H * (W // 4)``."""
    seen = [f for f in floors if f[2] != 1]
    usable = [i for i, s in enumerate(symbols) if s is not None]
    factors = [_plain(i) for i in usable] + seen
    if generic:
        factors += [(i, b, d) for i in usable for d in (2, 3, 4) for b in (0, 1) if (i, b, d) not in factors]
    values = [_factor_values(f, symbols) for f in factors]
    n = len(ys)
    best = None
    for width in (2, 3):
        for combo in _combinations(len(factors), width):
            base = [1] * n
            for k in range(n):
                for i in combo:
                    base[k] *= values[i][k]
            if base[0] and ys[0] % base[0] == 0:
                c = ys[0] // base[0]
                if c and all(c * base[k] == ys[k] for k in range(n)):
                    chosen = tuple(factors[i] for i in combo)
                    unseen = sum(f[2] != 1 and f not in seen for f in chosen)
                    rank = (unseen, c != 1, sum(f[2] != 1 for f in chosen), width)
                    if best is None or rank < best[0]:
                        best = (rank, Expr(c, chosen))
        if best is not None and best[0][:3] == (0, False, 0):
            break
    return best[1] if best else None


def _combinations(n: int, k: int):
    if k == 0:
        yield ()
        return
    for i in range(n):
        for rest in _combinations(n, k - 1):
            if not rest or rest[0] >= i:
                yield (i,) + rest


@dataclass
class Template:
    """A fitted family: for every site, how its value follows from the symbols.

    Attributes:
        symbols: per symbol, ``(site, lower_bound)``: where its value is read and the smallest
            value it may take (2 for a size read from an input dim, 0 for a free offset).
        exprs: per site, an int (a constant), an :class:`Expr`, or None (a derived shape, or
            the site a free symbol is read from).
        free: the symbols read from an attribute rather than an input dim.
    """

    symbols: list
    exprs: list
    free: set = field(default_factory=set)

    def bind(self, values: tuple) -> list | None:
        """The symbols' values for a trace with site ``values``, or None when the template does
        not explain them (a constant differs, an expression predicts another value, a size
        symbol is below its lower bound)."""
        env = [values[site] for site, _ in self.symbols]
        for v, (_, lower) in zip(env, self.symbols):
            if v < lower:
                return None
        for site, e in enumerate(self.exprs):
            if e is None:
                continue
            expected = e if isinstance(e, int) else values[e.site] if isinstance(e, Same) else e(env)
            if values[site] != expected:
                return None
        return env

    @property
    def is_static(self) -> bool:
        return not self.symbols


def fit(examples: list, kinds: tuple) -> Template:
    """Fit a template to the site values of ``examples`` (tuples of equal length, one per trace
    of the same structure) with site ``kinds`` from :func:`sites`.

    Input dims that differ between examples become size symbols (dims that change together
    share one); a size or offset attribute that differs becomes the simplest expression of the
    symbols that gives its values (:class:`Expr`), else a free symbol read from it. Derived shapes are left to
    the ops' shape rules. With one example, everything is a constant.
    """
    columns = list(zip(*examples))
    with_floors = len(examples) >= FLOOR_EXAMPLES
    symbols: list = []
    by_values: dict = {}
    exprs: list = [None] * len(kinds)
    free: set = set()
    # Size symbols: varying input dims (the first site of each distinct value tuple).
    for site, kind in enumerate(kinds):
        if kind != "input":
            continue
        col = columns[site]
        if len(set(col)) == 1:
            exprs[site] = col[0]
            continue
        if col not in by_values:
            by_values[col] = len(symbols)
            symbols.append((site, 2 if min(col) >= 2 else 0))
            continue
        exprs[site] = Expr(1, (_plain(by_values[col]),))
    sym_values = [columns[site] for site, _ in symbols]
    # Attributes: an input's dim, else a derived shape of an earlier entry, else one symbol's
    # function (the floors found, factors of products later), then products, else free symbols.
    floors: list = []
    pending = []
    derived: dict = {}  # values -> the first derived shape site that took them
    for site, kind in enumerate(kinds):
        col = columns[site]
        if kind == "shape" and len(set(col)) > 1:
            derived.setdefault(col, site)
        if kind not in ("size", "offset"):
            continue
        if len(set(col)) == 1:
            exprs[site] = col[0]
            continue
        if col not in sym_values and col in derived:
            exprs[site] = Same(derived[col])
            continue
        e = _fit_single(col, _candidates(sym_values, symbols, free, kinds, kind, with_floors), floors=with_floors)
        if e is None:
            pending.append(site)
            continue
        exprs[site] = e
        if isinstance(e, Expr) and e.factors[0][2] != 1 and e.factors[0] not in floors:
            floors.append(e.factors[0])
    for site in pending:
        col = columns[site]
        usable = _candidates(sym_values, symbols, free, kinds, kinds[site], with_floors)
        e = _fit_product(col, usable, floors, with_floors) or _fit_single(col, usable, True, with_floors)
        if e is None:  # a free symbol, read from this site
            index = len(symbols)
            symbols.append((site, 0 if kinds[site] == "offset" or min(col) < 2 else 2))
            sym_values.append(col)
            free.add(index)
            continue
        exprs[site] = e
    # The first site of each symbol is where it is read: no expression there.
    for site, _ in symbols:
        exprs[site] = None
    return Template(symbols, exprs, free)


def _candidates(sym_values: list, symbols: list, free: set, kinds: tuple, kind: str, many: bool) -> list:
    """The symbols' values a site of ``kind`` may be fitted to (None where not): all of them
    with ``many`` examples (FLOOR_EXAMPLES); with fewer, a size is not fitted to a free symbol
    read from another size (two pooled sizes that grew alike, ``W'' = H'' - 3`` at two image
    sizes, are two symbols), only an offset is (a slice's stop is its moving start + T)."""
    if many or kind == "offset":
        return sym_values
    return [v if k not in free or kinds[symbols[k][0]] == "offset" else None for k, v in enumerate(sym_values)]


def symbols_of(template: Template, values: tuple, prefix: str = "s") -> list:
    """One :class:`~lazyvic.trace.symbolic.Sym` per template symbol, named ``f"{prefix}{k}"``,
    hinted with its value in the trace whose site ``values`` are given."""
    return [symbolic.symbol(f"{prefix}{k}", values[site], lower) for k, (site, lower) in enumerate(template.symbols)]


def _value_at(template: Template, site: int, syms: list, read_from: dict, derived: dict):
    """The symbolic value of ``site``: the symbol read there, a constant, an expression, or a
    derived shape's value (``derived``: site -> the value its shape rule gave)."""
    k = read_from.get(site)
    if k is not None:
        return syms[k]
    e = template.exprs[site]
    if e is None:
        return None
    if isinstance(e, int):
        return e
    if isinstance(e, Same):
        return derived[e.site]
    if isinstance(e, Ratio):
        return syms[e.num] // syms[e.den]
    v = e.coef
    for s, add, div in e.factors:
        v = v * (syms[s] if (add, div) == (0, 1) else (syms[s] + add) // div)
    return v + e.const


def _rebuild(value, flat_iter):
    if isinstance(value, (tuple, list)):
        return tuple(_rebuild(v, flat_iter) for v in value)
    return next(flat_iter)


def symbolize(named: tuple, template: Template, syms: list) -> list:
    """The named entries of a trace with their sizes made symbolic by ``template``.

    Input shapes and size attributes take the template's values (symbols, constants or
    expressions, built from ``syms``: see :func:`symbols_of`); every other shape is computed again
    by its op's shape rule over symbolic sizes, so it follows from the inputs and attributes (the
    rules' comparisons are recorded as guards when lowering records them). Sites follow
    :func:`sites`' order.
    """
    read_from = {site: k for k, (site, _) in enumerate(template.symbols)}
    out = []
    derived: dict = {}  # site -> the symbolic value of a derived shape (for Same)
    site = 0
    for e in named:
        if e.is_input:
            shape = []
            for d in e.shape:
                v = _value_at(template, site, syms, read_from, derived)
                shape.append(d if v is None else v)
                site += 1
            out.append(e._replace(shape=tuple(shape)))
            continue
        size_names = SIZE_ATTRS.get(e.op, ())
        attrs = {}
        for name, value in e.attrs.items():
            if name in size_names:
                flat: list = []
                _flatten(value, flat)
                new = []
                for original in flat:
                    v = _value_at(template, site, syms, read_from, derived)
                    new.append(original if v is None else v)
                    site += 1
                attrs[name] = _rebuild(value, iter(new))
            else:
                attrs[name] = value
        attrs = type(e.attrs)(attrs)
        shape, _ = optable.OPS[e.op].infer(
            tuple(out[j].shape for j in e.inputs), tuple(out[j].dtype for j in e.inputs), attrs
        )
        for d in shape:
            derived[site] = d
            site += 1
        out.append(e._replace(attrs=attrs, shape=tuple(shape)))
    return out


def input_sites(entries) -> dict:
    """Site -> ``(input slot, axis)`` for every dim of a trace's input buffers (:func:`sites`'
    numbering), so a caller that knows where each input comes from can read the symbols."""
    out, site = {}, 0
    for op, attrs, _inputs, shape, _dtype in entries:
        if op == "buffer":
            for axis in range(len(shape)):
                out[site + axis] = (attrs[0], axis)
        elif op != "scalar":
            size_names = SIZE_ATTRS.get(op, ())
            for name, value in attrs:
                if name in size_names:
                    flat: list = []
                    _flatten(value, flat)
                    site += len(flat)
        site += len(shape)
    return out
