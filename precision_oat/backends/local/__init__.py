"""The local backend: the embedded driver, in one process or several under ``torchrun``.

The learners and the actor it runs live in :mod:`precision_oat.learners` and
:mod:`precision_oat.rl.actor`; they are re-exported here for subclassing.
"""

from precision_oat.learners.builtin import PrecisionLearner
from precision_oat.rl.actor import PrecisionActor

__all__ = ["PrecisionActor", "PrecisionLearner"]
