"""The bands IcePop and the geometric mask would need on a sampler–trainer pair, read from the lab's arrays.

IcePop drops a token whose π/μ leaves [α, β]; the geometric mask drops an answer whose per-token geometric mean
g = exp(ρ / L) leaves [lo, hi]. A band narrower than the pair's own gap drops most of a batch: the geometric mask's
default [0.99, 1.01] beside FP8 rollouts dropped 91% of the answers of a run (docs/results.md §4f). For each arm the
lab reports the central band that holds :data:`HELD` of the tokens (of the answers) and the share each mask's
default band keeps, so that a band can be set from the gap it has to absorb.

    band/token_ratio_low, …_high    the central 98% of the tokens' π/μ
    band/icepop_default_kept        the share of tokens inside IcePop's default [0.5, 5]
    band/geo_ratio_low, …_high      the central 98% of the answers' g
    band/geo_mask_default_kept      the share of answers inside the geometric mask's default [0.99, 1.01]
"""

from __future__ import annotations

import numpy as np

from precision_oat.algorithms.policy_loss import AlgorithmSpec

HELD = 0.98
ICEPOP = (AlgorithmSpec.icepop_low, AlgorithmSpec.icepop_high)
GEO_MASK = (AlgorithmSpec.geo_mask_low, AlgorithmSpec.geo_mask_high)


def central_band(values: np.ndarray, held: float = HELD) -> tuple[float, float]:
    """The interval from the (1 − held)/2 to the (1 + held)/2 quantile of ``values`` (linear interpolation)."""
    tail = (1.0 - held) / 2
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


def kept(values: np.ndarray, low: float, high: float) -> float:
    """The share of ``values`` inside [low, high], both ends kept, as both masks keep them."""
    return float(np.mean((values >= low) & (values <= high)))


def mask_bands(histograms: dict[str, np.ndarray]) -> dict[str, float]:
    """The keys of the module docstring from :func:`~precision_oat.precision.mismatch_metrics.mismatch_histograms`'
    arrays; empty when no response has a token."""
    if not len(histograms["mismatch/token_logp_diff"]):
        return {}
    token_ratio = np.exp(histograms["mismatch/token_logp_diff"])
    geo_ratio = np.exp(histograms["mismatch/seq_logratio"] / histograms["mismatch/seq_length"])
    out = {}
    for name, values in (("token_ratio", token_ratio), ("geo_ratio", geo_ratio)):
        out[f"band/{name}_low"], out[f"band/{name}_high"] = central_band(values)
    out["band/icepop_default_kept"] = kept(token_ratio, *ICEPOP)
    out["band/geo_mask_default_kept"] = kept(geo_ratio, *GEO_MASK)
    return out


def describe(bands: dict[str, float]) -> str:
    """One console line: where 98% of the tokens and answers lie, and what each default band keeps."""
    return (f"{HELD:.0%} of tokens' π/μ in [{bands['band/token_ratio_low']:.4g}, {bands['band/token_ratio_high']:.4g}] "
            f"(IcePop's [{ICEPOP[0]:g}, {ICEPOP[1]:g}] keeps {bands['band/icepop_default_kept']:.1%}); "
            f"{HELD:.0%} of answers' geometric-mean π/μ in [{bands['band/geo_ratio_low']:.4g}, "
            f"{bands['band/geo_ratio_high']:.4g}] (the geometric mask's [{GEO_MASK[0]:g}, {GEO_MASK[1]:g}] keeps "
            f"{bands['band/geo_mask_default_kept']:.1%})")
