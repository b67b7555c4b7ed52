"""Named recipes (one choice per hook plus constants) and the builders that assemble them.

``resolve`` turns ``--algo`` and the per-piece overrides into an :class:`AlgorithmSpec`;
``compose`` turns a spec into a class: ``compose(spec, PrecisionLearner)`` is the learner of
that algorithm, exactly as if the user had written the mixins into its bases.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from precision_oat.errors import UserError

from .policy_loss import AlgorithmSpec, PolicyLoss
from .corrections.divergence_mask import ESTIMATORS, LEVELS
from .registry import TABLES, canonical, lookup, valid_names


@dataclass(frozen=True)
class Recipe:
    """Defaults behind one ``--algo`` name; every field can be overridden on the command line."""

    advantage: str
    objective: str
    correction: str
    reduction: str
    is_cap: Optional[float] = AlgorithmSpec.is_cap
    clip_low: float = AlgorithmSpec.clip_low
    clip_high: float = AlgorithmSpec.clip_high
    correction_cap: Optional[float] = AlgorithmSpec.correction_cap
    # One line for `--help` and the docs.
    summary: str = ""


RECIPES: dict[str, Recipe] = {
    "pg": Recipe(
        "drgrpo", "pg", "none", "constant",
        summary="IS-PG: policy gradient with one sequence-level weight π_θ/μ (the paper's best simple baseline)"),
    "token-is-pg": Recipe(
        "drgrpo", "token-is", "none", "constant",
        summary="policy gradient with a per-token weight π_θ/μ"),
    "grpo": Recipe(
        "drgrpo", "clip", "none", "constant",
        summary="Dr.GRPO: PPO clip 0.2/0.2, group-centred advantage, constant normaliser"),
    "grpo-tis": Recipe(
        "drgrpo", "clip", "token-tis", "constant", correction_cap=2.0,
        summary="GRPO × token-level truncated IS π_old/μ, C = 2"),
    "grpo-mis": Recipe(
        "drgrpo", "clip", "seq-mis", "constant", correction_cap=10.0,
        summary="GRPO × sequence-level masked IS π_old/μ, C = 10"),
    "grpo-seq-tis": Recipe(
        "drgrpo", "clip", "seq-tis", "constant", correction_cap=10.0,
        summary="GRPO × sequence-level truncated IS π_old/μ, C = 10"),
    "grpo-icepop": Recipe(
        "drgrpo", "clip", "icepop", "constant",
        summary="GRPO × IcePop: token weight π_old/μ inside [0.5, 5], tokens outside it dropped"),
    "grpo-geo-mask": Recipe(
        "drgrpo", "clip", "geo-mask", "constant",
        summary="GRPO × geometric sequence mask: responses with exp(mean_t Δ_t) outside [0.99, 1.01] dropped"),
    "grpo-divergence-mask": Recipe(
        "drgrpo", "clip", "divergence-mask", "constant",
        summary="GRPO × divergence filter: responses whose mean k3 of π_old vs μ exceeds 0.01 dropped"),
    "gspo": Recipe(
        "grpo", "gspo", "none", "seq-mean", clip_low=3e-4, clip_high=4e-4,
        summary="GSPO: clip 3e-4/4e-4 on the per-sequence geometric-mean ratio"),
    "reinforce": Recipe(
        "reinforce", "pg", "none", "constant",
        summary="REINFORCE: A = r, no baseline"),
    "rloo": Recipe(
        "rloo", "pg", "none", "constant",
        summary="RLOO: leave-one-out baseline A_i = r_i − mean_{j≠i} r_j"),
}

_PIECE_FLAGS = {
    "advantage": "--advantage",
    "objective": "--objective",
    "correction": "--correction",
    "reduction": "--reduction",
}


def _piece(kind: str, name: str) -> str:
    try:
        return canonical(kind, name)
    except KeyError:
        raise UserError(
            f"{_PIECE_FLAGS[kind]} {name}: unknown {kind}; valid names: {', '.join(valid_names(kind))}"
        ) from None


def _positive(value: Optional[float], flag: str) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise UserError(f"{flag} {value}: must be a finite number > 0")


def resolve(
    algo: str,
    *,
    advantage: Optional[str] = None,
    objective: Optional[str] = None,
    correction: Optional[str] = None,
    reduction: Optional[str] = None,
    is_cap: Optional[float] = None,
    clip_low: Optional[float] = None,
    clip_high: Optional[float] = None,
    correction_cap: Optional[float] = None,
    max_gen_length: int,
    adv_eps: float = AlgorithmSpec.adv_eps,
    **settings,
) -> AlgorithmSpec:
    """The recipe ``algo`` with every non-None argument overriding its default.

    ``settings`` are the :class:`AlgorithmSpec` fields no recipe sets (``icepop_low``, ``geo_mask_high``,
    ``divergence_measure``, …); those left out keep the spec's defaults.
    """
    if algo not in RECIPES:
        raise UserError(f"--algo {algo}: unknown recipe; valid names: {', '.join(sorted(RECIPES))}")
    recipe = RECIPES[algo]
    overrides = dict(advantage=advantage, objective=objective, correction=correction, reduction=reduction,
                     is_cap=is_cap, clip_low=clip_low, clip_high=clip_high, correction_cap=correction_cap)
    fields = {f.name: getattr(recipe, f.name) for f in dataclasses.fields(Recipe) if f.name != "summary"}
    fields.update({k: v for k, v in overrides.items() if v is not None})
    for kind in _PIECE_FLAGS:
        fields[kind] = _piece(kind, fields[kind])
    if getattr(lookup("correction", fields["correction"]), "needs_cap", False) and fields["correction_cap"] is None:
        raise UserError(
            f"--correction {fields['correction']} needs a cap and --algo {algo} sets none: pass --correction-cap C "
            "(e.g. 2 for token-level, 10 for sequence-level)"
        )
    _positive(fields["is_cap"], "--is-cap")
    if not (math.isfinite(fields["clip_low"]) and 0 < fields["clip_low"] < 1):
        raise UserError(f"--clip-low {fields['clip_low']}: must be a finite number in (0, 1)")
    _positive(fields["clip_high"], "--clip-high")
    if not (math.isfinite(adv_eps) and adv_eps >= 0):
        raise UserError(f"--adv-eps {adv_eps}: must be a finite number ≥ 0")
    _positive(fields["correction_cap"], "--correction-cap")
    _positive(max_gen_length, "--max-new-tokens")
    if all(getattr(lookup(kind, fields[kind]), "weighs_by_sampler", False) for kind in ("objective", "correction")):
        raise UserError(
            f"--objective {fields['objective']} with --correction {fields['correction']}: the objective already weighs "
            "by π_θ/μ and the correction would weigh by π_old/μ again (the sampler's weight squared); use --correction "
            "none (--is-cap C truncates the objective's weight), a mask (geo-mask, divergence-mask), or --objective clip"
        )
    spec = AlgorithmSpec(**fields, loss_constant=float(max_gen_length), adv_eps=adv_eps, **settings)
    given = {k: v for k, v in overrides.items() if v is not None and k not in _PIECE_FLAGS}
    given.update({k: v for k, v in dict(adv_eps=adv_eps, **settings).items() if v != getattr(AlgorithmSpec, k)})
    _check_read(spec, given)
    _band(spec.icepop_low, spec.icepop_high, "--icepop-low", "--icepop-high")
    _band(spec.geo_mask_low, spec.geo_mask_high, "--geo-mask-low", "--geo-mask-high")
    _divergence(spec.divergence_measure, spec.divergence_level, spec.divergence_threshold)
    return spec


def _band(low: float, high: float, low_flag: str, high_flag: str) -> None:
    """A band [low, high] on a ratio π_old/μ: positive, and holding 1 (where sampler and trainer agree)."""
    _positive(low, low_flag)
    _positive(high, high_flag)
    if not low <= 1.0 <= high:
        raise UserError(f"{low_flag} {low} {high_flag} {high}: the band must hold 1 (low ≤ 1 ≤ high), or it drops "
                        "whatever sampler and trainer agree on exactly")


def _divergence(measure: str, level: str, threshold: float) -> None:
    for value, flag, names in ((measure, "--divergence-measure", ESTIMATORS), (level, "--divergence-level", LEVELS)):
        if value not in names:
            raise UserError(f"{flag} {value}: unknown; valid names: {', '.join(names)}")
    if measure == "k1" and level == "seq-max":
        raise UserError("--divergence-measure k1 --divergence-level seq-max: k1 is signed, so its largest token "
                        "value says nothing about the size of a response's gap; use k2 or k3 with seq-max")
    _positive(threshold, "--divergence-threshold")


# The neutral choices that PolicyLoss already implements; compose leaves them out so that a
# base class overriding those hooks keeps its override.
_DEFAULTS = {"correction": "none", "reduction": "token-mean"}


def compose(spec: AlgorithmSpec, base: type = PolicyLoss) -> type:
    """A subclass of ``base`` with the spec's mixins first in its MRO.

    Order: correction, objective, advantage, reduction, base; the ``none`` correction and
    ``token-mean`` reduction are the defaults of ``PolicyLoss`` and are left out.
    """
    mixins = [
        lookup(kind, getattr(spec, kind))
        for kind in ("correction", "objective", "advantage", "reduction")
        if getattr(spec, kind) != _DEFAULTS.get(kind)
    ]
    name = "".join(m.__name__.removesuffix("Mixin") for m in mixins) + base.__name__
    doc = f"{base.__name__} with {spec.advantage} / {spec.objective} / {spec.correction} / {spec.reduction}."
    return type(name, (*mixins, base), {"__module__": __name__, "__doc__": doc})


def build_policy_loss(spec: AlgorithmSpec) -> PolicyLoss:
    """A standalone :class:`PolicyLoss` for ``spec``, with ``.algo`` set."""
    loss = compose(spec)()
    loss.algo = spec
    return loss


def _check_read(spec: AlgorithmSpec, given: dict) -> None:
    """Refuse a constant given that none of ``spec``'s pieces reads (``--algo grpo --correction-cap 2`` is plain GRPO).

    A piece that does not say what it reads (``reads`` None: one of your own) may read any, so nothing is refused.
    """
    pieces = [lookup(kind, getattr(spec, kind)) for kind in _PIECE_FLAGS]
    if any(piece.reads is None for piece in pieces):
        return
    for name, value in given.items():
        if any(name in piece.reads for piece in pieces):
            continue
        flag = "--" + name.replace("_", "-")
        readers = "; ".join(f"--{kind} {' / '.join(names)}" for kind in _PIECE_FLAGS
                            if (names := sorted(n for n, cls in TABLES[kind].items() if name in (cls.reads or ()))))
        chosen = " / ".join(getattr(spec, kind) for kind in _PIECE_FLAGS)
        shown = f"{value:g}" if isinstance(value, float) else value
        raise UserError(f"{flag} {shown}: none of this run's pieces ({chosen}) reads it, so it would change nothing; "
                        f"{readers} reads it: choose that, or drop {flag}")
