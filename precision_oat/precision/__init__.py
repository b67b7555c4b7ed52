"""Numerical precision: the policy, loss scaling, the fp32 lm_head, the checked weight sync, mismatch metrics."""

from precision_oat.precision.policy import Precision, PrecisionError

__all__ = ["Precision", "PrecisionError"]
