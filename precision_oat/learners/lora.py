"""LoRA adapters through peft, and the merged weights the sampler receives (both local learners)."""

from __future__ import annotations

import torch

from precision_oat.args import LoraArgs
from precision_oat.errors import UserError
from precision_oat.quiet import no_peft_deprecation_notice


def add_lora(model, lora: LoraArgs):
    """``model`` with adapters of rank ``lora.lora_rank`` on the target modules it has."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=lora.lora_rank, lora_alpha=lora.lora_alpha, lora_dropout=lora.lora_dropout,
                        target_modules=lora_targets(model, lora))
    with no_peft_deprecation_notice():
        return get_peft_model(model, config)


def lora_targets(model, lora: LoraArgs) -> list[str]:
    """The names of ``--lora-target-modules`` that ``model`` has, checked before a run writes anything: each must
    name weight layers, and the rank must not exceed the narrower side of any of them."""
    targets = present_targets(model, lora)
    layers = {n: m for n, m in model.named_modules() if n.rsplit(".", 1)[-1] in targets}
    blocks = sorted({n.rsplit(".", 1)[-1] for n, m in layers.items() if _weight_shape(m) is None})
    if blocks:
        raise UserError(f"--lora-target-modules: {', '.join(blocks)} holds no weight matrix of its own; name the "
                        f"layers inside it (this model's: {', '.join(_weight_layer_names(model))})")
    width, name = min((min(_weight_shape(m)), n) for n, m in layers.items())
    if lora.lora_rank > width:
        # B·A has rank ≤ min(in, out) whatever r is: a larger r only adds parameters (and memory).
        raise UserError(f"--lora-rank {lora.lora_rank}: above {width}, the narrower side of the adapted layer {name}, "
                        f"where it adds parameters but no capacity; pass at most {width}")
    return targets


def check_targets_of(folder: str, lora: LoraArgs) -> None:
    """:func:`present_targets` on the architecture in ``folder``, built on the meta device (no weight is read): the
    Oat backend's check before Oat loads the model, whose peft would leave a misspelt name without an adapter.
    A config that cannot be read here is left to Oat's own load to report."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(folder)
    except OSError:
        return
    with torch.device("meta"):
        present_targets(AutoModelForCausalLM.from_config(config), lora)


def present_targets(model, lora: LoraArgs) -> list[str]:
    """The names of ``--lora-target-modules`` that ``model`` has: of the default list, those an architecture lacks
    are left out; a name given by hand must exist."""
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [m for m in lora.lora_target_modules if m in present]
    missing = [m for m in lora.lora_target_modules if m not in present]
    if missing and (not targets or tuple(lora.lora_target_modules) != LoraArgs.lora_target_modules):
        raise UserError(f"--lora-target-modules {' '.join(missing)}: no module of the model has "
                        f"{'this name' if len(missing) == 1 else 'these names'}; name its weight layers "
                        f"(this model's: {', '.join(_weight_layer_names(model))})")
    return targets


def _weight_layer_names(model) -> list[str]:
    return sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if _weight_shape(m)})


def _weight_shape(module):
    """The shape of a module's own 2-D weight (a linear or embedding layer), or None."""
    weight = getattr(module, "weight", None)
    return tuple(weight.shape) if isinstance(weight, torch.Tensor) and weight.dim() == 2 else None


def hf_name(peft_name: str) -> str:
    """The plain HF name of a peft-wrapped weight (``base_model.model.x.base_layer.weight`` → ``x.weight``)."""
    return peft_name.removeprefix("base_model.model.").replace(".base_layer", "")


def merged_lora_weights(model, masters: dict, base_weights: dict):
    """(HF name, W + (α/r)·B·A) of every adapted layer, from fp32 masters of A and B and the fp32 base W.

    Computed from the masters, so the sampler never sees the adapters' rounding.
    """
    for name, module in model.named_modules():
        if not hasattr(module, "lora_A") or "default" not in module.lora_A:
            continue
        a = masters[f"{name}.lora_A.default.weight"].float()
        b = masters[f"{name}.lora_B.default.weight"].float()
        name_hf = hf_name(f"{name}.base_layer.weight")
        yield name_hf, base_weights[name_hf].to(a.device) + module.scaling["default"] * (b @ a)
