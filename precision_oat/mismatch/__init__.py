"""Training–inference mismatch: how far the sampler's μ is from the trainer's π on the same tokens."""

from .metrics import mismatch_histograms, mismatch_metrics

__all__ = ["mismatch_histograms", "mismatch_metrics"]
