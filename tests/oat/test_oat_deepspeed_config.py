"""The DeepSpeed config Oat's strategy builds, with our precision sections, read back by DeepSpeed.

fp16 is checked as a config (DeepSpeed builds no fp16 engine without a GPU); bf16 and fp32
engines run in test_oat_learner.py.
"""

import pytest
from deepspeed.runtime.config import DeepSpeedConfig
from deepspeed.runtime.fp16.loss_scaler import (
    CONSECUTIVE_HYSTERESIS,
    DELAYED_SHIFT,
    INITIAL_LOSS_SCALE,
    MIN_LOSS_SCALE,
    SCALE_WINDOW,
)

from precision_oat.backends.oat.strategy import PrecisionStrategy, get_precision_strategy


def strategy_for(oat_args, *flags):
    # One visible GPU is declared so that fp16 passes the CPU refusal; nothing here needs one.
    _, strategy = get_precision_strategy(oat_args("--sampler", "builtin", *flags, cuda_devices=1))
    assert isinstance(strategy, PrecisionStrategy)
    return strategy


def test_fp16_section_carries_the_loss_scaling_knobs(oat_args):
    strategy = strategy_for(
        oat_args, "--dtype", "fp16", "--initial-loss-scale", "1024", "--loss-scale-growth-interval", "400",
        "--loss-scale-hysteresis", "1", "--min-loss-scale", "0.5",
        "--prompts-per-step", "2", "--num-samples", "4", "--micro-batch-size", "2",
    )
    config = strategy.get_ds_train_config(is_wrapped=True)
    assert "bf16" not in config
    assert config["fp16"] == {
        "enabled": True,
        "loss_scale": 0,  # DeepSpeed's spelling of "dynamic"
        "initial_scale_power": 10,  # 2**10 = 1024
        "loss_scale_window": 400,
        "hysteresis": 1,
        "consecutive_hysteresis": False,
        "min_loss_scale": 0.5,
    }
    # Oat's batch fields are untouched: 8 responses per step, micro-batches of 2, ZeRO-2.
    assert (config["train_batch_size"], config["train_micro_batch_size_per_gpu"]) == (8, 2)
    assert config["zero_optimization"]["stage"] == 2

    read = DeepSpeedConfig(config)
    assert read.fp16_enabled and not read.bfloat16_enabled
    assert read.loss_scale == 0 and read.initial_dynamic_scale == 1024
    assert read.dynamic_loss_scale_args == {
        INITIAL_LOSS_SCALE: 1024, SCALE_WINDOW: 400, DELAYED_SHIFT: 1, CONSECUTIVE_HYSTERESIS: False, MIN_LOSS_SCALE: 0.5,
    }
    assert read.gradient_accumulation_steps == 4


def test_fp16_static_scale(oat_args):
    strategy = strategy_for(oat_args, "--dtype", "fp16", "--loss-scaling", "static", "--initial-loss-scale", "128")
    read = DeepSpeedConfig(strategy.get_ds_train_config(is_wrapped=True))
    assert read.fp16_enabled and read.loss_scale == 128


@pytest.mark.parametrize("dtype, bf16", [("bf16", True), ("fp32", False)])
def test_bf16_and_fp32_sections(oat_args, dtype, bf16):
    strategy = strategy_for(oat_args, "--dtype", dtype)
    config = strategy.get_ds_train_config(is_wrapped=True)
    assert "fp16" not in config
    assert config.get("bf16") == ({"enabled": True} if bf16 else None)
    read = DeepSpeedConfig(config)
    assert (read.fp16_enabled, read.bfloat16_enabled) == (False, bf16)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_reference_model_config_has_the_same_precision(oat_args, dtype):
    strategy = strategy_for(oat_args, "--dtype", dtype)
    train, reference = strategy.get_ds_train_config(is_wrapped=True), strategy.get_ds_eval_config()
    assert {k: reference.get(k) for k in ("fp16", "bf16")} == {k: train.get(k) for k in ("fp16", "bf16")}
    # Oat runs the reference model without ZeRO partitioning below stage 3.
    assert reference["zero_optimization"]["stage"] == 0
