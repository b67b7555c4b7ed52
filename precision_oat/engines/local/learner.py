"""The embedded learner: full-sequence scoring in the trainer dtype, fp32 master weights.

``PrecisionLearner`` is a :class:`~precision_oat.algorithms.PolicyLoss`: the algorithm is
whatever mixins sit before it in the MRO (``compose(spec, PrecisionLearner)`` builds that
from ``--algo``). One call of :meth:`learn` is one RL update on one rollout:

1. recompute log π_old with one full-sequence forward (the trainer's view of the tokens);
2. compare it with the sampler's log μ (``mismatch/…``);
3. advantages from the rewards of each group of G samples;
4. ``num_epochs`` passes of mini-batches (``train_batch_size`` responses), each a sum of
   micro-batch losses from ``policy_loss``, with dynamic loss scaling for fp16.
"""

from __future__ import annotations

import copy
import math
import time
from typing import Iterator

import torch

from precision_oat.algorithms import AlgorithmSpec, PolicyBatch, PolicyLoss
from precision_oat.args import Args
from precision_oat.engines.local.master_weights import MasterWeights
from precision_oat.loss_scaler import LossScaler
from precision_oat.microbatch import chunks, mean_stats
from precision_oat.mismatch import mismatch_metrics
from precision_oat.precision import Precision
from precision_oat.rollout import Rollout


