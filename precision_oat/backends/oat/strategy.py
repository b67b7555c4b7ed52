"""Oat's DeepSpeed strategy with its precision sections rendered by the Precision policy.

Oat builds the DeepSpeed config in ``DeepspeedStrategy.get_ds_train_config`` (policy) and
``get_ds_eval_config`` (reference model) from two booleans, ``args.bf16`` / ``args.fp16``,
and writes only ``{"enabled": …}``: fp16 would run with DeepSpeed's default loss scaler, not
the one the user asked for. :class:`PrecisionStrategy` replaces both sections with
:meth:`Precision.deepspeed_config` (fp16 with ``loss_scale`` / ``initial_scale_power`` /
``loss_scale_window`` / ``hysteresis`` / ``min_loss_scale``, bf16, or neither for fp32).

Oat has no hook for the strategy class: ``LearnerBase._init`` calls the ``get_strategy``
that ``oat.learners.base`` imported. :func:`learner_base_hooks` rebinds that name (and the
address of the weight-sync rendezvous) for the duration of the call; no Oat file changes.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from oat.model import LLM
from oat.utils.deepspeed import DeepspeedStrategy, get_strategy

from precision_oat.learners.weight_decay import decay_groups
from precision_oat.precision.policy import Precision


def render_precision(config: dict, precision: Precision, *, cpu: bool) -> dict:
    """``config`` with its ``fp16`` / ``bf16`` sections replaced by the policy's."""
    config = {k: v for k, v in config.items() if k not in ("fp16", "bf16")}
    config.update(precision.deepspeed_config())
    if cpu:
        # On CPU the optimiser is torch's AdamW (see create_optimizer); ZeRO asks for consent.
        config["zero_allow_untested_optimizer"] = True
    return config


class PrecisionStrategy(DeepspeedStrategy):
    """Oat's strategy; reads the policy from ``self.args.precision``."""

    def get_ds_train_config(self, is_wrapped):
        config = super().get_ds_train_config(is_wrapped)
        return render_precision(config, self.args.precision, cpu=not torch.cuda.is_available())

    def get_ds_eval_config(self, offload=False):
        config = super().get_ds_eval_config(offload)
        return render_precision(config, self.args.precision, cpu=not torch.cuda.is_available())

    def create_optimizer(self, model, **kwargs):
        if torch.cuda.is_available() or self.adam_offload:
            return super().create_optimizer(model, **kwargs)
        # Oat's FusedAdam compiles a C++ op on a CPU-only machine (about 4 minutes on 2
        # cores); torch's AdamW is the same decoupled-weight-decay update. Oat's own grouping
        # (on CUDA) exempts the same weights as ours: biases and norm scales.
        module = model.model if isinstance(model, LLM) else model
        named = ((n, p) for n, p in module.named_parameters() if p.requires_grad)
        return torch.optim.AdamW(decay_groups(named, kwargs.pop("weight_decay")), **kwargs)


def get_precision_strategy(args):
    """Oat's ``get_strategy`` (seed handling included), as a :class:`PrecisionStrategy`."""
    args, strategy = get_strategy(args)
    strategy.__class__ = PrecisionStrategy
    return args, strategy


@contextlib.contextmanager
def learner_base_hooks(rendezvous_address: str) -> Iterator[None]:
    """While active, ``LearnerBase._init`` builds a :class:`PrecisionStrategy` and meets the
    actors for weight sync on ``rendezvous_address`` (the program runs on one host)."""
    import oat.learners.base as base

    replacements = {
        "get_strategy": get_precision_strategy,
        "node_ip_address_from_perspective": lambda *_, **__: rendezvous_address,
    }
    saved = {name: getattr(base, name) for name in replacements}
    for name, value in replacements.items():
        setattr(base, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(base, name, value)
