"""--compile-layers: the learner's decoder layers and its log-softmax over the vocabulary's chunks run through
torch.compile, one graph serving every layer, and the update is the one the eager layers make."""

import pytest
import torch
from torch._dynamo.utils import counters

from precision_oat.backends.local.driver import build_learner
from precision_oat.errors import UserError
from precision_oat.rl.settings import learner_settings
from tests.backends.helpers import make_args
from tests.backends.test_local_learner import rollout_of
from tests.conftest import tiny_model


LAYERS = 12


def one_update(compiled: bool, rollout):
    """The update's policy loss and every weight's gradient summed over its micro-batches, with a deep tiny
    model's layers compiled or eager, and its output layer's log-softmax in chunks of 8 positions."""
    args = make_args(learner="deepspeed", zero_stage=0, dtype="fp32", algo="grpo", num_samples=2, micro_batch_size=4,
                     gradient_checkpointing=True, compile_layers=compiled, max_grad_norm=None, logprob_chunk_size=8)
    learner = build_learner(tiny_model(layers=LAYERS), learner_settings(args, torch.device("cpu")))
    grads = {}
    for name, p in learner.model.named_parameters():
        p.register_hook(lambda g, name=name: grads.__setitem__(name, grads.get(name, 0) + g.detach().clone()))
    return learner.update(rollout, step=0).stats["loss/policy"], grads


def test_compiled_layers_make_the_eager_update_from_shared_graphs():
    torch._dynamo.reset()
    counters.clear()
    rollout = rollout_of(tiny_model(), n=2)
    eager_loss, eager_grads = one_update(False, rollout)
    assert not counters["frames"]
    loss, grads = one_update(True, rollout)
    # The layers ran compiled, and share their graphs: one for each way a layer is called (rescoring's
    # no-grad forward, the update's, a micro-batch of a new width), not one for each layer.
    assert counters["frames"]["ok"] >= 1
    assert 0 < counters["stats"]["unique_graphs"] < LAYERS
    assert loss == pytest.approx(eager_loss, abs=1e-6)
    assert grads.keys() == eager_grads.keys() and any(float(g.abs().max()) > 0 for g in grads.values())
    for name, g in eager_grads.items():
        torch.testing.assert_close(grads[name], g, atol=1e-6, rtol=1e-5, msg=name)


def test_compile_layers_is_refused_on_oat_in_one_line():
    with pytest.raises(UserError, match="--compile-layers works with --backend local only"):
        make_args(backend="oat", compile_layers=True).check()
