"""The fp16 preflight on real tiny models: headroom, the fp16 forward, gradient underflow, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from precision_oat.errors import UserError
from precision_oat.lab.preflight import (
    FP16_MAX,
    OVERRIDE_FLAG,
    check,
    format_report,
    fp16_gradient_counts,
    run_preflight,
    with_responses,
)
from precision_oat.lab.preflight.__main__ import cli
from precision_oat.precision.policy import PrecisionError
from precision_oat.samplers.sampler import SamplingParams
from tests.conftest import tiny_model

# Six prompts of 5..10 tokens (vocab 32, no token 0), so micro-batches mix lengths and need padding.
PROMPTS = [[1 + (3 * i + j) % 31 for j in range(5 + i)] for i in range(6)]


def _preflight(model, loss_scale: float = 2.0**16, prompts=PROMPTS, micro_batch_size: int = 4) -> dict:
    return run_preflight(model, prompts, initial_loss_scale=loss_scale, device="cpu",
                         micro_batch_size=micro_batch_size)


def _row(report: dict, name: str) -> dict:
    return next(r for r in report["modules"] if r["name"] == name)


def _padded(prompts):
    width = max(map(len, prompts))
    ids = torch.tensor([p + [0] * (width - len(p)) for p in prompts])
    mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in prompts])
    return ids, mask


def test_tiny_model_has_large_headroom_and_passes_check():
    model = tiny_model()
    report = _preflight(model)
    check(report, margin=8.0)
    names = {r["name"] for r in report["modules"]}
    assert {"model.embed_tokens", "model.layers.0", "model.layers.1.self_attn", "model.layers.1.mlp",
            "model.layers.1.mlp.down_proj", "model.layers.0.input_layernorm", "model.norm"} <= names
    # The output projection's output is the logits, recorded as such a chunk of positions at a time.
    assert "lm_head" not in names
    assert report["fp16_forward"] == {"finite": True, "first_nonfinite": None, "nonfinite_modules": [],
                                      "logits_finite": True}
    assert report["min_headroom"]["headroom"] > 1000
    assert report["tokens"] == sum(map(len, PROMPTS))
    # The logits' max over the real positions that predict a token, computed directly in fp32.
    ids, mask = _padded(PROMPTS)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
    expected = logits[:, :-1][mask[:, 1:].bool()].abs().max().item()
    assert report["logits"]["max_abs"] == pytest.approx(expected, rel=1e-6)
    assert report["logits"]["headroom"] == pytest.approx(FP16_MAX / expected, rel=1e-6)
    headrooms = [r["headroom"] for r in report["modules"]]
    assert headrooms == sorted(headrooms), "worst modules first"
    table = format_report(report)
    assert table.splitlines()[2].split()[0] == "logits"
    assert report["modules"][0]["name"] in table.splitlines()[3]


def test_response_positions_are_measured_with_the_prompts():
    model = tiny_model()
    params = SamplingParams(max_new_tokens=6, seed=0)
    sequences = with_responses(model, PROMPTS, params, "cpu")
    assert all(s[: len(p)] == p and len(s) > len(p) for s, p in zip(sequences, PROMPTS))
    report = run_preflight(model, PROMPTS, initial_loss_scale=2.0**16, device="cpu", micro_batch_size=4,
                           responses=params)
    assert report["response_tokens"] == sum(map(len, sequences)) - sum(map(len, PROMPTS)) > 0
    assert report["tokens"] == sum(map(len, sequences))
    # The same numbers as a preflight of the prompts with their responses written out.
    written_out = _preflight(model, prompts=sequences)
    assert report["modules"] == written_out["modules"] and report["gradients"] == written_out["gradients"]
    # The responses add positions: no maximum falls below the prompts' own, and some rise above it.
    prompts_only = {r["name"]: r["max_abs"] for r in _preflight(model)["modules"]}
    assert all(r["max_abs"] >= prompts_only[r["name"]] * (1 - 1e-6) for r in report["modules"])
    assert any(r["max_abs"] > prompts_only[r["name"]] * (1 + 1e-3) for r in report["modules"])


def test_padding_positions_are_left_out_of_every_maximum():
    model = tiny_model("llama")  # untied: a huge padding embedding does not reach the logits
    with torch.no_grad():
        model.model.embed_tokens.weight[0] = 1e3
    report = _preflight(model, micro_batch_size=8)
    used = sorted({t for p in PROMPTS for t in p})
    expected = model.model.embed_tokens.weight[used].abs().max().item()
    assert _row(report, "model.embed_tokens")["max_abs"] == pytest.approx(expected, rel=1e-6)
    assert expected < 1.0


def test_scaled_up_mlp_fails_check_naming_the_module_and_fp16_forward_overflows():
    model = tiny_model()
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.mul_(1e3)
        model.model.layers[0].mlp.down_proj.weight.mul_(1e4)
    report = _preflight(model)
    assert _row(report, "model.layers.0.mlp.down_proj")["max_abs"] > FP16_MAX
    assert _row(report, "model.layers.0.mlp.up_proj")["max_abs"] < FP16_MAX / 8
    forward = report["fp16_forward"]
    assert forward["finite"] is False and forward["logits_finite"] is False
    assert forward["first_nonfinite"] == "model.layers.0.mlp.down_proj"
    with pytest.raises(PrecisionError) as e:
        check(report, margin=8.0)
    message = str(e.value)
    assert isinstance(e.value, UserError) and "\n" not in message
    assert "model.layers.0.mlp.down_proj" in message and OVERRIDE_FLAG in message and "--dtype bf16" in message
    worst = report["min_headroom"]
    assert worst["headroom"] < 1 and f"{worst['max_abs']:.3g}" in message


def test_fp16_weights_that_overflow_fail_check_despite_fp32_headroom():
    # 1e6 × weights of std 0.02 exceed 65504 once cast to fp16, while the fp32 outputs stay near 1e4.
    model = tiny_model()
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(1e6)
    report = _preflight(model)
    assert 2.0 < report["min_headroom"]["headroom"] < 8.0
    assert report["fp16_forward"]["first_nonfinite"] == "model.layers.0.mlp.down_proj"
    first = r"forward in fp16 produces inf/nan, first in model\.layers\.0\.mlp\.down_proj"
    with pytest.raises(PrecisionError, match=first):
        check(report, margin=2.0)


def test_fp16_gradient_counts_hand_derived():
    grad = torch.tensor([0.0, 2.0**-26, 1.5 * 2.0**-25, 2.0**-24, 2.0**-15, 1.0, -(2.0**-26)])
    # Scale 1: ±2**-26 round to zero (at most half of 2**-24); 1.5·2**-25 rounds up to 2**-24;
    # everything but 0 and 1.0 is below 2**-14.
    assert fp16_gradient_counts(grad, 1.0) == {"numel": 7, "nonzero": 6, "flush_to_zero": 2, "below_normal": 5,
                                               "overflow": 0}
    # Scale 2**10: smallest is ±2**-16 (subnormal, kept); below 2**-14: ±2**-16 and 0.75·2**-14.
    assert fp16_gradient_counts(grad, 2.0**10) == {"numel": 7, "nonzero": 6, "flush_to_zero": 0, "below_normal": 3,
                                                   "overflow": 0}
    # Scale 2**17: 1.0 becomes 131072 > 65504.
    assert fp16_gradient_counts(grad, 2.0**17)["overflow"] == 1


def test_gradient_underflow_share_grows_when_the_loss_scale_is_1():
    # A final norm of 1e-6 makes the logits near-uniform and every gradient ~1e-7: below fp16's
    # subnormals unless the loss is scaled.
    model = tiny_model()
    with torch.no_grad():
        model.model.norm.weight.mul_(1e-6)
    unscaled, scaled = _preflight(model, loss_scale=1.0), _preflight(model, loss_scale=2.0**16)
    g1, g16 = unscaled["gradients"], scaled["gradients"]
    assert g1["numel"] == g16["numel"] == sum(p.numel() for p in model.parameters())
    assert g1["nonzero"] == g16["nonzero"] > 0
    assert g1["loss"] == g16["loss"] == pytest.approx(torch.log(torch.tensor(32.0)).item(), rel=1e-4)
    assert g1["flush_to_zero_share"] > 0.5 > 0.01 > g16["flush_to_zero_share"]
    assert g1["below_normal_share"] > g16["below_normal_share"]
    assert g1["flush_to_zero_share"] == g1["flush_to_zero"] / g1["nonzero"]
    worst = g1["worst_parameters"]
    assert len(worst) == 5 and worst[0]["flush_to_zero_share"] >= worst[-1]["flush_to_zero_share"]
    assert "round to zero" in format_report(unscaled)


def test_model_passed_in_is_unchanged():
    model = tiny_model().half().train()
    model.lm_head.weight.requires_grad_(False)  # tied with the embedding: both frozen
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = _preflight(model)
    assert report["fp16_forward"]["finite"]
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) and after[k].dtype == torch.float16 for k in before)
    assert model.training and not model.model.embed_tokens.weight.requires_grad
    assert all(p.grad is None for p in model.parameters())
    assert all(not m._forward_hooks for m in model.modules())


def test_bad_inputs_raise_user_errors():
    model = tiny_model()
    with pytest.raises(UserError, match="prompt_ids: token id 40"):
        _preflight(model, prompts=[[1, 2, 40]])
    with pytest.raises(UserError, match="--initial-loss-scale 0"):
        _preflight(model, loss_scale=0)
    with pytest.raises(UserError, match="--margin"):
        check(_preflight(model), margin=0)


def test_cli_prints_the_table_and_writes_preflight_json(embedded_policy_dir, tmp_path):
    # No --model: the embedded policy, read from the cache the fixture filled (PRECISION_OAT_CACHE).
    run = subprocess.run([sys.executable, "-m", "precision_oat.lab.preflight", "--num-prompts", "8",
                          "--device", "cpu", "--output-dir", str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "fp16 preflight · 8 prompts" in run.stdout and "fp16 forward: finite" in run.stdout
    report = json.loads((tmp_path / "preflight.json").read_text(), parse_constant=pytest.fail)
    assert report["prompts"] == 8 and report["fp16_forward"]["finite"]
    assert report["gradients"]["loss_scale"] == 2.0**16
    assert report["min_headroom"]["headroom"] > 8


def test_cli_measures_the_counting_tasks_prompts(byte_model_dir, tmp_path):
    from precision_oat.tasks.counting import CountingTask

    report = cli(["--model", str(byte_model_dir), "--task", "counting", "--num-prompts", "2", "--response-tokens", "4",
                  "--device", "cpu", "--output-dir", str(tmp_path)])
    task = CountingTask()
    # The byte tokenizer gives one token per byte of the rendered prompts.
    prompt_tokens = sum(len(task.render(ex).encode()) for ex in task.train_set()[:2])
    assert report["prompts"] == 2 and report["tokens"] - report["response_tokens"] == prompt_tokens


def test_cli_exits_with_one_error_line_when_the_check_fails(embedded_policy_dir, tmp_path):
    with pytest.raises(SystemExit) as e:
        cli(["--model", str(embedded_policy_dir), "--num-prompts", "4", "--device", "cpu", "--margin", "1e9",
             "--output-dir", str(tmp_path)])
    assert str(e.value.code).startswith("error: fp16 preflight: ") and OVERRIDE_FLAG in str(e.value.code)
    assert (tmp_path / "preflight.json").is_file()


def test_an_overflowing_gradient_is_explained_not_refused():
    from precision_oat.lab.preflight import overflow_note

    note = overflow_note({"overflow": 3, "loss_scale": 65536.0})
    assert "3 gradient values overflow at loss scale 65536" in note
    assert "would be skipped" in note and "train/skipped_steps" in note


def test_a_negative_response_length_is_refused_in_one_line(tmp_path):
    # 0 measures the prompts alone; before, -1 did the same without a word.
    with pytest.raises(SystemExit) as e:
        cli(["--response-tokens", "-1", "--device", "cpu", "--output-dir", str(tmp_path / "out")])
    assert str(e.value.code) == "error: --response-tokens -1: must be an integer ≥ 0"
    assert not (tmp_path / "out").exists()
