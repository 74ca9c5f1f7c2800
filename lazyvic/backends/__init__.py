"""``lazyvic.backends``: the switches of PyTorch's ``torch.backends`` that scripts set first.

They exist so that such scripts run: ``backends.cudnn.benchmark = True``,
``backends.cudnn.deterministic = True``, ``backends.cuda.matmul.allow_tf32 = True``,
``backends.mps.is_available()`` ... Every flag can be read and set, and NONE changes what lazyvic
computes:

- ``cudnn``: lazyvic does not use cuDNN (its convolutions are its own kernels and cuBLAS
  products), so ``enabled``, ``benchmark``, ``deterministic`` and ``allow_tf32`` have no effect;
  ``cudnn.is_available()`` is False. lazyvic is deterministic already (the same seed gives the
  same bits); ``lazyvic.use_deterministic_algorithms`` is its own switch.
- ``cuda.matmul.allow_tf32`` / ``allow_fp16_reduced_precision_reduction`` /
  ``allow_bf16_reduced_precision_reduction`` and the ``enable_*_sdp`` switches: float32
  products are computed in float32 (reduced precision only under ``lazyvic.autocast``) and
  attention is a composition of primitives, so these have no effect either.
- ``mps.is_available()`` / ``is_built()``: False (no Metal backend); ``mkldnn.is_available()``:
  False (no oneDNN); ``mkldnn.enabled`` is accepted.
"""

from lazyvic.backends import cuda, cudnn, mkldnn, mps
