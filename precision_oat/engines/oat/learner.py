"""``PrecisionLearner``: Oat's PPO learner whose update is the shared ``policy_loss``.

It is both a :class:`~precision_oat.algorithms.PolicyLoss` and an Oat ``PPOLearner``; the
algorithm is the mixins placed before it (``compose(spec, PrecisionLearner)`` builds that
class from ``--algo``), exactly as in the local engine. What it overrides, and why:

    _init                           DeepSpeed config from the Precision policy (strategy.py);
                                    metrics to metrics.jsonl; ``self.algo`` = our AlgorithmSpec
    prepare_data                    prompts from the task instead of Oat's dataset flags
    compute_monte_carlo_advantages  answered by the advantage mixin (``compute_advantages``)
    learning_step                   π_old recompute, mismatch metrics, then ``policy_loss`` per
                                    micro-batch (no per-algorithm branches)
    learn                           metric names: ``mismatch/…``, ``loss/…``, ``perf/…`` at top
                                    level, the rest under ``train/`` (as the local engine)
    evaluate                        one pass per benchmark of the task

One learning step, for the responses this learner holds (N of them, G per prompt):

1. log π_old of every response token, one no-grad forward per micro-batch, trainer dtype;
2. ``mismatch/…`` from log μ (the actor's sampler) against log π_old;
3. advantages A from each prompt's G rewards;
4. ``num_ppo_epochs`` passes over a shuffle, in optimiser batches of ``train_batch_size / W``
   responses; each micro-batch's loss is ``policy_loss`` with the optimiser batch's
   denominators, so the micro-batch losses add up to the batch loss. DeepSpeed divides each
   backward by its accumulation steps; the loss is multiplied back to undo that.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
import launchpad as lp
import numpy as np
import torch
from oat.algorithms.ppo import PPOLearner
from torch.utils.data import DataLoader

from precision_oat.algorithms import PolicyBatch, PolicyLoss
from precision_oat.engines.oat.cpu import install_cpu_shims, learner_device
from precision_oat.engines.oat.prompts import prompt_row
from precision_oat.engines.oat.run_log import OatRunLog
from precision_oat.engines.oat.strategy import learner_base_hooks
from precision_oat.microbatch import chunks, mean_stats
from precision_oat.mismatch import mismatch_metrics
from precision_oat.tasks import build_task

# Metric groups the learner reports at top level; Oat's learn() puts "train/" before every key.
TOP_LEVEL = ("loss/", "mismatch/", "perf/")
# Written to the output folder when the learner fails.
LEARNER_ERROR = "learner_error.txt"


class PrecisionLearner(PolicyLoss, PPOLearner):
    def _init(self, args, actors) -> None:
        install_cpu_shims()
        with learner_base_hooks(args.master_addr):
            super()._init(args, actors)
        # Oat keeps its algorithm enum in self.algo; from here on it is our AlgorithmSpec.
        self.algo = args.algorithm
        self.precision = args.precision
        self.device = learner_device()
        if self.strategy.is_rank_0():
            self.strategy.print("precision policy:\n" + self.precision.describe())
            # Oat logs through self._wandb.log(dict) on rank 0; metrics.jsonl (and wandb) take its place.
            self._wandb = OatRunLog(args)

    def run(self) -> None:
        """Oat's main loop. On failure the reason goes to OUTPUT_DIR/learner_error.txt and the
        whole program stops; ``program.run`` raises it (launchpad alone would keep waiting)."""
        try:
            super().run()
        except BaseException:
            Path(self.args.output_dir, LEARNER_ERROR).write_text(traceback.format_exc())
            lp.stop()
            raise

    # --- data ---

    def prepare_data(self, strategy, tokenizer) -> None:
        self.task = build_task(self.args.source, tokenizer)
        limit = self.args.prompt_max_length
        rows = [prompt_row(self.task, e) for e in self.task.train_set()]
        too_long = [r[0] for r in rows if len(tokenizer(r[0], add_special_tokens=False).input_ids) > limit]
        if too_long:
            raise ValueError(
                f"{len(too_long)} prompts are longer than --max-prompt-length {limit} tokens, e.g. {too_long[0][:80]!r}"
            )
        if not rows:
            raise ValueError(f"task {self.task.name!r} has no training examples")
        # (formatted prompt, question, reference): what Oat's collector hands the actors.
        self.prompts_dataset = rows
        self.prompts_dataloader = strategy.setup_dataloader(
            rows, self.args.rollout_batch_size_per_device, pin_memory=True, shuffle=True
        )
        self.eval_sets = {
            name: [prompt_row(self.task, e) for e in examples] for name, examples in self.task.eval_sets().items()
        }
        self.eval_prompts_dataset = [row for rows_ in self.eval_sets.values() for row in rows_]
        self.eval_prompts_dataloader = None

    # --- advantages ---

    def compute_monte_carlo_advantages(self, rewards: torch.Tensor, response_masks: torch.Tensor) -> torch.Tensor:
        """Oat's hook, answered by the advantage mixin: dense rewards [N, T] → A [N]."""
        del response_masks
        per_response = rewards.sum(-1).view(-1, self.args.num_samples)
        return self.compute_advantages(per_response).reshape(-1)

    # --- learning ---

    def learn(self, learning_round: int) -> dict:
        info = super().learn(learning_round)
        return {_top_level(k): v for k, v in info.items()}

    def learning_step(self, trajectory: dict) -> dict:
        args = self.args
        start = time.perf_counter()
        input_ids = trajectory["input_ids"].to(self.device)
        attention = trajectory["attention_mask"].to(self.device)
        response_mask = self.get_completion_mask(attention, trajectory["prompt_ids_lens"])[:, 1:].float()
        # Oat's per-response loss mask (responses it was told to ignore) applies to the loss only.
        loss_mask = response_mask * torch.tensor(trajectory["loss_masks"], device=self.device).float()[:, None]
        sampler_logprobs = torch.zeros_like(response_mask)
        for i, logps in enumerate(trajectory["action_logprobs"]):
            sampler_logprobs[i, response_mask[i] > 0] = torch.tensor(logps, device=self.device, dtype=torch.float32)
        rewards = torch.tensor([r[-1] for r in trajectory["rewards"]], device=self.device).float() * args.reward_scale

        old_logprobs = self._score(input_ids, attention)
        stats = mismatch_metrics(sampler_logprobs, old_logprobs, response_mask)
        advantages = self.compute_monte_carlo_advantages(rewards[:, None], response_mask)

        n = len(input_ids)
        micro = args.train_batch_size_per_device
        per_step = micro * self.strategy.grad_acc_step
        generator = torch.Generator().manual_seed(args.seed * 1_000_003 + self.global_step)
        losses, loss_stats, norms = [], [], []
        for _ in range(args.num_ppo_epochs):
            order = torch.randperm(n, generator=generator).to(self.device)
            for batch in chunks(order, per_step):
                num_tokens = float(loss_mask[batch].sum().clamp(min=1.0))
                total = 0.0
                micro_batches = list(chunks(batch, micro))
                for j, index in enumerate(micro_batches):
                    ids, att, width = _trim(input_ids[index], attention[index])
                    logprobs, _ = self.get_batch_logps(self.model, ids, att, temperature=args.temperature)
                    policy_batch = PolicyBatch(
                        logprobs=logprobs,
                        old_logprobs=old_logprobs[index, : width - 1],
                        sampler_logprobs=sampler_logprobs[index, : width - 1],
                        advantages=advantages[index],
                        mask=loss_mask[index, : width - 1],
                        num_sequences=len(batch),
                        num_tokens=num_tokens,
                    )
                    loss, s = self.policy_loss(policy_batch)
                    self.strategy.backward(loss * self.strategy.grad_acc_step, self.model, self.optimizer)
                    boundary = j == len(micro_batches) - 1
                    norm = float(self.strategy.get_gradient_norm(self.model)) if boundary else None
                    self.strategy.optimizer_step(self.optimizer, self.model, self.scheduler)
                    if boundary:
                        # DeepSpeed's own norm is unscaled (fp16); it has none for plain fp32 ZeRO-0.
                        ds_norm = self.model.model.get_global_grad_norm()
                        norms.append(float(ds_norm) if ds_norm is not None else norm)
                    total += loss.item()
                    loss_stats.append(s)
                losses.append(total)

        engine = self.model.model
        stats.update(mean_stats(loss_stats))
        stats.update(
            {
                "loss/policy": float(np.mean(losses)),
                "grad_norm": float(np.mean(norms)),
                "loss_scale": float(getattr(engine.optimizer, "loss_scale", 1.0)),
                "skipped_steps": float(engine.skipped_steps),
                "optimizer_steps": float(engine.global_steps),
                "advantage_abs_mean": advantages.abs().mean().item(),
                "perf/train_tokens_per_s": float(attention.sum()) * args.num_ppo_epochs
                / max(time.perf_counter() - start, 1e-9),
            }
        )
        return {k: torch.tensor(v, dtype=torch.float64) for k, v in stats.items()}

    @torch.no_grad()
    def _score(self, input_ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        """log π_old of every next token, [N, L-1], one no-grad forward per micro-batch."""
        out = torch.zeros(input_ids.shape[0], input_ids.shape[1] - 1, device=self.device)
        for index in chunks(torch.arange(len(input_ids), device=self.device), self.args.train_batch_size_per_device):
            ids, att, width = _trim(input_ids[index], attention[index])
            out[index, : width - 1], _ = self.get_batch_logps(self.model, ids, att, temperature=self.args.temperature)
        return out

    # --- evaluation ---

    def evaluate(self, dataloader, steps) -> dict:
        """Oat's evaluation once per benchmark of the task; keys ``eval/<benchmark>/…``."""
        del dataloader
        metrics, accuracies = {}, []
        for name, rows in self.eval_sets.items():
            loader = DataLoader(rows, batch_size=self.args.eval_batch_size, shuffle=False, collate_fn=_transpose)
            result = super().evaluate(loader, f"{steps}_{name}")
            metrics.update({k.replace("eval/", f"eval/{name}/"): v for k, v in result.items()})
            accuracies.append(result["eval/accuracy"])
        if accuracies:
            metrics["eval/accuracy"] = float(np.mean(accuracies))
        return metrics


def _trim(input_ids: torch.Tensor, attention: torch.Tensor):
    """Drop the padding columns every row of a micro-batch shares (sequences are right-padded)."""
    width = int(attention.sum(-1).max())
    return input_ids[:, :width], attention[:, :width], width


def _transpose(rows):
    return tuple(list(column) for column in zip(*rows))


def _top_level(key: str) -> str:
    inner = key.removeprefix("train/")
    return inner if inner.startswith(TOP_LEVEL) else key
