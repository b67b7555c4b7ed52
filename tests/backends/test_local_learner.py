"""The embedded learner: every recipe's update, loss scaling, gradient accumulation, and the physical mismatch."""

import math

import pytest
import torch

from precision_oat.algorithms import RECIPES
from precision_oat.backends.local.driver import build_learner
from precision_oat.precision.mismatch_metrics import mismatch_metrics
from precision_oat.rl.rollout import collate
from precision_oat.rl.settings import learner_settings
from precision_oat.samplers.kv_cache import KVCacheSampler
from precision_oat.samplers.sampler import SamplingParams
from tests.conftest import tiny_model
from tests.backends.helpers import make_args

PROMPTS = [[3, 4, 5, 6], [7, 8, 9], [10, 11], [12, 13, 14, 15, 16]]


def build(model, **flags):
    args = make_args(**flags)
    return build_learner(model, learner_settings(args, torch.device("cpu")))


def rollout_of(model, n=4, seed=0, max_new_tokens=8):
    sampler = KVCacheSampler(model, torch.float32)
    completions = sampler.generate(PROMPTS, SamplingParams(n=n, max_new_tokens=max_new_tokens, seed=seed))
    # Rewards vary inside every group so that every advantage estimator gives a gradient.
    rewards = [float(i % 2) for i in range(len(completions))]
    return collate(completions, rewards, n, pad_token_id=0)


def test_injected_inf_gradient_skips_the_step_and_shrinks_the_scale():
    model = tiny_model()
    rollout = rollout_of(model)
    learner = build(model, dtype="fp16", algo="grpo", loss_scale_hysteresis=1, num_samples=4)
    masters = [m.detach().clone() for m in learner.weights.master]
    computes = [p.detach().clone() for p in learner.weights.compute]
    scale = learner.scaler.scale

    # An inf appears in one fp16 gradient, as an overflow of the scaled loss would produce.
    param = learner.weights.compute[0]
    hook = param.register_hook(lambda g: torch.full_like(g, float("inf")))
    stats = learner.update(rollout, step=0).stats
    hook.remove()

    assert stats["train/skipped_this_step"] == 1.0 and stats["train/skipped_steps"] == 1.0
    assert learner.scaler.scale == scale / 2
    assert all(torch.equal(a, b) for a, b in zip(masters, learner.weights.master))
    assert all(torch.equal(a, b) for a, b in zip(computes, learner.weights.compute))

    stats = learner.update(rollout, step=1).stats
    assert stats["train/skipped_this_step"] == 0.0 and learner.optimizer_steps == 1
    assert any(not torch.equal(a, b) for a, b in zip(masters, learner.weights.master))


@pytest.mark.parametrize("algo", sorted(RECIPES))
def test_every_recipe_updates_the_weights_in_fp16_with_finite_statistics(algo):
    model = tiny_model()
    rollout = rollout_of(model)
    learner = build(model, dtype="fp16", algo=algo, num_samples=4, learning_rate=1e-2)
    masters = [m.detach().clone() for m in learner.weights.master]
    stats = learner.update(rollout, step=0).stats
    assert stats["train/skipped_this_step"] == 0.0 and learner.optimizer_steps == 1
    assert all(math.isfinite(v) for v in stats.values()), stats
    assert any(not torch.equal(a, b) for a, b in zip(masters, learner.weights.master))


def test_gradient_accumulation_one_by_eight_equals_eight_by_one():
    base = tiny_model()
    rollout = rollout_of(base, n=2)
    results = []
    for micro in (8, 1):
        learner = build(tiny_model(), dtype="fp32", algo="grpo-tis", num_samples=2, micro_batch_size=micro,
                        max_grad_norm=None)
        # The accumulated gradient as the optimiser receives it (Adam's first step divides by
        # |g|, so the updated weights would amplify last-bit differences of near-zero entries).
        grads = []
        learner.optimizer.register_step_pre_hook(
            lambda opt, *_: grads.append([m.grad.detach().clone() for m in learner.weights.master]))
        stats = learner.update(rollout, step=0).stats
        results.append((stats["loss/policy"], grads[0]))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert abs(loss_a - loss_b) < 1e-6
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_fp32_sampler_and_learner_agree():
    model = tiny_model()
    rollout = rollout_of(model)
    learner = build(model, dtype="fp32")
    metrics = mismatch_metrics(rollout.sampler_logprobs, learner.score(rollout), rollout.response_mask)
    assert metrics["mismatch/abs_logp_diff_mean"] < 1e-5


