"""The precision policy: resolution of --dtype and its overrides, validation, and what it renders."""

from __future__ import annotations

import pytest
import torch

from precision_oat.args import PrecisionArgs
from precision_oat.precision.policy import LossScaling, Precision, PrecisionError

DTYPES = ["fp16", "bf16", "fp32"]
TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


# --- resolution ---


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtype_sets_sampler_and_trainer_with_fp32_masters(dtype):
    p = Precision.from_flags(dtype)
    assert (p.sampler, p.trainer, p.master) == (dtype, dtype, "fp32")
    assert (p.sampler_dtype, p.trainer_dtype, p.master_dtype) == (TORCH[dtype], TORCH[dtype], torch.float32)


@pytest.mark.parametrize("trainer, mode", [("fp16", "dynamic"), ("bf16", "none"), ("fp32", "none")])
def test_default_loss_scaling_depends_on_the_trainer_dtype(trainer, mode):
    p = Precision.from_flags(trainer)
    assert p.loss_scaling.mode == mode
    assert p.loss_scaling.enabled == (mode != "none")


def test_per_side_overrides_win_over_dtype():
    p = Precision.from_flags("bf16", sampler_dtype="fp16")
    assert (p.sampler, p.trainer) == ("fp16", "bf16")
    # Loss scaling follows the trainer, not --dtype and not the sampler.
    assert p.loss_scaling.mode == "none"
    assert p.vllm_dtype() == "float16" and p.trainer_dtype == torch.bfloat16

    p = Precision.from_flags("fp32", trainer_dtype="fp16")
    assert (p.sampler, p.trainer) == ("fp32", "fp16")
    assert p.loss_scaling.mode == "dynamic"
    assert p.vllm_dtype() == "float32" and p.trainer_dtype == torch.float16


def test_precision_args_build_passes_every_flag_through():
    p = PrecisionArgs(
        dtype="bf16", sampler_dtype="fp32", trainer_dtype="fp16", master_dtype="fp32", loss_scaling="static",
        initial_loss_scale=512.0, loss_scale_growth_interval=400, loss_scale_growth_factor=4.0,
        loss_scale_backoff_factor=0.25, loss_scale_hysteresis=3, min_loss_scale=0.5,
    ).build()
    assert (p.sampler, p.trainer, p.master) == ("fp32", "fp16", "fp32")
    assert p.loss_scaling == LossScaling("static", 512.0, 400, 4.0, 0.25, 3, 0.5)


def test_reasons_record_where_each_side_came_from():
    p = Precision.from_flags("fp16")
    assert p.reasons[:2] == ("sampler fp16: --dtype fp16", "trainer fp16: --dtype fp16")
    assert p.reasons[2].startswith("master fp32: fp32 master weights")
    assert p.reasons[3].startswith("loss scaling dynamic: fp16's 5 exponent bits")

    p = Precision.from_flags("bf16", sampler_dtype="fp16", trainer_dtype="fp32", loss_scaling="static")
    assert p.reasons[:2] == ("sampler fp16: --sampler-dtype", "trainer fp32: --trainer-dtype")
    assert p.reasons[3] == "loss scaling static: --loss-scaling"

    assert Precision.from_flags("bf16").reasons[3] == "loss scaling none: bf16 has fp32's exponent range"
    pure = Precision.from_flags("bf16", master_dtype="bf16")
    assert pure.reasons[2] == "master bf16: --master-dtype (pure low-precision training)"
    assert pure.describe().splitlines() == [f"  {r}" for r in pure.reasons]


# --- renderers ---


def test_deepspeed_fp16_dynamic_section():
    p = Precision.from_flags("fp16", initial_scale=2.0**16, growth_interval=400, hysteresis=3, min_scale=0.25)
    assert p.deepspeed_config() == {
        "fp16": {
            "enabled": True,
            "loss_scale": 0,  # DeepSpeed's spelling of "dynamic"
            "initial_scale_power": 16,  # 2**16 = 65536
            "loss_scale_window": 400,
            "hysteresis": 3,
            "consecutive_hysteresis": False,
            "min_loss_scale": 0.25,
        }
    }


def test_deepspeed_fp16_static_section_fixes_loss_scale_to_the_scale():
    section = Precision.from_flags("fp16", loss_scaling="static", initial_scale=1024.0).deepspeed_config()["fp16"]
    assert section["enabled"] is True
    assert section["loss_scale"] == 1024.0
    assert section["initial_scale_power"] == 10


def test_deepspeed_unscaled_fp16_is_a_static_scale_of_one():
    p = Precision.from_flags("fp16", loss_scaling="none", allow_unscaled_fp16=True)
    assert p.deepspeed_config()["fp16"]["loss_scale"] == 1.0


def test_deepspeed_bf16_and_fp32_sections():
    assert Precision.from_flags("bf16").deepspeed_config() == {"bf16": {"enabled": True}}
    assert Precision.from_flags("fp32").deepspeed_config() == {}


@pytest.mark.parametrize("dtype, vllm", [("fp16", "float16"), ("bf16", "bfloat16"), ("fp32", "float32")])
def test_vllm_dtype_names_the_sampler_dtype(dtype, vllm):
    assert Precision.from_flags(dtype).vllm_dtype() == vllm


