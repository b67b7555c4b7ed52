"""Checks shared by the group-relative estimators."""

import torch


def as_groups(rewards: torch.Tensor, estimator: str) -> torch.Tensor:
    """Rewards as a floating [P, G] tensor with G ≥ 2, or a ValueError naming ``estimator``."""
    if rewards.dim() != 2:
        raise ValueError(f"{estimator} expects rewards of shape [num_prompts, G], got {tuple(rewards.shape)}")
    if rewards.shape[1] < 2:
        raise ValueError(
            f"{estimator} compares the G samples of one prompt and needs G ≥ 2 samples per prompt, "
            f"got G = {rewards.shape[1]}; raise the number of samples per prompt or use --advantage reinforce"
        )
    return rewards if rewards.is_floating_point() else rewards.float()
