"""The embedded engine: the whole RL loop in one process, on CPU or one GPU.

``PrecisionLearner`` is the built-in learner (fp32 masters, our loss scaler);
``DeepSpeedLearner`` (``engines.local.deepspeed_learner``) puts DeepSpeed under the same
step. The actor is the shared one, re-exported here for subclassing.
"""

from precision_oat.actor import PrecisionActor
from precision_oat.engines.local.learner import PrecisionLearner

__all__ = ["PrecisionActor", "PrecisionLearner"]
