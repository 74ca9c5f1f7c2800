"""Optimizers and learning-rate schedules with PyTorch's names (``torch.optim``).

Each update rule lives in its own module, as in PyTorch (``lazyvic.optim.adam.Adam`` ...);
the base class and the state_dict logic in :mod:`lazyvic.optim.optimizer`; schedules in
:mod:`lazyvic.optim.lr_scheduler`; weight averaging in :mod:`lazyvic.optim.swa_utils`. Updates are lazy ops: they fuse into the step's plan, and
hyperparameters that change per step enter it as scalar inputs (no recompiles).
"""

from lazyvic.optim import lr_scheduler, swa_utils
from lazyvic.optim.adadelta import Adadelta
from lazyvic.optim.adagrad import Adagrad
from lazyvic.optim.adam import Adam
from lazyvic.optim.adamax import Adamax
from lazyvic.optim.adamw import AdamW
from lazyvic.optim.asgd import ASGD
from lazyvic.optim.lbfgs import LBFGS
from lazyvic.optim.nadam import NAdam
from lazyvic.optim.optimizer import Optimizer
from lazyvic.optim.radam import RAdam
from lazyvic.optim.rmsprop import RMSprop
from lazyvic.optim.rprop import Rprop
from lazyvic.optim.sgd import SGD

__all__ = [
    "Adadelta",
    "Adagrad",
    "Adam",
    "AdamW",
    "ASGD",
    "Adamax",
    "LBFGS",
    "NAdam",
    "Optimizer",
    "RAdam",
    "RMSprop",
    "Rprop",
    "SGD",
    "lr_scheduler",
    "swa_utils",
]
