"""``OatLearner``'s learning step on CPU: real Oat learner, real DeepSpeed engine (bf16, fp32).

The learner runs in this process with no actors (Oat's ``_init`` then skips the weight-sync
group). Rollouts come from ``OatActor.rollout`` with the built-in sampler on the embedded
policy; their rewards are then replaced by a fixed pattern with variance in every group, so that
advantages and gradients are non-zero however well the policy adds.
"""

import math

import pytest
import torch

from precision_oat.algorithms import compose
from precision_oat.backends.local.driver import build_learner
from precision_oat.backends.oat.oat_actor import OatActor
from precision_oat.backends.oat.oat_learner import OatLearner
from precision_oat.errors import NonFiniteWeights
from precision_oat.learners.deepspeed_config import local_fp32_masters
from precision_oat.rl.rollout import collate
from precision_oat.rl.settings import learner_settings
from precision_oat.samplers.sampler import Completion

FLAGS = ("--prompts-per-step", "4", "--num-samples", "4", "--max-new-tokens", "4", "--micro-batch-size", "4",
         "--learning-rate", "1e-3")
MISMATCH = ["mismatch/k1", "mismatch/k2", "mismatch/k3", "mismatch/abs_logp_diff_mean", "mismatch/seq_logratio_std"]


def learner_and_rollout(oat_args, dtype, algo="grpo-tis", *flags):
    args = oat_args("--dtype", dtype, "--algo", algo, *FLAGS, *flags)
    learner = compose(args.algorithm, OatLearner)(1, 0, 0, args.master_addr, 0, True, args, [], None)
    learner._init(args, [])
    actor = OatActor(None, {}, args)
    actor.attach(actor.builtin_sampler())
    rows = learner.prompts_dataset[:4]
    torch.manual_seed(0)
    transitions = actor.rollout([q for _, q, _ in rows], [ref for _, _, ref in rows])
    for i, t in enumerate(transitions):
        t.rewards[-1] = float(i % 4 in (0, 3))  # 1, 0, 0, 1 in each group of G = 4
    return args, learner, transitions


def weights(learner):
    return {n: p.detach().float().clone() for n, p in learner.model.model.module.named_parameters()}


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_learning_step_updates_weights_and_reports_mismatch(oat_args, dtype):
    args, learner, transitions = learner_and_rollout(oat_args, dtype)
    assert next(learner.model.model.module.parameters()).dtype == {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    before = weights(learner)

    learner.pi_buffer.extend(transitions)
    info = learner.learn(1)

    for key in ["loss/policy", "train/grad_norm", "train/loss_scale", *MISMATCH]:
        assert math.isfinite(info[key]), key
    assert info["train/loss_scale"] == 1.0 and info["train/skipped_steps"] == 0
    assert info["train/grad_norm"] > 0
    assert info["train/optimizer_steps"] == 1
    after = weights(learner)
    assert any(not torch.equal(before[n], after[n]) for n in before), "no weight changed"
    # Same sampled tokens, two code paths (KV-cache decode vs one full forward): in fp32 they
    # agree to rounding; in bf16 the gap is the training-inference mismatch.
    if dtype == "fp32":
        assert info["mismatch/abs_logp_diff_mean"] < 1e-5
    else:
        assert info["mismatch/abs_logp_diff_mean"] > 1e-4


def test_loss_and_mismatch_match_the_local_engine_in_fp32(oat_args, oat_policy_dir):
    """Both backends call the same policy_loss: on one rollout, in fp32, the numbers agree.

    IS-PG (``pg``) is used because its loss −w·A·log π_θ is far from zero; a clip objective at
    ratio 1 sums to 0 over each group.
    """
    from transformers import AutoModelForCausalLM

    args, learner, transitions = learner_and_rollout(oat_args, "fp32", algo="pg")
    learner.pi_buffer.extend(transitions)
    oat_info = learner.learn(1)

    source = args.source
    completions = [Completion(list(t.prompt_ids), list(t.response_ids), list(t.response_logprobs), True)
                   for t in transitions]
    rewards = [t.rewards[-1] for t in transitions]
    rollout = collate(completions, rewards, source.rollout.num_samples, learner.tokenizer.pad_token_id)
    model = AutoModelForCausalLM.from_pretrained(oat_policy_dir, attn_implementation="eager")
    local = build_learner(model, learner_settings(source, torch.device("cpu")))
    local_info = local.update(rollout, step=0).stats

    assert abs(local_info["loss/policy"]) > 1e-3
    assert oat_info["loss/policy"] == pytest.approx(local_info["loss/policy"], rel=1e-4)
    # Gradient norm before clipping: DeepSpeed's ZeRO-2 reduction vs the local backend's master grads.
    assert oat_info["train/grad_norm"] == pytest.approx(local_info["train/grad_norm"], rel=1e-4)
    for key in MISMATCH:
        assert oat_info[key] == pytest.approx(local_info[key], rel=1e-3, abs=1e-7), key
    assert oat_info["train/advantage_abs_mean"] == pytest.approx(local_info["train/advantage_abs_mean"], rel=1e-6)


@pytest.mark.parametrize("zero_stage", ["1", "2"])  # ZeRO-0 in bf16 is refused on Oat (docs/oat.md)
def test_learning_step_stops_when_the_fp32_masters_are_nan(oat_args, zero_stage):
    _, learner, transitions = learner_and_rollout(oat_args, "bf16", "grpo-tis", "--zero-stage", zero_stage)
    with torch.no_grad():
        for master in local_fp32_masters(learner.model.model):
            master.fill_(float("nan"))
    learner.pi_buffer.extend(transitions)
    with pytest.raises(NonFiniteWeights, match="the optimiser step made weights inf/NaN"):
        learner.learn(1)


def test_a_subclass_overrides_every_hook_of_the_oat_learner(oat_args):
    from tests.backends.test_learner_hooks import HOOKS, recording_subclass

    args = oat_args("--dtype", "fp32", "--algo", "grpo-tis", *FLAGS)
    calls: list[str] = []
    learner = recording_subclass(compose(args.algorithm, OatLearner), calls)(1, 0, 0, args.master_addr, 0, True, args,
                                                                            [], None)
    learner._init(args, [])
    _, _, transitions = learner_and_rollout(oat_args, "fp32")
    learner.pi_buffer.extend(transitions)
    learner.learn(1)
    assert set(calls) == set(HOOKS), sorted(set(HOOKS) - set(calls))
