"""What both learners of the local backend share: the settings, the model as training takes it, the policy out.

:class:`Learner` is an :class:`~precision_oat.rl.step.RLStep` that owns a model. It takes the
model in fp32, adds LoRA adapters and gradient checkpointing where asked, and gives the policy
back as a plain fp32 HF model (LoRA merged) for checkpoints and the final probe. A subclass
fills the step's hooks and three of its own: :meth:`export_weights` (the masters, streamed),
:meth:`save_state` and :meth:`load_state` (its checkpoint).

Constructor arguments: the fp32 HF ``model`` and its
:class:`~precision_oat.rl.settings.LearnerSettings` (the precision policy, the algorithm, the
learner's, rollout's, model's and LoRA's flags, the device and the processes), which
:func:`~precision_oat.rl.settings.learner_settings` makes from the parsed flags.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Iterator

import torch

from precision_oat.learners.lora import add_lora
from precision_oat.precision.lm_head import use_fp32_head
from precision_oat.rl.scoring import token_logprobs
from precision_oat.rl.settings import LearnerSettings
from precision_oat.rl.step import RLStep


class Learner(RLStep):
    def __init__(self, model: torch.nn.Module, settings: LearnerSettings):
        self.settings = settings
        self.algo = settings.algo
        self.precision = precision = settings.precision
        self.device = settings.device
        lora = settings.lora
        self.config = model.config
        model = model.float()
        # Exact fp32 weights for export and for merging LoRA; kept only when the compute
        # weights cannot give them back (frozen base weights in a narrower dtype).
        self.base_weights = None
        if lora.lora_rank > 0:
            self.base_weights = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
            model = add_lora(model, lora)
        if settings.model.gradient_checkpointing:
            # Newer transformers renamed it, and warn on every call of the old name.
            getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
            if lora.lora_rank > 0:
                model.enable_input_require_grads()
        if precision.fp32_head:
            use_fp32_head(model)
        self.model = model

    def set_train(self, mode: bool) -> None:
        self.model.train(mode)

    def forward_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, truncation=None,
                         response_mask=None) -> torch.Tensor:
        s = self.settings
        return token_logprobs(self.forward_module, input_ids, attention_mask, s.rollout.temperature, truncation,
                              response_mask, s.train.logprob_chunk_size, s.model.compile_layers, self.head_calls,
                              self.recompute_head)

    def head_calls(self, chunks: int) -> int:
        """How many calls of the output projection a scoring pass of ``chunks`` chunks makes (see
        :func:`~precision_oat.rl.scoring.hidden_logprobs`): one a chunk, unless the weights are gathered."""
        return chunks

    @property
    def recompute_head(self) -> bool:
        """Whether the backward may run the output projection again, chunk by chunk, rather than keep every
        chunk's logits (:func:`~precision_oat.rl.scoring.hidden_logprobs`)."""
        return True

    @property
    def forward_module(self) -> torch.nn.Module:
        """What :meth:`forward_logprobs` runs: the model, or the engine that wraps it."""
        return self.model

    # --- weights out ---

    def export_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(HF name, fp32 master) of every weight training can change, one at a time; LoRA merged."""
        raise NotImplementedError

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

        # Building the model draws random initial weights, overwritten at once: on a fork of torch's generator, so
        # that a checkpoint leaves the run's own draws (dropout in the training forward) where they were.
        with torch.random.fork_rng(devices=[]):
            model = AutoModelForCausalLM.from_config(copy.deepcopy(self.config)).float()
        model.load_state_dict(self.full_state(), strict=False)
        return model.eval()

    # --- checkpoint state ---

    def save_state(self, folder: Path) -> None:
        """Write what a resume needs besides the policy (masters, optimiser, loss scaler) into ``folder``."""
        raise NotImplementedError

    def load_state(self, folder: Path) -> None:
        raise NotImplementedError


def compile_layers(model: torch.nn.Module) -> None:
    """torch.compile each decoder layer of an HF causal LM (or of one wrapped by LoRA), in place.

    Compiling happens at a layer's first call. The layers share their code, so one graph serves all of
    them (a new one for each new family of shapes); gradient checkpointing recomputes the compiled layer.
    """
    for layer in model.get_decoder().layers:
        layer.compile()
