"""Training–inference mismatch: how far the sampler's μ is from the trainer's π on the same tokens."""

from precision_oat.precision.mismatch_metrics import POSITION_BUCKETS, PROB_BUCKETS, mismatch_breakdown, mismatch_histograms, mismatch_metrics

__all__ = ["POSITION_BUCKETS", "PROB_BUCKETS", "mismatch_breakdown", "mismatch_histograms", "mismatch_metrics"]