def test_bf16_mismatch_is_several_times_fp16_and_fp32_is_near_zero(embedded_policy_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from precision_oat.tasks.arithmetic import ArithmeticTask

    tokenizer = AutoTokenizer.from_pretrained(embedded_policy_dir)
    prompts = [tokenizer(ex.question).input_ids for ex in ArithmeticTask().train_set()[:64]]
    results = {}
    for dtype in ("fp32", "fp16", "bf16"):
        model = AutoModelForCausalLM.from_pretrained(embedded_policy_dir).float()
        sampler = KVCacheSampler(model, {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype])
        completions = sampler.generate(prompts, SamplingParams(n=4, max_new_tokens=4, stop_token_ids=(1,), seed=0))
        rollout = collate(completions, [0.0] * len(completions), 4, pad_token_id=0)
        learner = build(model, dtype=dtype)
        results[dtype] = mismatch_metrics(rollout.sampler_logprobs, learner.score(rollout), rollout.response_mask)
    for key in ("mismatch/abs_logp_diff_mean", "mismatch/seq_logratio_std"):
        assert results["bf16"][key] > 3 * results["fp16"][key], (key, results)
        assert results["fp32"][key] < 1e-5, (key, results)


def rows_of_many_lengths(dtype: torch.dtype, rewards_period: int):
    """Prompts of 2–5 tokens and responses ending at a stop token, sampled in ``dtype``: rows of different lengths."""
    completions = KVCacheSampler(tiny_model(), dtype).generate(
        PROMPTS, SamplingParams(n=4, max_new_tokens=12, stop_token_ids=(1, 2, 3), seed=0))
    rollout = collate(completions, [float(i % rewards_period) for i in range(len(completions))], 4, pad_token_id=0)
    lengths = rollout.attention_mask.sum(-1)
    assert len(set(lengths.tolist())) > 2
    return rollout, lengths


def test_token_budget_micro_batches_give_the_loss_and_gradients_of_fixed_micro_batches():
    rollout, lengths = rows_of_many_lengths(torch.float32, 2)
    results = []
    for flags in (dict(micro_batch_size=3), dict(micro_batch_tokens=int(lengths.max()) * 2)):
        learner = build(tiny_model(), dtype="fp32", algo="grpo-tis", num_samples=4, max_grad_norm=None,
                        train_batch_size=8, **flags)
        grads, shapes = [], []
        learner.optimizer.register_step_pre_hook(
            lambda opt, *_: grads.append([m.grad.detach().clone() for m in learner.weights.master]))
        forward = learner.forward_logprobs
        learner.forward_logprobs = lambda ids, *a, **k: shapes.append(ids.shape) or forward(ids, *a, **k)
        stats = learner.update(rollout, step=0).stats
        results.append((stats["loss/policy"], grads, shapes))
    (loss_a, grads_a, _), (loss_b, grads_b, shapes_b) = results
    budget = int(lengths.max()) * 2
    assert all(rows * width <= budget for rows, width in shapes_b)
    assert any(rows > 2 for rows, _ in shapes_b)
    assert abs(loss_a - loss_b) < 1e-6
    assert len(grads_a) == len(grads_b) == 2
    for step_a, step_b in zip(grads_a, grads_b):
        for a, b in zip(step_a, step_b):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_cached_memory_is_released_once_before_the_optimiser_makes_its_state(monkeypatch):
    import precision_oat.rl.step as step

    events = []
    monkeypatch.setattr(step, "release_cached_memory", lambda device: events.append(("release", device.type)))
    model = tiny_model()
    learner = build(model, dtype="fp32", algo="grpo", num_samples=4, train_batch_size=8)
    learner.optimizer.register_step_pre_hook(lambda optimizer, *_: events.append(("step", len(optimizer.state))))
    rollout = rollout_of(model)
    learner.update(rollout, step=0)
    learner.update(rollout, step=1)
    # Two mini-batches a rollout: the optimiser has no state at its first step, and memory goes back only then.
    assert events == [("release", "cpu"), ("step", 0), ("step", len(learner.optimizer.state))] + \
        [("step", len(learner.optimizer.state))] * 2


@pytest.mark.parametrize("learner_kind", ["builtin", "deepspeed"])
def test_without_rescoring_each_row_is_scored_once_and_the_update_is_the_self_consistent_one(learner_kind):
    rollout = rollout_of(tiny_model(), max_new_tokens=12)
    flags = dict(dtype="fp32", algo="grpo", num_samples=4, micro_batch_size=4, learner=learner_kind)
    rescoring = build(tiny_model(), self_consistent_old_logprobs=True, **flags)
    alone = build(tiny_model(), rescore=False, **flags)
    rows_through = {}
    for name, learner in (("rescoring", rescoring), ("alone", alone)):
        rows_through[name] = []
        # The scoring runs the model's body, then its head one chunk at a time.
        learner.model.get_decoder().register_forward_hook(
            lambda m, args, kwargs, out, rows=rows_through[name]: rows.append(len(kwargs["input_ids"])), with_kwargs=True)

    updates = {name: learner.update(rollout, step=0) for name, learner in (("rescoring", rescoring), ("alone", alone))}

    assert sum(rows_through["rescoring"]) == 2 * rollout.num_sequences
    assert sum(rows_through["alone"]) == rollout.num_sequences
    # The loss took π_old from the same forward both ways, so the step is the same.
    for a, b in zip(rescoring.model.parameters(), alone.model.parameters()):
        assert torch.equal(a, b)
    # π_old is every response's own forward: the same policy as the rescoring pass, up to the batch it ran in.
    mask = rollout.response_mask.bool()
    assert torch.allclose(updates["alone"].old_logprobs[mask], updates["rescoring"].old_logprobs[mask], atol=1e-5)
    assert not updates["alone"].old_logprobs[~mask].any()
    for key in ("mismatch/abs_logp_diff_mean", "mismatch/k3"):
        assert updates["alone"].stats[key] == pytest.approx(updates["rescoring"].stats[key], rel=1e-3, abs=1e-7)
    assert updates["alone"].stats["precision/self_gap_abs_mean"] == 0.0


@pytest.mark.parametrize("algo", ["grpo-tis", "pg"])
def test_every_logged_statistic_is_the_same_however_the_rollout_is_cut_into_passes(algo):
    # Rows of different lengths, sampled in bf16 so that the mismatch and its corrections bind.
    rollout, lengths = rows_of_many_lengths(torch.bfloat16, 3)
    cuts = (dict(micro_batch_size=16), dict(micro_batch_size=1), dict(micro_batch_size=3),
            dict(micro_batch_size=16, micro_batch_tokens=int(lengths.max()) * 3))
    logged = []
    for cut in cuts:
        learner = build(tiny_model(), dtype="fp32", algo=algo, num_samples=4, train_batch_size=8, **cut)
        stats = learner.update(rollout, step=0).stats
        logged.append({k: v for k, v in stats.items() if k.split("/")[0] in ("train", "ratio", "phantom", "mismatch",
                                                                              "loss", "precision")})
    first = logged[0]
    assert any(first[k] > 0 for k in first if k.endswith("_frac")), "no share is above 0: the test would not check it"
    for other in logged[1:]:
        assert other.keys() == first.keys()
        for key in first:
            assert other[key] == pytest.approx(first[key], rel=1e-5, abs=1e-6), key


def test_self_consistent_old_logprobs_keeps_the_gap_out_of_the_loss_and_still_reports_it():
    # docs/metrics.md: the first mini-batch's ratio is 1 (no phantom clipping, no policy change logged), while
    # precision/self_gap_… still compare the scoring pass with the update's forward.
    rollout = rollout_of(tiny_model(), max_new_tokens=12)
    flags = dict(dtype="bf16", algo="grpo", num_samples=4, micro_batch_size=3)
    plain = build(tiny_model(), **flags).update(rollout, step=0).stats
    consistent = build(tiny_model(), self_consistent_old_logprobs=True, **flags).update(rollout, step=0).stats
    assert consistent["precision/self_gap_abs_mean"] > 0.0
    assert consistent["precision/self_gap_abs_mean"] == plain["precision/self_gap_abs_mean"]
    assert consistent["precision/self_gap_abs_max"] == plain["precision/self_gap_abs_max"]
    assert plain["ratio/policy_change_abs_mean"] > 0.0
    assert consistent["ratio/policy_change_abs_mean"] == 0.0
    assert consistent["loss/ratio_mean"] == 1.0 and consistent["phantom/clip_frac"] == 0.0
