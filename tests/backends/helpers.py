"""Building Args for engine tests from flat flag names, as a preset would."""

from precision_oat.args import Args
from precision_oat.presets import apply_values

FAST = dict(steps=2, prompts_per_step=8, num_samples=4, max_new_tokens=4, wandb_mode="disabled", log_every=1000, probe_dtypes=[])


def make_args(**flags) -> Args:
    return apply_values(Args(), {**FAST, **flags}, source="test")
