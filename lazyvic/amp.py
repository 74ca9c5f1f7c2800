"""Mixed precision: ``lazyvic.autocast`` and the dynamic loss scaler ``GradScaler``.

autocast *emulates* half-precision products on float32 tensors (float16 and bfloat16 tensors
exist too, :mod:`lazyvic.dtypes`, and compute as PyTorch's do on the CPU): under
``lazyvic.autocast(dtype=...)`` the
float32 operands of ``matmul`` (hence ``@``, ``F.linear``, ``nn.Linear``, attention) and
``conv2d`` are rounded to the nearest float16 or bfloat16 value (the op table's
``round_float16`` / ``round_bfloat16`` primitives, lazyvic/ops/elementwise.py), and the
product accumulates in float32, as tensor cores do. Differences from PyTorch:

- the product's result stays float32 (PyTorch's is float16 or bfloat16): it is not rounded,
  and neither is what is computed from it;
- the gradient flowing into a rounded operand is rounded to the same precision (what a cast
  to half and back does to gradients), so small gradients underflow to zero as in PyTorch,
  and ``GradScaler`` has the same job;
- the default dtype is float16 on every device (PyTorch's CUDA default; its CPU default is
  bfloat16);
- float64 operands are not rounded (as in PyTorch, which casts only float32 tensors).

Every other op (softmax, layer norm, losses, reductions) runs in its own dtype, as under
PyTorch's autocast, which keeps those in float32.

``GradScaler`` follows ``torch.amp.GradScaler`` (Micikevicius et al., "Mixed Precision
Training", ICLR 2018: dynamic loss scaling): multiply the loss by a scale before backward,
unscale the gradients before the optimizer step, skip the step when a gradient is inf or
NaN and shrink the scale, and grow it after ``growth_interval`` clean steps.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable

import numpy as np

from lazyvic import dtypes as dt
from lazyvic import modes
from lazyvic.errors import DTypeError
from lazyvic.tensor import Tensor, autocast_operands  # noqa: F401 - the hook of matmul and conv2d, defined with them

__all__ = [
    "AutocastDType",
    "float16",
    "bfloat16",
    "autocast",
    "is_autocast_enabled",
    "get_autocast_dtype",
    "round_to_precision",
    "GradScaler",
]


class AutocastDType:
    """A precision autocast rounds float32 operands to (``lazyvic.float16``, ``bfloat16``):
    the rounding primitive and the format's numbers. Instances are singletons.

    Attributes:
        name: ``"float16"`` (IEEE 754 binary16) or ``"bfloat16"`` (Google Brain's format).
        op: the op-table primitive that rounds to it.
        mantissa_bits: stored mantissa bits (10, 7).
        max: the largest finite value (65504, about 3.39e38).
    """

    __slots__ = ("name", "op", "mantissa_bits", "max")
    is_floating_point = True
    itemsize = 2

    def __init__(self, name: str, op: str, mantissa_bits: int, max_value: float):
        self.name, self.op, self.mantissa_bits, self.max = name, op, mantissa_bits, max_value

    def __repr__(self) -> str:
        return f"lazyvic.{self.name}"

    def __reduce__(self):
        return (get_precision, (self.name,))


_F16 = AutocastDType("float16", "round_float16", 10, 65504.0)
_BF16 = AutocastDType("bfloat16", "round_bfloat16", 7, float((2.0 - 2.0**-7) * 2.0**127))
_BY_NAME = {"float16": _F16, "bfloat16": _BF16}
# The tensor dtypes (lazyvic.float16 is both a storage dtype and autocast's precision).
float16, bfloat16 = dt.float16, dt.bfloat16


def get_precision(x) -> AutocastDType:
    """The autocast precision named by ``x``: ``lazyvic.float16``/``bfloat16``, their names
    (``"float16"``, ``"half"``, ``"bfloat16"``), ``np.float16``, or ``torch.float16``/``bfloat16``.

    Raises:
        DTypeError: for anything else (autocast rounds to float16 or bfloat16 only).
    """
    if isinstance(x, AutocastDType):
        return x
    try:
        key = dt.get_dtype(x).name
    except DTypeError:
        key = None
    p = _BY_NAME.get(key)
    if p is None:
        raise DTypeError(f"autocast: dtype must be lazyvic.float16 or lazyvic.bfloat16, got {x!r}")
    return p


def round_to_precision(x: Tensor, dtype=float16) -> Tensor:
    """``x`` rounded to the nearest ``dtype`` value (ties to even), keeping x's shape and dtype.

    float16 is IEEE 754 binary16 (overflow to +-inf from 65520 on, subnormals below 2**-14);
    bfloat16 rounds the float32 bit pattern to its top 16 bits (float64 goes through float32).
    NaN stays NaN. Differentiable: the gradient is rounded to the same precision.

    Raises:
        DTypeError: when ``x`` is not floating point, or ``dtype`` is not float16/bfloat16.
    """
    return x.apply(get_precision(dtype).op, x)


# -- autocast -------------------------------------------------------------------------------
def get_autocast_dtype():
    """The dtype (``lazyvic.float16`` / ``bfloat16``) autocast rounds matmul/conv operands to in
    this thread, or None when off (the state lives in :mod:`lazyvic.modes`, which the front end
    reads)."""
    p = modes.autocast_precision()
    return None if p is None else dt.get_dtype(p.name)


def is_autocast_enabled() -> bool:
    return get_autocast_dtype() is not None


class autocast(contextlib.ContextDecorator):  # noqa: N801 - PyTorch's name
    """Context manager (and decorator) under which matmul and conv2d round their float32
    operands to ``dtype`` and multiply in float32; the result stays float32.

    ``with lazyvic.autocast():`` (float16), ``lazyvic.autocast(dtype=lazyvic.bfloat16)``,
    or PyTorch's spelling ``lazyvic.autocast("cuda", dtype=...)``. The state is per thread;
    contexts nest, and ``enabled=False`` turns autocast off inside. ``lazyvic.amp.autocast``
    is the same class. See the module docstring for the differences from PyTorch.

    Args:
        device_type: ``"cpu"``, ``"cuda"`` or None; accepted for PyTorch compatibility (the
            rounding is the same on both devices).
        dtype: ``lazyvic.float16`` (default) or ``lazyvic.bfloat16``, or their names.
        enabled: False turns autocast off inside the context.
        cache_enabled: accepted and ignored (lazyvic's CSE already shares a weight's rounding).

    Raises:
        DTypeError: for a dtype other than float16/bfloat16. ValueError: for an unknown device.
    """

    def __init__(
        self, device_type: str | None = None, dtype=None, enabled: bool = True, cache_enabled: bool | None = None
    ):
        if isinstance(device_type, AutocastDType) and dtype is None:
            device_type, dtype = None, device_type
        if device_type is not None and str(device_type).split(":")[0] not in ("cpu", "cuda"):
            raise ValueError(f"autocast: device_type must be 'cpu' or 'cuda', got {device_type!r}")
        self.device = device_type
        self.fast_dtype = get_precision(float16 if dtype is None else dtype)
        self.enabled = bool(enabled)
        self._cache_enabled = cache_enabled
        self._saved: list = []

    def __enter__(self):
        self._saved.append(modes.autocast_precision())
        modes.set_autocast_precision(self.fast_dtype if self.enabled else None)
        return self

    def __exit__(self, *exc) -> bool:
        modes.set_autocast_precision(self._saved.pop())
        return False

    def _recreate_cm(self):
        # Each call of a decorated function gets its own context (safe across threads and recursion).
        return autocast(self.device, self.fast_dtype, self.enabled, self._cache_enabled)

    def __repr__(self) -> str:
        return f"lazyvic.autocast(dtype={self.fast_dtype!r}, enabled={self.enabled})"


# -- GradScaler -----------------------------------------------------------------------------
_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


def _f32(x: float) -> float:
    """``x`` rounded to float32: PyTorch keeps the scale in a float32 tensor."""
    return float(np.float32(x))


class GradScaler:
    """Dynamic loss scaling, with the API and semantics of ``torch.amp.GradScaler``.

    A training step::

        with lazyvic.autocast():
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)      # unscales the grads; skips the step if one is inf/NaN
        scaler.update()             # backoff after a skipped step, growth after clean ones
        optimizer.zero_grad()

    The scale is a Python float rounded to float32 (PyTorch keeps a float32 tensor); it
    enters traces as a scalar input, so a changing scale does not recompile. Unscaling is
    lazy (it fuses into the step's plan); ``step`` syncs once to read whether a gradient is
    inf or NaN, as PyTorch's does.

    Update rule (PyTorch's ``_amp_update_scale_``): after a step with an inf/NaN gradient,
    ``scale *= backoff_factor`` and the growth tracker resets; otherwise the tracker counts
    up, and at ``growth_interval`` clean steps ``scale *= growth_factor`` (if finite) and the
    tracker resets.

    Args:
        device: ``"cpu"`` or ``"cuda"`` (PyTorch's first argument; unused here).
        init_scale: the first scale (2**16).
        growth_factor: > 1. backoff_factor: in (0, 1). growth_interval: a positive int.
        enabled: False makes every method a no-op (``scale`` returns its input,
            ``step`` calls ``optimizer.step``).

    Raises:
        ValueError: for factors or an interval out of range. TypeError: for a number as
        the first argument (use ``init_scale=``).
    """

    def __init__(
        self,
        device: str = "cpu",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        if isinstance(device, (int, float)):
            raise TypeError(
                "GradScaler: the first argument is the device, as in torch.amp.GradScaler; "
                f"pass init_scale={device!r} by keyword"
            )
        if growth_factor <= 1.0:
            raise ValueError(f"GradScaler: growth_factor must be > 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"GradScaler: backoff_factor must be in (0, 1), got {backoff_factor}")
        if int(growth_interval) != growth_interval or growth_interval <= 0:
            raise ValueError(f"GradScaler: growth_interval must be a positive int, got {growth_interval}")
        self._device = device
        self._enabled = bool(enabled)
        self._init_scale = float(init_scale)
        self._scale = _f32(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._per_optimizer: dict = {}

    # -- scaling ------------------------------------------------------------------------------
    def scale(self, outputs):
        """``outputs`` times the scale: a Tensor, or a (nested) list/tuple of Tensors, returned
        in the same structure. Raises ValueError for anything else."""
        if not self._enabled:
            return outputs

        def apply(v):
            if isinstance(v, Tensor):
                return v * self._scale
            if isinstance(v, (list, tuple)):
                return type(v)(apply(u) for u in v)
            if isinstance(v, Iterable) and not isinstance(v, (str, bytes)):
                return [apply(u) for u in v]
            raise ValueError(
                f"GradScaler.scale: outputs must be a Tensor or an iterable of Tensors, got {type(v).__name__}"
            )

        return apply(outputs)

    def _state_of(self, optimizer) -> dict:
        return self._per_optimizer.setdefault(id(optimizer), {"stage": _READY, "found_inf": None})

    def unscale_(self, optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale (in place, lazily: times the float32
        reciprocal, as PyTorch), and record whether any was inf or NaN.

        Call at most once per optimizer between ``update()`` calls (e.g. before gradient
        clipping); ``step`` calls it when you did not.

        Raises:
            RuntimeError: when called twice before ``update()``, or after ``step()``.
        """
        if not self._enabled:
            return
        st = self._state_of(optimizer)
        if st["stage"] == _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if st["stage"] == _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = _f32(1.0 / self._scale)
        flags = None
        with modes.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is None:
                        continue
                    # 0 * g is 0 for finite values and NaN for inf/NaN, so the sum is NaN iff one is.
                    bad = (g * 0.0).sum().to(dt.float32)
                    flags = bad if flags is None else flags + bad
                    g.mul_(inv_scale)
        st["found_inf"] = flags  # a lazy 0-d tensor (None: no gradients), read at step/update
        st["stage"] = _UNSCALED

    @staticmethod
    def _found_inf(st: dict) -> bool:
        flags = st["found_inf"]
        if isinstance(flags, Tensor):
            flags = st["found_inf"] = bool(math.isnan(flags.item()))  # the one sync
        return bool(flags)

    def step(self, optimizer, *args, **kwargs):
        """Unscale (if ``unscale_`` was not called), then call ``optimizer.step(*args, **kwargs)``
        unless a gradient is inf or NaN. Returns what ``optimizer.step`` returned, or None
        when the step is skipped.

        Raises:
            RuntimeError: when called twice before ``update()``, or with a ``closure``.
        """
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        st = self._state_of(optimizer)
        if st["stage"] == _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if st["stage"] == _READY:
            self.unscale_(optimizer)
        retval = None if self._found_inf(st) else optimizer.step(*args, **kwargs)
        st["stage"] = _STEPPED
        return retval

    def update(self, new_scale=None) -> None:
        """Set the scale for the next iteration: ``new_scale`` (a float or a one-element
        Tensor) if given, else PyTorch's rule (see the class docstring) applied to whether any
        optimizer unscaled since the last update saw an inf/NaN gradient.

        Raises:
            RuntimeError: when no optimizer was unscaled since the last update (and no
            ``new_scale``). ValueError: for a ``new_scale`` Tensor with more than one element.
        """
        if not self._enabled:
            return
        if new_scale is not None:
            if isinstance(new_scale, Tensor):
                if new_scale.numel() != 1:
                    raise ValueError("GradScaler.update: new_scale must be a float or a 1-element tensor")
                new_scale = new_scale.item()
            self._scale = _f32(new_scale)
        else:
            states = [st for st in self._per_optimizer.values() if st["stage"] != _READY]
            if not states:
                raise RuntimeError("No inf checks were recorded prior to update.")
            if any([self._found_inf(st) for st in states]):
                self._scale = _f32(self._scale * self._backoff_factor)
                self._growth_tracker = 0
            else:
                successful = self._growth_tracker + 1
                if successful == self._growth_interval:
                    grown = _f32(self._scale * self._growth_factor)
                    if math.isfinite(grown):
                        self._scale = grown
                    self._growth_tracker = 0
                else:
                    self._growth_tracker = successful
        self._per_optimizer = {}

    # -- accessors (PyTorch's) ------------------------------------------------------------------
    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def is_enabled(self) -> bool:
        return self._enabled

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def _get_growth_tracker(self) -> int:
        return self._growth_tracker if self._enabled else 0

    def state_dict(self) -> dict:
        """PyTorch's keys: ``scale``, ``growth_factor``, ``backoff_factor``, ``growth_interval``,
        ``_growth_tracker`` (plain numbers); ``{}`` when disabled."""
        if not self._enabled:
            return {}
        return {
            "scale": self.get_scale(),
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what :meth:`state_dict` (here or PyTorch's) returned; values may be numbers
        or one-element tensors. Raises RuntimeError for an empty dict (saved while disabled)."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved from a disabled instance of GradScaler."
            )

        def number(v):
            return v.item() if hasattr(v, "item") else v

        self._init_scale = float(number(state_dict["scale"]))
        self._scale = _f32(self._init_scale)
        self._growth_factor = float(number(state_dict["growth_factor"]))
        self._backoff_factor = float(number(state_dict["backoff_factor"]))
        self._growth_interval = int(number(state_dict["growth_interval"]))
        self._growth_tracker = int(number(state_dict["_growth_tracker"]))

    def __repr__(self) -> str:
        return (
            f"GradScaler(scale={self.get_scale()}, growth_factor={self._growth_factor}, "
            f"backoff_factor={self._backoff_factor}, growth_interval={self._growth_interval}, "
            f"enabled={self._enabled})"
        )
