"""Earlier path of the local backend's learner and actor; see :mod:`precision_oat.backends.local`."""

from precision_oat.backends.local import PrecisionActor, PrecisionLearner

__all__ = ["PrecisionActor", "PrecisionLearner"]
