"""``torch.nn.utils``: gradient clipping, parameters as one vector, weight and spectral
normalization, and (in :mod:`.rnn`) variable-length sequences."""

from lazyvic.nn.utils import rnn
from lazyvic.nn.utils.clip_grad import clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_, get_total_norm
from lazyvic.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters
from lazyvic.nn.utils.spectral_norm import remove_spectral_norm, spectral_norm
from lazyvic.nn.utils.weight_norm import remove_weight_norm, weight_norm

__all__ = [
    "clip_grad_norm_",
    "clip_grad_value_",
    "clip_grads_with_norm_",
    "get_total_norm",
    "parameters_to_vector",
    "remove_spectral_norm",
    "remove_weight_norm",
    "rnn",
    "spectral_norm",
    "vector_to_parameters",
    "weight_norm",
]
