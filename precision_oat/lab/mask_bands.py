"""The bands IcePop and the geometric mask would need on a sampler–trainer pair, read from the lab's arrays.

IcePop drops a token whose π/μ leaves [α, β]; the geometric mask drops an answer whose per-token geometric mean
g = exp(ρ / L) leaves [lo, hi]. A band narrower than the pair's own gap drops most of a batch: the geometric mask's
default [0.99, 1.01] beside FP8 rollouts dropped 91% of the answers of a run (docs/results.md §4f). For each arm the
lab reports the central band that holds :data:`HELD` of the tokens (of the answers) and the share each mask's
default band keeps, so that a band can be set from the gap it has to absorb; its console lines give the flags of a
band that keeps 98% (widened to hold 1, as a mask's band must).

    band/token_ratio_low, …_high    the central 98% of the tokens' π/μ
    band/icepop_default_kept        the share of tokens inside IcePop's default [0.5, 5]
    band/geo_ratio_low, …_high      the central 98% of the answers' g
    band/geo_mask_default_kept      the share of answers inside the geometric mask's default [0.99, 1.01]
"""

from __future__ import annotations

import math

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


def flags_to_keep(low: float, high: float, low_flag: str, high_flag: str) -> str:
    """The flags of a band that holds [low, high] and 1 (a mask's band must hold 1), rounded outward to 3 decimals."""
    return (f"{low_flag} {math.floor(min(low, 1.0) * 1000) / 1000:g} "
            f"{high_flag} {math.ceil(max(high, 1.0) * 1000) / 1000:g}")


def describe(bands: dict[str, float]) -> list[str]:
    """Two console lines, tokens then answers: where 98% of them lie, what the default band keeps, and the flags of
    a band that keeps 98%."""
    held = f"{HELD:.0%}"
    token_low, token_high = bands["band/token_ratio_low"], bands["band/token_ratio_high"]
    geo_low, geo_high = bands["band/geo_ratio_low"], bands["band/geo_ratio_high"]
    return [f"tokens: {held} have π/μ in [{token_low:.4g}, {token_high:.4g}]; IcePop's default [{ICEPOP[0]:g}, "
            f"{ICEPOP[1]:g}] keeps {bands['band/icepop_default_kept']:.1%} (to keep {held}: "
            f"{flags_to_keep(token_low, token_high, '--icepop-low', '--icepop-high')})",
            f"answers: {held} have a geometric-mean π/μ in [{geo_low:.4g}, {geo_high:.4g}]; the geometric mask's "
            f"default [{GEO_MASK[0]:g}, {GEO_MASK[1]:g}] keeps {bands['band/geo_mask_default_kept']:.1%} (to keep "
            f"{held}: {flags_to_keep(geo_low, geo_high, '--geo-mask-low', '--geo-mask-high')})"]
