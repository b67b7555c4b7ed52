"""``OatLearner``: Oat's PPO learner whose update is the shared RL step.

It is both a :class:`~precision_oat.rl.step.RLStep` and an Oat ``PPOLearner``; the algorithm
is the mixins placed before it (``compose(spec, OatLearner)`` builds that class from
``--algo``), exactly as in the local backend. What it overrides, and why:

    _init                           DeepSpeed config from the Precision policy (strategy.py);
                                    metrics to metrics.jsonl; ``self.algo`` = our AlgorithmSpec
    prepare_data                    prompts from the task instead of Oat's dataset flags
    compute_monte_carlo_advantages  answered by the advantage mixin (``compute_advantages``)
    learning_step                   Oat's trajectory as a :class:`Rollout`, then ``RLStep.update``
                                    (π_old, mismatch, advantages, mini/micro-batches, statistics)
    learn                           metric names: the shared keys at top level, as the local backend
    evaluate                        every benchmark of the task, under the local backend's
                                    ``eval/<benchmark>/…`` keys (precision_oat.tasks.evaluation)

What is Oat's own here: the forward through Oat's model's body (its position ids), and the backward and the
optimiser step through Oat's DeepSpeed strategy. The gradient norm, the loss-scale report and
the fp32 masters the inf/NaN guard checks are :class:`~precision_oat.learners.deepspeed_hooks.DeepSpeedHooks`',
shared with the local DeepSpeed learner.
DeepSpeed divides each backward by its accumulation steps; the loss is multiplied back to
undo that, since the shared step already normalises by the whole mini-batch.
"""

from __future__ import annotations

import traceback
from dataclasses import replace
from functools import partial
from pathlib import Path

import launchpad as lp
import torch
import torch.distributed as dist
from oat.algorithms.ppo import PPOLearner
from torch.utils.data import DataLoader

from precision_oat.backends.oat.cpu import install_cpu_shims, learner_device
from precision_oat.backends.oat.oat_log import LEARNER_CONSOLE, OatRunLog
from precision_oat.backends.oat.prompt_rows import prompt_row
from precision_oat.backends.oat.strategy import learner_base_hooks
from precision_oat.errors import UserError
from precision_oat.learners.deepspeed_hooks import DeepSpeedHooks
from precision_oat.rl.actor import encode_prompt
from precision_oat.rl.rollout import Rollout
from precision_oat.rl.scoring import causal_lm_logprobs
from precision_oat.rl.settings import learner_settings
from precision_oat.rl.step import RLStep
from precision_oat.tasks import build_task
from precision_oat.tasks.evaluation import summarize
from precision_oat.tasks.prompt_limit import PromptLimit

# Written to the output folder when the learner fails: the traceback of a failure, or the one line of a bad input
# after BAD_INPUT, which the launcher raises again as a UserError.
LEARNER_ERROR = "learner_error.txt"
BAD_INPUT = "bad input: "


