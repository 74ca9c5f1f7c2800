"""L-BFGS (``torch.optim.LBFGS``): limited-memory BFGS over all parameters as one flat vector.

Nocedal and Wright, *Numerical Optimization* (2006), Algorithm 7.4 (the two-loop recursion),
with PyTorch's step: up to ``max_iter`` iterations per ``step(closure)``, a fixed step length
(``lr``; at the very first iteration ``min(1, 1 / |g|_1) * lr``), the curvature pair kept only
when ``y.s > 1e-10``, ``H_diag = y.s / y.y``, and PyTorch's stopping tests (``tolerance_grad`` on
the largest gradient element, ``tolerance_change`` on the directional derivative, the step and
the loss change, ``max_eval`` closure calls). The vectors are lazy tensors; each test that
decides the control flow reads one number (a sync point), as PyTorch's ``float()`` does.
``line_search_fn="strong_wolfe"`` is not implemented (UnsupportedOpError).
"""

from __future__ import annotations

from lazyvic import modes
from lazyvic.errors import UnsupportedOpError
from lazyvic.indexing import cat
from lazyvic.optim.optimizer import Optimizer, check_hyperparameters


class LBFGS(Optimizer):
    """``LBFGS(params, lr=1, max_iter=20, max_eval=None (max_iter * 5 / 4), tolerance_grad=1e-7,
    tolerance_change=1e-9, history_size=100, line_search_fn=None)``; ``step(closure)`` needs a
    closure that clears the gradients, computes the loss, calls ``backward()`` and returns the
    loss. One parameter group only (as PyTorch). Its state (directions, curvature pairs) lives
    under the first parameter, as PyTorch's.

    Raises:
        ValueError: a negative lr, more than one parameter group, or no closure.
        UnsupportedOpError: a line search.
    """

    def __init__(
        self,
        params,
        lr: float = 1.0,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ):
        check_hyperparameters("LBFGS", lr=lr)
        if line_search_fn is not None:
            raise UnsupportedOpError(f"LBFGS: line_search_fn={line_search_fn!r} is not implemented (use None)")
        defaults = dict(
            lr=lr,
            max_iter=max_iter,
            max_eval=max_iter * 5 // 4 if max_eval is None else max_eval,
            tolerance_grad=tolerance_grad,
            tolerance_change=tolerance_change,
            history_size=history_size,
            line_search_fn=line_search_fn,
        )
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")

    def _flat_grad(self):
        return cat([p.grad.reshape(-1) if p.grad is not None else p.detach().reshape(-1) * 0.0 for p in self._params()])

    def _add(self, t: float, d) -> None:
        offset = 0
        for p in self._params():
            n = p.numel()
            p._assign(p + d[offset : offset + n].reshape(p.shape) * t)
            offset += n

    def step(self, closure=None):
        """Up to ``max_iter`` L-BFGS iterations; returns the closure's first loss."""
        if closure is None:
            raise ValueError("LBFGS.step needs a closure that re-evaluates the model and returns the loss")
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tol_grad, tol_change, history = group["tolerance_grad"], group["tolerance_change"], group["history_size"]
        st = self.state[self._params()[0]]
        st.setdefault("func_evals", 0)
        st.setdefault("n_iter", 0)

        def evaluate():
            with modes.enable_grad():
                return closure()

        orig_loss = evaluate()
        loss = float(orig_loss)
        evals = 1
        st["func_evals"] += 1
        with modes.no_grad():
            g = self._flat_grad()
            if float(g.abs().max()) <= tol_grad:
                return orig_loss
            d, t = st.get("d"), st.get("t")
            old_dirs, old_stps, ro, h_diag = st.get("old_dirs"), st.get("old_stps"), st.get("ro"), st.get("H_diag")
            prev_g, prev_loss = st.get("prev_flat_grad"), st.get("prev_loss")
            n_iter = 0
            while n_iter < max_iter:
                n_iter += 1
                st["n_iter"] += 1
                if st["n_iter"] == 1:
                    d, old_dirs, old_stps, ro, h_diag = -g, [], [], [], 1.0
                else:
                    y, s = g - prev_g, d * t
                    ys = (y * s).sum()
                    if float(ys) > 1e-10:
                        if len(old_dirs) == history:
                            old_dirs.pop(0), old_stps.pop(0), ro.pop(0)
                        old_dirs.append(y), old_stps.append(s), ro.append(1.0 / ys)
                        h_diag = ys / (y * y).sum()
                    al = [None] * len(old_dirs)
                    q = -g
                    for i in range(len(old_dirs) - 1, -1, -1):  # the two-loop recursion
                        al[i] = (old_stps[i] * q).sum() * ro[i]
                        q = q - old_dirs[i] * al[i]
                    r = q * h_diag
                    for i in range(len(old_dirs)):
                        be = (old_dirs[i] * r).sum() * ro[i]
                        r = r + old_stps[i] * (al[i] - be)
                    d = r
                prev_g, prev_loss = g, loss
                t = (min(1.0, 1.0 / float(g.abs().sum())) if st["n_iter"] == 1 else 1.0) * lr
                if float((g * d).sum()) > -tol_change:  # not a descent direction
                    break
                self._add(t, d)
                done = n_iter == max_iter
                if not done:
                    loss = float(evaluate())
                    g = self._flat_grad()
                    evals += 1
                    st["func_evals"] += 1
                if done or evals >= max_eval or float(g.abs().max()) <= tol_grad:
                    break
                if float((d * t).abs().max()) <= tol_change or abs(loss - prev_loss) < tol_change:
                    break
            st.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=h_diag)
            st.update(prev_flat_grad=prev_g, prev_loss=prev_loss)
        return orig_loss


__all__ = ["LBFGS"]
