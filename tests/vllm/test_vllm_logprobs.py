"""μ is the log-prob of the distribution vLLM sampled from: after temperature and top-p.

Reference: an fp32 transformers forward of the same weights over prompt + response.
"""

from __future__ import annotations

import pytest
import torch

from precision_oat.samplers.sampler import SamplingParams

pytestmark = pytest.mark.requires_vllm


@torch.no_grad()
def _logits(model, completion) -> torch.Tensor:
    ids = torch.tensor([completion.prompt_ids + completion.response_ids])
    return model(input_ids=ids).logits[0, len(completion.prompt_ids) - 1 : -1].float()


def _top_p_mask(logits: torch.Tensor, p: float) -> torch.Tensor:
    """True where a token is cut: ascending by prob, the tail whose total mass is ≤ 1 − p (top one always kept)."""
    probs, order = logits.softmax(-1).sort(-1)
    cut = probs.cumsum(-1) <= 1 - p
    cut[:, -1] = False
    return torch.zeros_like(cut).scatter(-1, order, cut)


def test_logprobs_are_of_the_tempered_distribution(engine, trained, recipe):
    model, _ = trained
    completions = engine("float32").generate(recipe.make_prompts(8), SamplingParams(n=2, temperature=0.7, max_new_tokens=32, seed=3))
    got, tempered, raw = [], [], []
    for c in completions:
        logits = _logits(model, c)
        token = torch.tensor(c.response_ids)[:, None]
        got.append(torch.tensor(c.logprobs))
        tempered.append((logits / 0.7).log_softmax(-1).gather(-1, token)[:, 0])
        raw.append(logits.log_softmax(-1).gather(-1, token)[:, 0])
    got, tempered, raw = torch.cat(got), torch.cat(tempered), torch.cat(raw)
    assert (got - tempered).abs().max().item() < 1e-4
    # The untempered log-probs are far off, so the check above can tell the two apart.
    assert (got - raw).abs().mean().item() > 1e-2


def test_logprobs_are_renormalised_over_the_top_p_nucleus(engine, trained, recipe):
    model, _ = trained
    top_p, temperature = 0.8, 0.9
    completions = engine("float32").generate(
        recipe.make_prompts(8), SamplingParams(n=2, temperature=temperature, top_p=top_p, max_new_tokens=32, seed=4)
    )
    got, expected, unmasked = [], [], []
    for c in completions:
        logits = _logits(model, c) / temperature
        token = torch.tensor(c.response_ids)[:, None]
        cut = _top_p_mask(logits, top_p)
        assert not cut.gather(-1, token).any(), "sampled a token outside the nucleus"
        got.append(torch.tensor(c.logprobs))
        expected.append(logits.masked_fill(cut, float("-inf")).log_softmax(-1).gather(-1, token)[:, 0])
        unmasked.append(logits.log_softmax(-1).gather(-1, token)[:, 0])
    got, expected, unmasked = torch.cat(got), torch.cat(expected), torch.cat(unmasked)
    assert (got - expected).abs().max().item() < 1e-4
    # The nucleus really cut something: renormalised log-probs sit clearly above the full ones.
    assert (got - unmasked).mean().item() > 1e-2