class OatLearner(DeepSpeedHooks, RLStep, PPOLearner):
    def _init(self, args, actors) -> None:
        install_cpu_shims()
        with learner_base_hooks(args.master_addr):
            super()._init(args, actors)
        self.device = learner_device()
        settings = learner_settings(args.source, self.device)
        # This learner's share of a step: DeepSpeed's micro-batch, and the responses of one optimiser step.
        micro = args.train_batch_size_per_device
        self.settings = replace(settings, train=replace(settings.train, micro_batch_size=micro,
                                                        train_batch_size=micro * self.strategy.grad_acc_step))
        # Oat keeps its algorithm enum in self.algo; from here on it is our AlgorithmSpec.
        self.algo = settings.algo
        self.precision = settings.precision
        if self.strategy.is_rank_0():
            self.strategy.print("precision policy:\n" + self.precision.describe())
            # Oat logs through self._wandb.log(dict) on rank 0; metrics.jsonl (and wandb) take its place.
            self._wandb = OatRunLog(args)

    def run(self) -> None:
        """Oat's main loop. On failure the reason goes to OUTPUT_DIR/learner_error.txt and the
        whole program stops; ``program.launch`` raises it (launchpad alone would keep waiting)."""
        try:
            super().run()
        except BaseException as error:
            reason = BAD_INPUT + str(error) if isinstance(error, UserError) else traceback.format_exc()
            Path(self.args.output_dir, LEARNER_ERROR).write_text(reason)
            lp.stop()
            raise

    # --- data ---

    def prepare_data(self, strategy, tokenizer) -> None:
        built = build_task(self.args.source.task, self.args.source.eval, tokenizer)
        rollout = self.args.source.rollout
        self.task = PromptLimit(built, lambda e: len(encode_prompt(built, tokenizer, e)), rollout.max_prompt_length,
                                rollout.drop_long_prompts, log=partial(self._to_console, strategy))
        rows = [prompt_row(self.task, e) for e in self.task.train_set()]
        # (formatted prompt, question, reference): what Oat's collector hands the actors.
        self.prompts_dataset = rows
        self.prompts_dataloader = strategy.setup_dataloader(
            rows, self.args.rollout_batch_size_per_device, pin_memory=True, shuffle=True
        )
        # Evaluation prompts are held to the limit only where they are sampled.
        evaluated = self.task if self.args.eval_steps > 0 else built
        self.eval_sets = {
            name: [prompt_row(self.task, e) for e in examples] for name, examples in evaluated.eval_sets().items()
        }
        self.eval_prompts_dataset = [row for rows_ in self.eval_sets.values() for row in rows_]
        self.eval_prompts_dataloader = None

    def _to_console(self, strategy, line: str) -> None:
        """A line for the run's console (the launcher relays the learner's console file as it grows)."""
        if strategy.is_rank_0():
            with Path(self.args.output_dir, LEARNER_CONSOLE).open("a", encoding="utf-8") as console:
                print(line, file=console)

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
        stats = self.update(self._rollout(trajectory), self.global_step).stats
        return {k: torch.tensor(v, dtype=torch.float64) for k, v in stats.items()}

    def _rollout(self, trajectory: dict) -> Rollout:
        """Oat's trajectory batch (N responses, G per prompt) as the shared :class:`Rollout`."""
        input_ids = trajectory["input_ids"].to(self.device)
        attention = trajectory["attention_mask"].to(self.device)
        response = self.get_completion_mask(attention, trajectory["prompt_ids_lens"])[:, 1:].float()
        # Oat's per-response loss mask (responses it was told to ignore) drops them from the update.
        response = response * torch.tensor(trajectory["loss_masks"], device=self.device).float()[:, None]
        sampler_logprobs = torch.zeros_like(response)
        for i, logps in enumerate(trajectory["action_logprobs"]):
            sampler_logprobs[i, response[i] > 0] = torch.tensor(logps, device=self.device, dtype=torch.float32)
        rewards = torch.tensor([r[-1] for r in trajectory["rewards"]], device=self.device).float() * self.args.reward_scale
        return Rollout(input_ids, attention.long(), response, sampler_logprobs, rewards, self.args.num_samples)

    # --- the learner hooks of RLStep ---

    def forward_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, truncation=None,
                         response_mask=None) -> torch.Tensor:
        # Oat's forward of the model's body (its actor's position ids), then the shared chunked output
        # projection and log-softmax: the vocabulary is never held whole, response positions only.
        forward = partial(self.model, input_ids, attention_mask=attention_mask)
        return causal_lm_logprobs(self.deepspeed_engine.module,
                                  lambda: forward(without_logits=True)["last_hidden_state"], lambda: forward()["logits"],
                                  input_ids, self.settings.rollout.temperature, truncation, response_mask,
                                  self.settings.train.logprob_chunk_size, head_calls=self.head_calls,
                                  recompute_head=self.recompute_head)

    def set_train(self, mode: bool) -> None:
        self.model.train(mode)

    def backward(self, loss: torch.Tensor, last_micro_batch: bool) -> None:
        self.strategy.backward(loss * self.strategy.grad_acc_step, self.model, self.optimizer)
        if not last_micro_batch:
            self.strategy.optimizer_step(self.optimizer, self.model, self.scheduler)

    @property
    def deepspeed_engine(self):
        return self.model.model

    def step_engine(self) -> None:
        self.strategy.optimizer_step(self.optimizer, self.model, self.scheduler)

    # --- evaluation ---

    def evaluate(self, dataloader, steps) -> dict:
        """Every benchmark of the task through Oat's actors; the local backend's ``eval/…`` keys."""
        del dataloader
        self._pre_evaluate()
        results = {}
        if self.strategy.is_rank_0():
            for name, rows in self.eval_sets.items():
                questions = []
                loader = DataLoader(rows, batch_size=self.args.eval_batch_size, shuffle=False, collate_fn=_transpose)
                for i, (processed, prompts, references) in enumerate(loader):
                    actor = self.actors[i % len(self.actors)]
                    first = i * self.args.eval_batch_size  # the batch's place in the benchmark: its rows' streams
                    _, samples = actor.futures.generate_and_maybe_eval(prompts, processed, references,
                                                                       first_prompt=first).result()
                    questions += samples
                results[name] = questions
        dist.barrier()
        metrics = [summarize(results) if results else {}]
        dist.broadcast_object_list(metrics, src=0)
        self._post_evaluate()
        return metrics[0]


def _transpose(rows):
    return tuple(list(column) for column in zip(*rows))


def _top_level(key: str) -> str:
    """Oat's ``learn`` puts ``train/`` before every key of ``learning_step``; the shared keys already have a group."""
    inner = key.removeprefix("train/")
    return inner if "/" in inner else key