# --- validation ---


def test_precision_error_is_a_value_error():
    # main.cli reports ValueErrors in one line; PrecisionError must be one of them.
    assert issubclass(PrecisionError, ValueError)


@pytest.mark.parametrize("override", [{}, {"trainer_dtype": "fp16"}])
def test_fp16_trainer_without_loss_scaling_is_refused(override):
    dtype = "bf16" if override else "fp16"
    with pytest.raises(PrecisionError) as e:
        Precision.from_flags(dtype, loss_scaling="none", **override)
    assert "--loss-scaling" in str(e.value) and "--allow-unscaled-fp16" in str(e.value)


def test_allow_unscaled_fp16_lets_it_through():
    p = Precision.from_flags("fp16", loss_scaling="none", allow_unscaled_fp16=True)
    assert p.trainer == "fp16" and not p.loss_scaling.enabled


def test_bf16_trainer_accepts_loss_scaling_none():
    assert Precision.from_flags("bf16", loss_scaling="none").loss_scaling.mode == "none"


@pytest.mark.parametrize(
    "trainer, master",
    [("fp32", "fp16"), ("fp32", "bf16"), ("fp16", "bf16"), ("bf16", "fp16")],
)
def test_master_weights_narrower_than_or_incomparable_with_the_trainer_are_refused(trainer, master):
    # bf16 has fewer mantissa bits than fp16, fp16 a narrower range than bf16: neither holds the other.
    with pytest.raises(PrecisionError) as e:
        Precision.from_flags(trainer, master_dtype=master)
    assert "--master-dtype" in str(e.value) and "--trainer-dtype" in str(e.value)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_master_equal_to_trainer_or_fp32_is_accepted(dtype):
    assert Precision.from_flags(dtype, master_dtype=dtype).master_dtype == TORCH[dtype]
    assert Precision.from_flags(dtype, master_dtype="fp32").master == "fp32"


def test_fp16_masters_are_refused_because_adamw_would_divide_by_zero():
    with pytest.raises(PrecisionError, match="--master-dtype fp16: AdamW"):
        Precision.from_flags("fp16", master_dtype="fp16")
    # What the refusal says: AdamW on fp16 weights keeps fp16 moments, and a zero or small gradient gives 0/0 or x/0.
    weights = torch.nn.Parameter(torch.tensor([1.0, 0.5, 0.25], dtype=torch.float16))
    adamw = torch.optim.AdamW([weights], lr=1e-6)
    weights.grad = torch.tensor([1e-4, 1e-5, 0.0], dtype=torch.float16)
    adamw.step()
    assert not weights.isfinite().any()


def test_deepspeed_refuses_low_precision_masters():
    with pytest.raises(PrecisionError, match="--master-dtype fp32"):
        Precision.from_flags("bf16", master_dtype="bf16").deepspeed_config()


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_deepspeed_refuses_loss_scaling_it_would_drop(dtype, mode):
    # The built-in learner scales a bf16/fp32 loss as asked; DeepSpeed's config has no scaler outside its fp16 section.
    p = Precision.from_flags(dtype, loss_scaling=mode, initial_scale=1024.0)
    assert p.loss_scaling.enabled
    why = "fp32 needs none" if dtype == "fp32" else "bf16 has fp32's exponent range"
    for chosen_by in ("--backend oat", "--learner deepspeed"):
        with pytest.raises(PrecisionError, match=f"^--loss-scaling {mode} with --trainer-dtype {dtype}") as refused:
            p.check_deepspeed(chosen_by)
        assert f"leave --loss-scaling unset ({why})" in str(refused.value)


def test_deepspeed_needs_a_power_of_two_initial_dynamic_scale():
    p = Precision.from_flags("fp16", initial_scale=1000.0)  # fine for the local backend
    with pytest.raises(PrecisionError, match="--initial-loss-scale"):
        p.deepspeed_config()


@pytest.mark.parametrize(
    "scaler",
    [
        {"backoff_factor": 1.0},
        {"backoff_factor": 0.0},
        {"backoff_factor": 1.5},
        {"growth_factor": 1.0},
        {"growth_factor": 0.5},
    ],
)
def test_bad_backoff_or_growth_factor_is_refused(scaler):
    with pytest.raises(PrecisionError) as e:
        Precision.from_flags("fp16", **scaler)
    assert "--loss-scale-backoff-factor" in str(e.value) and "--loss-scale-growth-factor" in str(e.value)


@pytest.mark.parametrize("scaler", [{"initial_scale": 0.0}, {"min_scale": 0.0}, {"growth_interval": 0}])
def test_non_positive_scale_settings_are_refused(scaler):
    with pytest.raises(PrecisionError, match="--initial-loss-scale, --min-loss-scale and --loss-scale-growth-interval"):
        Precision.from_flags("fp16", **scaler)


def test_unknown_dtype_names_its_flag():
    with pytest.raises(PrecisionError, match="--sampler-dtype"):
        Precision(sampler="fp8")  # type: ignore[arg-type]
