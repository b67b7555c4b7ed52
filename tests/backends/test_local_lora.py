"""LoRA on the built-in learner: the sampler gets exactly the merged weights W + (α/r)·B·A."""

import json

import torch

from precision_oat.backends.local.driver import build_learner, train
from precision_oat.rl.settings import learner_settings
from tests.conftest import tiny_model
from tests.backends.helpers import make_args
from tests.backends.test_local_learner import rollout_of

RANK, ALPHA = 4, 8.0


def test_exported_weights_are_base_plus_scaled_adapter_product():
    base = {n: p.detach().clone() for n, p in tiny_model().named_parameters()}
    args = make_args(dtype="fp32", algo="grpo", num_samples=4, lora_rank=RANK, lora_alpha=ALPHA, learning_rate=1e-2)
    learner = build_learner(tiny_model(), learner_settings(args, torch.device("cpu")))
    learner.update(rollout_of(tiny_model()), step=0)  # B starts at zero: one step makes B·A non-zero

    adapters = {n: p.detach() for n, p in learner.model.named_parameters() if "lora_" in n}
    exported = dict(learner.export_weights())
    # Every target projection of both layers is adapted, and only those are exported.
    assert len(exported) == 2 * 7 and all(n.endswith("proj.weight") for n in exported)
    for name, merged in exported.items():
        prefix = "base_model.model." + name.removesuffix(".weight")
        a, b = adapters[f"{prefix}.lora_A.default.weight"], adapters[f"{prefix}.lora_B.default.weight"]
        assert b.abs().max() > 0, name
        expected = base[name] + (ALPHA / RANK) * (b @ a)
        torch.testing.assert_close(merged, expected, atol=1e-6, rtol=1e-5)
        assert not torch.equal(merged, base[name])


def test_fp32_lora_run_has_no_mismatch_after_the_first_update(tmp_path, embedded_policy_dir):
    # Step 2 samples with the weights the learner pushed after step 1: if the sampler missed the
    # merged adapters, its μ would come from the step-0 weights and differ from the trainer's π_old.
    train(make_args(model=str(embedded_policy_dir), algo="grpo", dtype="fp32", lora_rank=RANK, lora_alpha=ALPHA,
                    learning_rate=1e-2, output_dir=str(tmp_path)))
    first, second = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert first["train/optimizer_steps"] == 1 and first["train/grad_norm"] > 0
    assert second["mismatch/abs_logp_diff_mean"] < 1e-5, second["mismatch/abs_logp_diff_mean"]


def test_with_lora_dropout_a_resume_ends_where_an_uninterrupted_run_ends(tmp_path, embedded_policy_dir):
    # Dropout draws from torch's generator at every training forward; a checkpoint in between (the first part's last
    # step here, or any --save-every / --save-every-minutes) must not move those draws.
    common = dict(model=str(embedded_policy_dir), algo="grpo", dtype="fp32", learning_rate=5e-3, lora_rank=RANK,
                  lora_dropout=0.3)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(make_args(**common, steps=3, output_dir=str(straight)))
    train(make_args(**common, steps=1, output_dir=str(resumed)))
    train(make_args(**common, steps=3, output_dir=str(resumed), resume=True))
    a, b = ([json.loads(line) for line in (f / "metrics.jsonl").read_text().splitlines()] for f in (straight, resumed))
    assert [r["step"] for r in b] == [1, 2, 3]
    for ra, rb in zip(a, b):
        assert (ra["loss/policy"], ra["train/grad_norm"]) == (rb["loss/policy"], rb["train/grad_norm"]), ra["step"]


def test_adding_lora_raises_no_deprecation_warning_from_peft():
    import warnings

    from precision_oat.learners.lora import add_lora

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        add_lora(tiny_model(), make_args(lora_rank=RANK).lora)
    assert not [w for w in caught if issubclass(w.category, FutureWarning)], [str(w.message) for w in caught]
