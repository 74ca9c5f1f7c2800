"""The max_pool2d step's kernel (ops/pool.py), in Numba.

One pass over the output; each window is clipped to the input once (the -inf padding is
never read), then scanned in row-major order. A NaN in a window wins, as NumPy's max in the
reference. Serial, for the reason given in lowering._conv_step.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy", boundscheck=False)
def max_pool2d(x, out, kh, kw, sh, sw, ph, pw):
    """out (N, C, oH, oW) = the window maxima of x (N, C, H, W), both C-contiguous."""
    n_img, c_in, h_in, w_in = x.shape
    oh, ow = out.shape[2], out.shape[3]
    xf, of = x.reshape(-1), out.reshape(-1)
    for plane in range(n_img * c_in):
        base, obase = plane * h_in * w_in, plane * oh * ow
        for p in range(oh):
            h0 = p * sh - ph
            i0, i1 = max(0, -h0), min(kh, h_in - h0)
            for q in range(ow):
                w0 = q * sw - pw
                j0, j1 = max(0, -w0), min(kw, w_in - w0)
                m = -np.inf
                for i in range(i0, i1):
                    row = base + (h0 + i) * w_in + w0
                    for j in range(j0, j1):
                        v = xf[row + j]
                        if v > m or v != v:
                            m = v
                        if m != m:
                            break
                of[obase + p * ow + q] = m
