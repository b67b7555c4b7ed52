"""Learners: the shared RL step (:class:`~precision_oat.rl.step.RLStep`) on a training stack.

    builtin             ``PrecisionLearner``: compute weights in the trainer dtype, fp32 masters, our loss scaler
    deepspeed_learner   ``DeepSpeedLearner``: DeepSpeed's engine, optimiser and loss scaler under the same step
    lora                LoRA adapters, merged into the exported weights

Subclass one with the algorithm's mixins before it (``class L(SeqMISMixin, ClipMixin, GRPOMixin,
TokenMeanMixin, PrecisionLearner)``) and run it with ``train(args, learner_class=L)``.
"""

from precision_oat.learners.builtin import PrecisionLearner

__all__ = ["PrecisionLearner"]
