"""The local backend: the embedded driver, in one process or several under ``torchrun``.

    driver.py   ``train(args, learner_class=None, actor_class=None)``: what happens once per run
    loop.py     the step loop, and the end of a run

The learners and the actor it runs live in :mod:`precision_oat.learners` and
:mod:`precision_oat.rl.actor`; they are re-exported here for subclassing.
"""

from precision_oat.backends.local.driver import train
from precision_oat.learners.builtin import PrecisionLearner
from precision_oat.rl.actor import PrecisionActor

__all__ = ["PrecisionActor", "PrecisionLearner", "train"]