class PrecisionLearner(PolicyLoss):
    def __init__(self, args: Args, model: torch.nn.Module, precision: Precision, algo: AlgorithmSpec, device: torch.device):
        self.args = args
        self.algo = algo
        self.precision = precision
        self.device = device
        self.config = model.config
        self.temperature = args.rollout.temperature
        model = model.float()
        # Exact fp32 weights for export and for merging LoRA; kept only when the compute
        # weights cannot give them back (frozen base weights in a narrower dtype).
        self.base_weights = None
        if args.lora.lora_rank > 0:
            self.base_weights = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
            model = _add_lora(model, args)
        self.model = model.to(device=device, dtype=precision.trainer_dtype)
        if args.model.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
            if args.lora.lora_rank > 0:
                self.model.enable_input_require_grads()
        self.model.train()
        trainable = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        self.weights = MasterWeights(trainable, precision.master_dtype)
        t = args.train
        self.optimizer = torch.optim.AdamW(
            self.weights.master, lr=t.learning_rate, betas=t.adam_betas, weight_decay=t.weight_decay
        )
        self.scaler = LossScaler(precision.loss_scaling)
        self.optimizer_steps = 0

    # --- scoring ---

    def token_logprobs(self, rollout: Rollout) -> torch.Tensor:
        """log π(y_t) of every next token from one full-sequence forward, shape [B, L-1]."""
        logits = self.model(input_ids=rollout.input_ids, attention_mask=rollout.attention_mask).logits[:, :-1]
        logps = (logits.float() / self.temperature).log_softmax(-1)
        return logps.gather(-1, rollout.input_ids[:, 1:, None]).squeeze(-1)

    @torch.no_grad()
    def score(self, rollout: Rollout) -> torch.Tensor:
        """log π_old for the whole rollout, in micro-batches, no gradient."""
        self.model.eval()
        width = rollout.input_ids.shape[1] - 1
        out = torch.zeros(rollout.num_sequences, width, device=self.device)
        for index in chunks(torch.arange(rollout.num_sequences), self.args.train.micro_batch_size):
            part = rollout.select(index)
            out[index, : part.input_ids.shape[1] - 1] = self.token_logprobs(part)
        self.model.train()
        return out

    # --- learning ---

    def learn(self, rollout: Rollout, step: int) -> dict[str, float]:
        start = time.perf_counter()
        rollout = rollout.to(self.device)
        old_logprobs = self.score(rollout)
        # Kept for callers that plot the mismatch of this rollout.
        self.old_logprobs = old_logprobs
        stats: dict[str, float] = mismatch_metrics(rollout.sampler_logprobs, old_logprobs, rollout.response_mask)
        rewards = rollout.rewards.view(-1, rollout.group_size)
        advantages = self.compute_advantages(rewards).reshape(-1)

        t = self.args.train
        batch_size = t.train_batch_size or rollout.num_sequences
        generator = torch.Generator().manual_seed(t.seed * 1_000_003 + step)
        losses, norms, loss_stats = [], [], []
        skipped = 0
        for _ in range(t.num_epochs):
            order = torch.randperm(rollout.num_sequences, generator=generator)
            for mini in chunks(order, batch_size):
                num_tokens = float(rollout.response_mask[mini].sum().clamp(min=1))
                total = 0.0
                for micro in chunks(mini, t.micro_batch_size):
                    loss, s = self._micro_step(rollout, old_logprobs, advantages, micro, len(mini), num_tokens)
                    total += loss
                    loss_stats.append(s)
                norm, was_skipped = self._optimizer_step()
                losses.append(total)
                norms.append(norm)
                skipped += was_skipped

        stats.update(mean_stats(loss_stats))
        stats.update(
            {
                "loss/policy": sum(losses) / len(losses),
                "train/grad_norm": _finite_mean(norms),
                "train/loss_scale": self.scaler.scale,
                "train/skipped_steps": float(self.scaler.skipped_steps),
                "train/skipped_this_step": float(skipped),
                "train/optimizer_steps": float(self.optimizer_steps),
                "train/advantage_abs_mean": advantages.abs().mean().item(),
                "perf/train_tokens_per_s": float(rollout.attention_mask.sum()) * t.num_epochs
                / max(time.perf_counter() - start, 1e-9),
            }
        )
        return stats

    def _micro_step(self, rollout, old_logprobs, advantages, index, num_sequences, num_tokens):
        part = rollout.select(index)
        width = part.input_ids.shape[1] - 1
        batch = PolicyBatch(
            logprobs=self.token_logprobs(part),
            old_logprobs=old_logprobs[index, :width],
            sampler_logprobs=part.sampler_logprobs,
            advantages=advantages[index],
            mask=part.response_mask,
            num_sequences=num_sequences,
            num_tokens=num_tokens,
        )
        loss, stats = self.policy_loss(batch)
        (loss * self.scaler.scale).backward()
        self.weights.accumulate_grads()
        return loss.item(), stats

    def _optimizer_step(self) -> tuple[float, bool]:
        """Unscale, check for inf/nan, clip and step; skip the step on overflow."""
        self.weights.scale_grads(1.0 / self.scaler.scale)
        max_norm = self.args.train.max_grad_norm
        grads = [m for m in self.weights.master if m.grad is not None]
        norm = float(torch.nn.utils.clip_grad_norm_(grads, max_norm if max_norm is not None else math.inf))
        skip = self.scaler.update(overflow=not math.isfinite(norm))
        if not skip:
            self.optimizer.step()
            self.weights.copy_to_compute()
            self.optimizer_steps += 1
        self.weights.zero_grad()
        return norm, skip

    # --- weights out ---

    @torch.no_grad()
    def export_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(HF name, master-precision tensor) of every weight that training can change.

        With LoRA these are the merged weights W + (α/r)·B·A of the adapted layers, computed
        from the fp32 masters, so the sampler never sees the adapters' rounding.
        """
        if self.base_weights is None:
            yield from self.weights.named_master()
            return
        master = dict(self.weights.named_master())
        for name, module in self.model.named_modules():
            if not hasattr(module, "lora_A") or "default" not in module.lora_A:
                continue
            a = master[f"{name}.lora_A.default.weight"]
            b = master[f"{name}.lora_B.default.weight"]
            hf_name = _hf_name(f"{name}.base_layer.weight")
            base = self.base_weights[hf_name].to(a.device)
            yield hf_name, base + module.scaling["default"] * (b.float() @ a.float())

    def full_state(self) -> dict[str, torch.Tensor]:
        """Every weight of the policy in fp32, under plain HF names (LoRA merged)."""
        if self.base_weights is not None:
            state = dict(self.base_weights)
        else:
            state = {n: p.detach().float().cpu() for n, p in self.model.named_parameters()}
        state.update({n: w.detach().float().cpu() for n, w in self.export_weights()})
        return state

    def export_model(self) -> torch.nn.Module:
        """The current policy as a plain fp32 HF model on the CPU (LoRA merged)."""
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_config(copy.deepcopy(self.config)).float()
        model.load_state_dict(self.full_state(), strict=False)
        return model.eval()

    def save_policy(self, folder) -> None:
        """A folder ``AutoModelForCausalLM.from_pretrained`` loads: fp32, LoRA merged."""
        self.export_model().save_pretrained(folder)

    # --- checkpoint state ---

    def state_dict(self) -> dict:
        return {
            "master": {n: m.detach().cpu() for n, m in self.weights.named_master()},
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "optimizer_steps": self.optimizer_steps,
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        for name, m in self.weights.named_master():
            m.copy_(state["master"][name])
        self.weights.copy_to_compute()
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.optimizer_steps = state["optimizer_steps"]


def _add_lora(model, args: Args):
    from peft import LoraConfig, get_peft_model

    lora = args.lora
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [m for m in lora.lora_target_modules if m in present]
    if not targets:
        raise ValueError(f"--lora-target-modules {list(lora.lora_target_modules)} match no module of the model")
    config = LoraConfig(r=lora.lora_rank, lora_alpha=lora.lora_alpha, lora_dropout=lora.lora_dropout, target_modules=targets)
    return get_peft_model(model, config)


def _hf_name(peft_name: str) -> str:
    return peft_name.removeprefix("base_model.model.").replace(".base_layer", "")


def _finite_mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else float("nan")
