"""The precision policy: which dtype each side computes in, and how fp16 stays in range.

One frozen :class:`Precision` is built from the command line and passed explicitly to
the sampler and the learner; nothing reads a dtype from a global. It renders itself into
what each engine wants (DeepSpeed config section, vLLM ``dtype``) and records *why* each dtype was chosen.

Sides:
    sampler  the copy of the weights that generates rollouts and reports μ; with ``--sampler-dtype fp8``
             vLLM's linear layers compute in FP8 (W8A8) and everything else in the trainer dtype.
    trainer  the dtype the learner's forward/backward runs in (π_old, π_θ).
    master   the dtype of the weights the optimiser updates (fp32 in mixed precision).
    lm_head  the final projection: in the side's own dtype ("same") or in fp32 on both sides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

import torch

from precision_oat.errors import UserError

DType = Literal["fp16", "bf16", "fp32"]
# What --sampler-dtype takes: a dtype, or fp8 (vLLM's linear layers in FP8 W8A8, the rest in the trainer dtype).
SamplerDType = Literal["fp8", "fp16", "bf16", "fp32"]
LossScalingMode = Literal["dynamic", "static", "none"]
LmHeadDType = Literal["same", "fp32"]
# The margin of the automatic fp16 preflight before a training run (--fp16-preflight-margin). Less
# conservative than the standalone preflight's 8x: on an H200, SmolLM2-135M-Instruct had 2.6x
# headroom and trained in fp16 without one skipped step, which 8x would have refused. 2x still
# refuses what one doubling of the largest activation seen (a longer response, a few updates)
# would overflow.
RUN_PREFLIGHT_MARGIN = 2.0
TORCH_DTYPES: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
VLLM_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
MANTISSA_BITS = {"fp16": 10, "bf16": 7, "fp32": 23}
# The flag that puts DeepSpeed in charge of training → the flag that trains without it.
DEEPSPEED_ALTERNATIVES = {"--learner deepspeed": "--learner builtin", "--backend oat": "--backend local"}


class PrecisionError(UserError):
    """An invalid precision setting; the message names the flags involved."""


@dataclass(frozen=True)
class LossScaling:
    """Loss scaling for fp16 training (semantics of DeepSpeed's dynamic loss scaler).

    The loss is multiplied by ``scale`` before backward and the gradients divided by it
    before the step. On an inf/nan gradient the step is skipped; from the ``hysteresis``-th
    such overflow on, each one multiplies the scale by ``backoff_factor`` (not below
    ``min_scale``). After ``growth_interval`` clean steps it is multiplied by
    ``growth_factor`` and the hysteresis budget refills. ``static`` keeps
    ``initial_scale`` fixed; ``none`` disables it.
    """

    mode: LossScalingMode = "none"
    initial_scale: float = 2.0**16
    growth_interval: int = 1000
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    hysteresis: int = 2
    min_scale: float = 1.0

    @property
    def enabled(self) -> bool:
        return self.mode != "none"


@dataclass(frozen=True)
class Precision:
    sampler: DType = "fp16"
    trainer: DType = "fp16"
    master: DType = "fp32"
    loss_scaling: LossScaling = LossScaling("dynamic")
    # Why each side got its dtype, in words; logged at start-up.
    reasons: tuple[str, ...] = ()
    # "fp32": sampler and trainer compute the lm_head projection and the logits in fp32.
    lm_head: LmHeadDType = "same"
    # "fp8": the sampler's linear layers run in FP8 W8A8 (vLLM's online quantization of the pushed weights).
    sampler_quantization: Optional[Literal["fp8"]] = None
    # Both sides on vLLM's batch-invariant kernels (precision_oat.precision.batch_invariance).
    batch_invariant: bool = False

    def __post_init__(self):
        if self.lm_head not in ("same", "fp32"):
            raise PrecisionError(f"--lm-head-dtype {self.lm_head}: must be one of same, fp32")
        for side in ("sampler", "trainer", "master"):
            if getattr(self, side) not in TORCH_DTYPES:
                raise PrecisionError(f"--{side}-dtype {getattr(self, side)}: must be one of fp16, bf16, fp32")
        if self.sampler_quantization not in (None, "fp8"):
            raise PrecisionError(f"sampler quantization {self.sampler_quantization}: must be fp8 or none")
        if self.sampler_quantization and self.sampler == "fp32":
            raise PrecisionError("--sampler-dtype fp8 runs the layers it does not quantize in the trainer dtype, which "
                                 "must be bf16 or fp16; add --trainer-dtype bf16 (or --dtype bf16)")
        if MANTISSA_BITS[self.master] < MANTISSA_BITS[self.trainer] or (
            {self.master, self.trainer} == {"fp16", "bf16"}
        ):
            raise PrecisionError(
                f"--master-dtype {self.master} cannot hold weights computed in --trainer-dtype {self.trainer}; "
                "use --master-dtype fp32"
            )
        if self.master == "fp16":
            raise PrecisionError(
                "--master-dtype fp16: AdamW would keep its moments in fp16, where g² of a gradient below ~2e-4 and "
                "its ε = 1e-8 both round to 0, so the first step divides by zero; use --master-dtype fp32 (fp16 "
                "compute with fp32 masters, the paper's setting)"
            )
        ls = self.loss_scaling
        if ls.mode not in ("dynamic", "static", "none"):
            raise PrecisionError(f"--loss-scaling {ls.mode}: must be one of dynamic, static, none")
        if ls.enabled:
            _check_loss_scaling(ls)

    # --- builders ---

    @classmethod
    def from_flags(
        cls,
        dtype: DType,
        *,
        sampler_dtype: Optional[SamplerDType] = None,
        trainer_dtype: Optional[DType] = None,
        master_dtype: DType = "fp32",
        loss_scaling: Optional[LossScalingMode] = None,
        allow_unscaled_fp16: bool = False,
        lm_head_dtype: LmHeadDType = "same",
        batch_invariant: bool = False,
        **scaler: float,
    ) -> "Precision":
        """Resolve ``--dtype`` and its per-side overrides into a validated policy.

        ``scaler`` takes the remaining :class:`LossScaling` fields (initial_scale, …). ``sampler_dtype`` fp8
        quantizes the sampler's linear layers and leaves the rest of it in the trainer dtype.
        """
        reasons = []
        trainer = trainer_dtype or dtype
        quantization = "fp8" if sampler_dtype == "fp8" else None
        sampler = trainer if quantization else sampler_dtype or dtype
        if quantization:
            reasons.append(f"sampler fp8: --sampler-dtype fp8, vLLM's linear layers in FP8 W8A8 (e4m3 weights, one scale "
                           f"per weight matrix, activations scaled at run time), the rest in {trainer}")
        else:
            reasons.append(f"sampler {sampler}: " + ("--sampler-dtype" if sampler_dtype else f"--dtype {dtype}"))
        reasons.append(f"trainer {trainer}: " + ("--trainer-dtype" if trainer_dtype else f"--dtype {dtype}"))
        reasons.append(
            f"master {master_dtype}: "
            + ("fp32 master weights, the optimiser never rounds updates to the trainer dtype"
               if master_dtype == "fp32" else "--master-dtype (pure low-precision training)")
        )
        if loss_scaling is None:
            loss_scaling = "dynamic" if trainer == "fp16" else "none"
            reasons.append(
                "loss scaling dynamic: fp16's 5 exponent bits underflow small gradients without it"
                if trainer == "fp16"
                else f"loss scaling none: {trainer} has fp32's exponent range"
            )
        else:
            reasons.append(f"loss scaling {loss_scaling}: --loss-scaling")
        if trainer == "fp16" and loss_scaling == "none" and not allow_unscaled_fp16:
            raise PrecisionError(
                "--loss-scaling none: fp16 training without loss scaling underflows small gradients to zero and "
                "overflows large ones; use --loss-scaling dynamic (the default for fp16) or pass --allow-unscaled-fp16"
            )
        if lm_head_dtype == "fp32":
            reasons.append("lm_head fp32: --lm-head-dtype fp32, the final projection and the logits in fp32 on both sides")
        if batch_invariant:
            reasons.append("kernels batch-invariant: --batch-invariant, vLLM's matmul, softmax and mean kernels on both "
                           "sides, whose reduction order does not depend on the batch")
        return cls(sampler, trainer, master_dtype, LossScaling(loss_scaling, **scaler), tuple(reasons), lm_head_dtype,
                   quantization, batch_invariant)

    # --- dtypes ---

    @property
    def sampler_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.sampler]

    @property
    def trainer_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.trainer]

    @property
    def master_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.master]

    @property
    def fp32_head(self) -> bool:
        return self.lm_head == "fp32"

    @property
    def uses_fp16(self) -> bool:
        """True when the sampler or the trainer computes in fp16 (what the fp16 preflight guards)."""
        return "fp16" in (self.sampler, self.trainer)

    def contract(self) -> dict[str, str]:
        """What each part computes or is stored in: recorded in config.json and printed at start-up."""
        sides = self.sampler if self.sampler == self.trainer else f"{self.sampler} (sampler) / {self.trainer} (trainer)"
        sampler = f"fp8 W8A8 linear layers, the rest {self.sampler}" if self.sampler_quantization else self.sampler
        sync = f"{self.sampler}, quantized to fp8 by vLLM at each push" if self.sampler_quantization else self.sampler
        head = f"fp32 compute from the {sides} weight" if self.fp32_head else sides
        contract = {"sampler": sampler, "trainer_compute": self.trainer, "master_weights": self.master,
                    "weight_sync": sync, "lm_head": head}
        if self.batch_invariant:
            contract["kernels"] = "batch-invariant (vLLM's, on both sides)"
        return contract

    # --- renderers ---

    def vllm_dtype(self) -> str:
        """The ``dtype=`` argument of ``vllm.LLM`` (with fp8, the dtype of the layers it does not quantize)."""
        return VLLM_DTYPES[self.sampler]

    def check_deepspeed(self, chosen_by: str) -> None:
        """Refuse what DeepSpeed's optimiser and loss scaler cannot do; ``chosen_by`` is the flag that picked DeepSpeed."""
        instead = DEEPSPEED_ALTERNATIVES[chosen_by]
        if self.master != "fp32":
            raise PrecisionError(
                f"--master-dtype {self.master}: DeepSpeed ({chosen_by}) keeps fp32 master weights; "
                f"use --master-dtype fp32, or {instead} to keep {self.master} master weights"
            )
        ls = self.loss_scaling
        if ls.enabled and self.trainer != "fp16":
            unneeded = "fp32 needs none" if self.trainer == "fp32" else f"{self.trainer} has fp32's exponent range"
            raise PrecisionError(
                f"--loss-scaling {ls.mode} with --trainer-dtype {self.trainer}: DeepSpeed ({chosen_by}) scales the loss "
                f"of an fp16 trainer only and would train unscaled; leave --loss-scaling unset ({unneeded}), or use "
                f"{instead}"
            )
        if self.trainer != "fp16" or ls.mode != "dynamic":
            return
        if ls.growth_factor != 2.0 or ls.backoff_factor != 0.5:
            raise PrecisionError(
                f"--loss-scale-growth-factor {ls.growth_factor:g} / --loss-scale-backoff-factor {ls.backoff_factor:g}: "
                f"DeepSpeed's loss scaler ({chosen_by}) always grows ×2 and backs off ×0.5; leave both at their "
                f"defaults, or use {instead}"
            )
        if not math.log2(ls.initial_scale).is_integer():
            raise PrecisionError(
                f"--initial-loss-scale {ls.initial_scale:g}: DeepSpeed ({chosen_by}) needs a power of two "
                f"(e.g. 65536), or use {instead}"
            )

    def deepspeed_config(self, chosen_by: str = "--backend oat") -> dict:
        """The ``fp16`` / ``bf16`` sections of a DeepSpeed config (empty for fp32)."""
        self.check_deepspeed(chosen_by)
        ls = self.loss_scaling
        if self.trainer == "fp16":
            power = math.log2(ls.initial_scale)
            return {
                "fp16": {
                    "enabled": True,
                    # DeepSpeed reads loss_scale 0 as "dynamic".
                    "loss_scale": 0 if ls.mode == "dynamic" else (ls.initial_scale if ls.enabled else 1.0),
                    "initial_scale_power": int(power),
                    "loss_scale_window": ls.growth_interval,
                    "hysteresis": ls.hysteresis,
                    "consecutive_hysteresis": False,
                    "min_loss_scale": ls.min_scale,
                }
            }
        if self.trainer == "bf16":
            return {"bf16": {"enabled": True}}
        return {}

    def describe(self) -> str:
        return "\n".join(f"  {r}" for r in self.reasons) or f"  sampler {self.sampler}, trainer {self.trainer}"


def describe_contract(contract: dict[str, str]) -> str:
    """A run's precision contract (:meth:`Precision.contract`, and LoRA's part) on one line, as the banner prints it."""
    labels = {"trainer_compute": "trainer compute", "master_weights": "master weights", "weight_sync": "weight sync"}
    return " · ".join(f"{labels.get(k, k)} {v}" for k, v in contract.items())


def _check_loss_scaling(ls: LossScaling) -> None:
    """The scaler's settings can train: finite positive scales, min ≤ initial, a real growth and back-off."""
    if not (math.isfinite(ls.initial_scale) and ls.initial_scale > 0 and math.isfinite(ls.min_scale)
            and ls.min_scale > 0 and ls.growth_interval > 0):
        raise PrecisionError(
            "--initial-loss-scale, --min-loss-scale and --loss-scale-growth-interval must be finite and > 0, got "
            f"{ls.initial_scale}, {ls.min_scale} and {ls.growth_interval}"
        )
    if ls.min_scale > ls.initial_scale:
        raise PrecisionError(f"--min-loss-scale {ls.min_scale}: must be ≤ --initial-loss-scale {ls.initial_scale}")
    if ls.hysteresis < 1:
        raise PrecisionError(f"--loss-scale-hysteresis {ls.hysteresis}: must be an integer ≥ 1")
    if not (0 < ls.backoff_factor < 1 < ls.growth_factor < math.inf):
        raise PrecisionError(
            "need 0 < --loss-scale-backoff-factor < 1 < --loss-scale-growth-factor < inf, got "
            f"{ls.backoff_factor} and {ls.growth_factor}"
        )
