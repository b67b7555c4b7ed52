"""The logged clip fraction of a run with several optimiser steps per rollout, recomputed by hand.

With ``--train-batch-size`` below the rollout and ``--num-epochs 2`` the policy moves between
mini-batches, so π_θ ≠ π_old and the clip binds. The check replays the step in plain PyTorch
from the weights before it: its own shuffle, log-softmax, Dr.GRPO advantages, PPO loss and
AdamW, and counts the tokens where the clip binds.
"""

import json

import torch
from transformers import AutoModelForCausalLM

from precision_oat.backends.local.driver import train
from precision_oat.rl.step import RLStep
from precision_oat.seeds import SHUFFLE, derive_seed
from tests.backends.helpers import make_args

EPS = 0.1
LR = 5e-3
MAX_NEW_TOKENS = 4
TRAIN_BATCH, MICRO_BATCH, EPOCHS, SEED = 4, 2, 2, 0


def test_logged_clip_fraction_equals_a_replay_of_the_update(tmp_path, embedded_policy_dir, monkeypatch):
    rollouts = []
    update = RLStep.update

    def recording_update(self, rollout, step):
        rollouts.append(rollout)
        return update(self, rollout, step)

    monkeypatch.setattr(RLStep, "update", recording_update)
    args = make_args(model=str(embedded_policy_dir), algo="grpo", dtype="fp32", steps=1, prompts_per_step=4,
                     num_samples=4, max_new_tokens=MAX_NEW_TOKENS, train_batch_size=TRAIN_BATCH,
                     micro_batch_size=MICRO_BATCH, num_epochs=EPOCHS, clip_low=EPS, clip_high=EPS,
                     learning_rate=LR, seed=SEED, output_dir=str(tmp_path))
    train(args)
    logged = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])["loss/clip_frac"]
    (rollout,) = rollouts

    model = AutoModelForCausalLM.from_pretrained(embedded_policy_dir).float()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), weight_decay=0.0)
    mask = rollout.response_mask
    rewards = rollout.rewards.view(-1, 4)
    advantages = (rewards - rewards.mean(1, keepdim=True)).reshape(-1)  # Dr.GRPO: r − group mean

    def logprobs(rows):
        logits = model(input_ids=rollout.input_ids[rows], attention_mask=rollout.attention_mask[rows]).logits
        return torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, rollout.input_ids[rows, 1:, None])[..., 0]

    with torch.no_grad():
        old = logprobs(torch.arange(len(advantages)))

    # The clip binds on a response token where A > 0 with r > 1 + ε, or A < 0 with r < 1 − ε. The step logs the
    # share of all response tokens of its passes (a token share: the same however the rows are cut into passes).
    bound, tokens = 0, 0
    generator = torch.Generator().manual_seed(derive_seed(SEED, SHUFFLE, 0))
    for _ in range(EPOCHS):
        for mini in torch.randperm(len(advantages), generator=generator).split(TRAIN_BATCH):
            for micro in mini.split(MICRO_BATCH):
                ratio = (logprobs(micro) - old[micro]).exp()
                a, m = advantages[micro, None], mask[micro] > 0
                binds = ((a > 0) & (ratio > 1 + EPS)) | ((a < 0) & (ratio < 1 - EPS))
                bound, tokens = bound + int(binds[m].sum()), tokens + int(m.sum())
                surrogate = torch.minimum(ratio * a, ratio.clamp(1 - EPS, 1 + EPS) * a)
                # Dr.GRPO's constant normaliser: Σ tokens / max new tokens / responses of the mini-batch.
                (-(surrogate * mask[micro]).sum() / MAX_NEW_TOKENS / len(mini)).backward()
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0)
            optimizer.step()
            optimizer.zero_grad()

    by_hand = bound / tokens
    assert by_hand > 0.05, "the clip never bound: the test would not check it"
    assert abs(logged - by_hand) < 1e-6, (logged, by_hand)
