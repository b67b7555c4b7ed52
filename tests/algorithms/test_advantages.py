"""Advantage estimators on one hand-worked reward matrix.

rewards = [[1, 0, 0, 1],      mean 0.5,  deviations ±0.5,             unbiased std √(1/3)
           [0, 0, 0, 1]]      mean 0.25, deviations [-¼, -¼, -¼, ¾],  unbiased std √(0.75/3) = 0.5
"""

import math

import pytest
import torch

from precision_oat.algorithms import AlgorithmSpec, DrGRPOMixin, GRPOMixin, PolicyLoss, ReinforceMixin, RLOOMixin

REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)


def estimator(mixin, adv_eps=1e-6):
    cls = type("L", (mixin, PolicyLoss), {})
    loss = cls()
    loss.algo = AlgorithmSpec("x", "pg", "none", "token-mean", adv_eps=adv_eps)
    return loss


def test_grpo_divides_by_unbiased_group_std_plus_eps():
    eps = 1e-6
    a = 0.5 / (math.sqrt(1 / 3) + eps)  # 0.5 / (0.57735 + ε) ≈ 0.866024
    b = 1 / (0.5 + eps)  # row 2: deviation / (0.5 + ε)
    expected = torch.tensor([[a, -a, -a, a], [-0.25 * b, -0.25 * b, -0.25 * b, 0.75 * b]], dtype=torch.float64)
    got = estimator(GRPOMixin, eps).compute_advantages(REWARDS)
    torch.testing.assert_close(got, expected, atol=1e-9, rtol=1e-7)


def test_grpo_on_a_constant_group_is_zero_not_nan():
    # std = 0, so (r − mean) / (0 + ε) = 0 / ε = 0
    got = estimator(GRPOMixin).compute_advantages(torch.ones(1, 4))
    assert torch.equal(got, torch.zeros(1, 4))


def test_drgrpo_only_subtracts_the_group_mean():
    expected = torch.tensor([[0.5, -0.5, -0.5, 0.5], [-0.25, -0.25, -0.25, 0.75]], dtype=torch.float64)
    torch.testing.assert_close(estimator(DrGRPOMixin).compute_advantages(REWARDS), expected, atol=1e-12, rtol=0)


def test_reinforce_returns_the_reward_itself():
    got = estimator(ReinforceMixin).compute_advantages(REWARDS)
    torch.testing.assert_close(got, REWARDS, atol=0, rtol=0)
    assert got.data_ptr() != REWARDS.data_ptr()


def test_reinforce_casts_integer_rewards_to_float():
    assert estimator(ReinforceMixin).compute_advantages(torch.tensor([[1, 0]])).dtype == torch.float32


def test_rloo_subtracts_the_mean_of_the_other_samples():
    # row 1, sample 1: 1 − mean(0, 0, 1) = 2/3;  sample 2: 0 − mean(1, 0, 1) = −2/3
    # row 2, sample 1: 0 − mean(0, 0, 1) = −1/3; sample 4: 1 − mean(0, 0, 0) = 1
    expected = torch.tensor([[2 / 3, -2 / 3, -2 / 3, 2 / 3], [-1 / 3, -1 / 3, -1 / 3, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(estimator(RLOOMixin).compute_advantages(REWARDS), expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("mixin, name", [(RLOOMixin, "rloo"), (GRPOMixin, "grpo"), (DrGRPOMixin, "drgrpo")])
def test_group_estimators_refuse_a_single_sample_per_prompt(mixin, name):
    with pytest.raises(ValueError, match=rf"--advantage {name}.*G ≥ 2.*G = 1"):
        estimator(mixin).compute_advantages(torch.ones(3, 1))


def test_group_estimators_refuse_flat_rewards():
    with pytest.raises(ValueError, match=r"shape \[num_prompts, G\]"):
        estimator(DrGRPOMixin).compute_advantages(torch.ones(4))
