"""--gradient-checkpointing on both local learners, with and without LoRA: same loss and gradients, less kept."""

import pytest
import torch

from precision_oat.backends.local.driver import build_learner
from precision_oat.rl.settings import learner_settings
from tests.conftest import tiny_model
from tests.backends.helpers import make_args
from tests.backends.test_local_learner import rollout_of


def update_gradients(learner_kind: str, lora_rank: int, checkpointing: bool, rollout):
    """The elements autograd kept for the backward, the loss, and the summed gradient of every trainable
    weight over one update's micro-batches."""
    zero = dict(zero_stage=0) if learner_kind == "deepspeed" else {}
    args = make_args(learner=learner_kind, **zero, dtype="fp32", algo="grpo", num_samples=2, micro_batch_size=4,
                     lora_rank=lora_rank, gradient_checkpointing=checkpointing, max_grad_norm=None)
    learner = build_learner(tiny_model(), learner_settings(args, torch.device("cpu")))
    grads = {}
    for name, p in learner.model.named_parameters():
        if p.requires_grad:
            p.register_hook(lambda g, name=name: grads.__setitem__(name, grads.get(name, 0) + g.detach().clone()))
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t.numel()) or t, lambda t: t):
        stats = learner.update(rollout, step=0).stats
    return sum(kept), stats["loss/policy"], grads


@pytest.mark.parametrize("lora_rank", [0, 4])
@pytest.mark.parametrize("learner_kind", ["builtin", "deepspeed"])
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(learner_kind, lora_rank):
    rollout = rollout_of(tiny_model(), n=2)
    plain, loss_plain, grads_plain = update_gradients(learner_kind, lora_rank, False, rollout)
    checkpointed, loss_checkpointed, grads_checkpointed = update_gradients(learner_kind, lora_rank, True, rollout)

    # Checkpointing keeps each layer's input only, and recomputes the rest in the backward.
    assert checkpointed < plain / 2
    assert abs(loss_plain - loss_checkpointed) < 1e-6
    assert grads_plain.keys() == grads_checkpointed.keys() and len(grads_plain) > 0
    assert any(float(g.abs().max()) > 0 for g in grads_checkpointed.values())
    for name, g in grads_plain.items():
        torch.testing.assert_close(grads_checkpointed[name], g, atol=1e-6, rtol=1e-5, msg=name)
