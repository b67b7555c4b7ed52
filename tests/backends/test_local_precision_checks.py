"""The local backend's precision checks: the automatic fp16 preflight, the precision contract and the
checked weight sync, on the embedded policy and copies of it scaled towards fp16's limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from precision_oat.backends.local import driver
from precision_oat.backends.local.driver import train
from precision_oat.backends.local.loop import prompts_of_step
from precision_oat.errors import UserError
from precision_oat.lab.preflight import run_preflight
from precision_oat.precision.policy import PrecisionError
from precision_oat.precision.weight_sync import WeightSyncError
from precision_oat.rl.actor import encode_prompt
from precision_oat.samplers.kv_cache import KVCacheSampler
from precision_oat.tasks.arithmetic import ArithmeticTask
from tests.backends.helpers import make_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _scaled_policy(source, folder, low: float, high: float, responses: bool):
    """The embedded policy with layer 1's down_proj scaled (the residual stream carries it) until the fp16
    headroom the preflight measures on the run's first prompts lies between ``low`` and ``high``; with
    ``responses``, each prompt followed by the response the run samples after it, as the run's own preflight
    measures them. What a response adds depends on the CPU's kernels (2% on one, 68% on another), so a policy
    meant to sit just inside fp16 is placed by that measurement itself."""
    model = AutoModelForCausalLM.from_pretrained(source).float()
    tokenizer = AutoTokenizer.from_pretrained(source)
    task, args = ArithmeticTask(), make_args()
    prompts = [encode_prompt(task, tokenizer, e)
               for e in prompts_of_step(task.train_set(), 0, args.rollout.prompts_per_step, args.train.seed)]
    sampling = driver.preflight_responses(args.rollout, args.train.seed, tokenizer) if responses else None
    target = (low * high) ** 0.5
    for _ in range(8):
        headroom = run_preflight(model, prompts, initial_loss_scale=1.0, device="cpu",
                                 responses=sampling)["min_headroom"]["headroom"]
        if low < headroom < high:
            break
        with torch.no_grad():
            model.model.layers[1].mlp.down_proj.weight.mul_(headroom / target)
    else:
        pytest.fail(f"could not bring the preflight's headroom into {low:g}x–{high:g}x (last {headroom:.3g}x)")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def near_overflow(embedded_policy_dir, tmp_path_factory):
    """fp16 still holds it where the run's preflight looks, and the default 2x margin refuses it."""
    return _scaled_policy(embedded_policy_dir, tmp_path_factory.mktemp("near"), 1.4, 1.75, responses=True)


def test_fp16_run_passes_the_preflight_and_records_the_contract(tmp_path, embedded_policy_dir, capsys):
    train(make_args(model=str(embedded_policy_dir), steps=1, output_dir=str(tmp_path)))
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "preflight.json").read_text())
    assert report["prompts"] == 8 and report["fp16_forward"]["finite"] and report["min_headroom"]["headroom"] > 2
    # Each prompt is measured with a response of at most --max-new-tokens 4 sampled after it.
    assert 8 <= report["response_tokens"] <= 8 * 4
    assert (tmp_path / "preflight.txt").read_text().startswith("fp16 preflight · 8 prompts")
    assert "fp16 preflight: ok · 8 of the run's first prompts (" in out and "least headroom" in out
    contract = json.loads((tmp_path / "config.json").read_text())["precision_contract"]
    assert contract == {"sampler": "fp16", "trainer_compute": "fp16", "master_weights": "fp32",
                        "weight_sync": "fp16", "lm_head": "fp16"}
    assert ("precision contract: sampler fp16 · trainer compute fp16 · master weights fp32 · weight sync fp16 · "
            "lm_head fp16") in out


def test_bf16_run_has_no_preflight(tmp_path, embedded_policy_dir):
    train(make_args(model=str(embedded_policy_dir), steps=1, dtype="bf16", output_dir=str(tmp_path)))
    assert not (tmp_path / "preflight.json").exists()
    assert json.loads((tmp_path / "config.json").read_text())["precision_contract"]["weight_sync"] == "bf16"


def test_fp16_run_below_the_margin_is_refused_unless_skipped_and_resume_does_not_recheck(tmp_path, near_overflow):
    with pytest.raises(PrecisionError) as e:
        train(make_args(model=str(near_overflow), steps=1, output_dir=str(tmp_path / "refused")))
    message = str(e.value)
    assert isinstance(e.value, UserError) and "\n" not in message
    assert "below the 2x margin (--fp16-preflight-margin)" in message and "--skip-fp16-preflight" in message
    report = json.loads((tmp_path / "refused" / "preflight.json").read_text())
    assert 1.2 < report["min_headroom"]["headroom"] < 2.0  # fits in fp16, below the margin
    assert not (tmp_path / "refused" / "checkpoints").exists()

    # A lower margin accepts it; so does the skip flag, which runs no preflight at all.
    train(make_args(model=str(near_overflow), steps=1, fp16_preflight_margin=1.2, output_dir=str(tmp_path / "m")))
    skipped = tmp_path / "skipped"
    summary = train(make_args(model=str(near_overflow), steps=1, skip_fp16_preflight=True, output_dir=str(skipped)))
    assert summary["steps"] == 1 and not (skipped / "preflight.json").exists()
    # Resuming does not run the preflight again (it would refuse without the flag).
    summary = train(make_args(model=str(near_overflow), steps=2, resume=True, output_dir=str(skipped)))
    assert summary["steps"] == 2 and not (skipped / "preflight.json").exists()


def test_cli_refuses_an_overflowing_model_in_one_line(tmp_path, embedded_policy_dir):
    # About 3x past fp16's limit on the prompts (a largest activation near 2e5).
    model = _scaled_policy(embedded_policy_dir, tmp_path / "model", 0.25, 0.45, responses=False)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-m", "precision_oat.main", "--model", str(model), "--steps", "1",
                          "--prompts-per-step", "4", "--num-samples", "2", "--wandb-mode", "disabled",
                          "--output-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=180, env=env)
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("error: fp16 preflight: model.layers.1")
    assert "headroom" in last and "--skip-fp16-preflight" in last and "Traceback" not in run.stderr
    assert (tmp_path / "run" / "preflight.txt").is_file()


class SkipsOneTensor(KVCacheSampler):
    """A sampler whose load_weights silently drops one weight."""

    def load_weights(self, weights):
        super().load_weights((n, w) for n, w in weights if n != "model.layers.0.mlp.up_proj.weight")


def test_a_sync_that_drops_a_tensor_stops_the_run_naming_it(tmp_path, embedded_policy_dir, monkeypatch):
    def build(policy, precision, device, rollout, seed, **_):
        return SkipsOneTensor(policy.model, precision.sampler_dtype, device, policy.tokenizer.pad_token_id)

    monkeypatch.setattr(driver, "build_sampler", build)
    with pytest.raises(WeightSyncError, match=r"model\.layers\.0\.mlp\.up_proj\.weight is not the master weights "
                                              r"cast to torch\.float16"):
        train(make_args(model=str(embedded_policy_dir), steps=1, learning_rate=1e-2, output_dir=str(tmp_path)))
