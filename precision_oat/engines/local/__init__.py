"""The embedded engine: the whole RL loop in one process, on CPU or one GPU."""

from precision_oat.engines.local.actor import PrecisionActor
from precision_oat.engines.local.learner import PrecisionLearner

__all__ = ["PrecisionActor", "PrecisionLearner"]
