"""The built-in sampler: its decoder, its sampling rule, and agreement with the learner in fp32."""

import math

import pytest
import torch

from precision_oat.samplers.decoder import Decoder
from precision_oat.samplers.kv_cache import KVCacheSampler, sample_next
from precision_oat.samplers.sampler import SamplingParams
from tests.conftest import tiny_model

PROMPTS = [[3, 4, 5], [7, 8], [9, 10, 11, 12, 13]]


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_decoder_matches_hf_forward_in_fp32(kind):
    model = tiny_model(kind)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    expected = model(input_ids=ids).logits[:, -1]
    decoder = Decoder(model)
    # Prefill four tokens, then decode two against the cache.
    mask = torch.ones(1, 4, dtype=torch.long)
    _, cache = decoder.forward(ids[:, :4], torch.arange(4)[None], mask, None)
    for t in (4, 5):
        mask = torch.ones(1, t + 1, dtype=torch.long)
        logits, cache = decoder.forward(ids[:, t : t + 1], torch.tensor([[t]]), mask, cache)
    assert torch.allclose(logits, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", ["mistral", "qwen2"])
def test_a_sliding_window_model_samples_what_the_trainer_scores_in_fp32(kind):
    from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from precision_oat.rl.scoring import token_logprobs

    torch.manual_seed(0)
    shape = dict(vocab_size=32, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=128)
    # A window of 4 tokens, far shorter than the sequences; Qwen2's from its second layer on.
    model = (MistralForCausalLM(MistralConfig(**shape, sliding_window=4)) if kind == "mistral" else
             Qwen2ForCausalLM(Qwen2Config(**shape, use_sliding_window=True, sliding_window=4, max_window_layers=1)))
    model.float().eval()
    sampler = KVCacheSampler(model, torch.float32)
    assert sampler.decoder is not None
    completions = sampler.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=12, stop_token_ids=(), seed=3))
    for c in completions:
        ids = torch.tensor([c.prompt_ids + c.response_ids])
        trainer = token_logprobs(model, ids, torch.ones_like(ids), 1.0)[0, len(c.prompt_ids) - 1 :]
        assert (trainer - torch.tensor(c.logprobs)).abs().max() < 1e-5


def test_sample_next_reports_logprob_of_the_distribution_sampled_from():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    # T = 0.5 doubles the logits; top-p 0.9: sorted probs of [4,2,0,-2] are
    # 0.8668, 0.1173, 0.0159, 0.0021 → mass before token 2 is 0.984 ≥ 0.9, so tokens 2, 3 drop.
    for u in torch.linspace(0, 1 - 2**-24, 20):
        token, logp, keep = sample_next(logits, 0.5, 0.9, u[None])
        kept = torch.tensor([4.0, 2.0]).log_softmax(-1)
        assert keep.tolist() == [[True, True, False, False]]
        assert token.item() in (0, 1)
        assert math.isclose(logp.item(), kept[token.item()].item(), rel_tol=1e-6)


def test_generate_returns_n_samples_per_prompt_prompt_major_and_stops_on_eos():
    model = tiny_model()
    sampler = KVCacheSampler(model, torch.float32, pad_token_id=0)
    out = sampler.generate(PROMPTS, SamplingParams(n=3, max_new_tokens=12, stop_token_ids=(1, 2), seed=0))
    assert [c.prompt_ids for c in out] == [p for p in PROMPTS for _ in range(3)]
    for c in out:
        assert len(c.response_ids) == len(c.logprobs) <= 12
        assert all(lp <= 0 and math.isfinite(lp) for lp in c.logprobs)
        # finished ⇔ the last token is a stop token, and no stop token appears before it.
        assert c.finished == (c.response_ids[-1] in (1, 2))
        assert not any(t in (1, 2) for t in c.response_ids[:-1])
        assert c.finished or len(c.response_ids) == 12


def test_same_seed_same_samples():
    sampler = KVCacheSampler(tiny_model(), torch.float32)
    a = sampler.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=6, seed=3))
    b = sampler.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=6, seed=3))
    assert [c.response_ids for c in a] == [c.response_ids for c in b]


def test_load_weights_casts_into_the_sampler_copy_only():
    model = tiny_model()
    sampler = KVCacheSampler(model, torch.bfloat16)
    name, weight = next(iter(model.named_parameters()))
    sampler.load_weights([(name, torch.ones_like(weight))])
    assert sampler.model.get_parameter(name).dtype == torch.bfloat16
    assert torch.all(sampler.model.get_parameter(name) == 1)
    assert not torch.all(weight == 1)
    with pytest.raises(KeyError, match="no parameter"):
        sampler.load_weights([("nope.weight", weight)])


def test_a_tied_head_loads_under_its_state_dict_name():
    # A state_dict (what Oat pushes with LoRA) names a tied head twice; both names reach the one shared tensor.
    model = tiny_model("qwen2")
    sampler = KVCacheSampler(model, torch.float32)
    state = model.state_dict()
    assert "lm_head.weight" in state and "lm_head.weight" not in dict(model.named_parameters())
    head = torch.randn_like(state["lm_head.weight"])
    sampler.load_weights([(name, head if name == "lm_head.weight" else t) for name, t in state.items()])
    assert torch.equal(sampler.model.get_input_embeddings().weight, head)
    assert torch.equal(sampler.model.get_output_embeddings().weight, head)


def test_inverse_cdf_draws_follow_the_distribution():
    logits = torch.tensor([[1.0, 0.0, -1.0, 2.0]])
    probs = logits.softmax(-1)[0]
    u = torch.rand(40_000, generator=torch.Generator().manual_seed(1))
    tokens, _, _ = sample_next(logits.expand(len(u), -1), 1.0, 1.0, u)
    freq = torch.bincount(tokens, minlength=4).float() / len(u)
    # Four standard errors of a frequency near 0.5 over 40k draws is 0.01.
    assert torch.allclose(freq, probs, atol=0.01), (freq, probs)
    # u at the very top of [0, 1) never lands on a token with no mass.
    masked = torch.tensor([[1.0, 0.0, float("-inf")]])
    token, logp, _ = sample_next(masked, 1.0, 1.0, torch.tensor([1 - 2**-24]))
    assert token.item() == 1 and math.isfinite(logp.item())


def test_a_response_depends_on_its_place_in_the_batch_not_on_the_other_rows():
    sampler = KVCacheSampler(tiny_model(), torch.float32)
    whole = sampler.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=8, seed=3))
    # The same prompts sampled as two slices of the batch, as data-parallel ranks do.
    head = sampler.generate(PROMPTS[:1], SamplingParams(n=2, max_new_tokens=8, seed=3))
    tail = sampler.generate(PROMPTS[1:], SamplingParams(n=2, max_new_tokens=8, seed=3, first_prompt=1))
    assert [c.response_ids for c in head + tail] == [c.response_ids for c in whole]
    # Same prompt, different place: a different stream.
    moved = sampler.generate(PROMPTS[:1], SamplingParams(n=2, max_new_tokens=8, seed=3, first_prompt=5))
    assert [c.response_ids for c in moved] != [c.response_ids for c in head]


def test_row_1_of_seed_s_does_not_draw_the_stream_of_row_0_of_seed_s_plus_1():
    # Streams numbered seed + row would make these two responses one and the same draw.
    sampler = KVCacheSampler(tiny_model(), torch.float32)
    pair = sampler.generate(PROMPTS[:1], SamplingParams(n=2, max_new_tokens=8, seed=3))
    next_seed = sampler.generate(PROMPTS[:1], SamplingParams(n=1, max_new_tokens=8, seed=4))
    assert pair[1].response_ids != next_seed[0].response_ids


def test_an_fp16_sampler_whose_logits_overflow_says_so_in_one_line():
    from precision_oat.precision.policy import PrecisionError

    model = tiny_model()
    with torch.no_grad():
        model.model.norm.weight.mul_(1e6)  # the last hidden state, and so the logits, far past 65504
    sampler = KVCacheSampler(model, torch.float16)
    with pytest.raises(PrecisionError, match=r"in fp16 gave inf/nan logits at response token 1: .*--sampler-dtype"):
        sampler.generate(PROMPTS, SamplingParams(n=1, max_new_tokens=4, seed=0))
    # The same weights in fp32 sample normally.
    assert len(KVCacheSampler(model, torch.float32).generate(PROMPTS, SamplingParams(n=1, max_new_tokens=4, seed=0))) == 3


def _policy_with_tiny_logits():
    """The tiny model with its logits scaled to ~1e-7, so that temperatures near 1e-7 still leave several likely
    tokens."""
    model = tiny_model()
    with torch.no_grad():
        model.model.norm.weight.mul_(1e-6)
    return model


def test_below_any_clamp_the_sampler_draws_at_the_temperature_the_trainer_scores_at():
    # Before: the sampler divided by max(T, 1e-6), so at T = 1e-7 μ was taken at ten times the trainer's temperature.
    from precision_oat.rl.scoring import token_logprobs

    model, temperature = _policy_with_tiny_logits(), 1e-7
    sampler = KVCacheSampler(model, torch.float32)
    for c in sampler.generate(PROMPTS, SamplingParams(n=2, temperature=temperature, max_new_tokens=8, seed=3)):
        ids = torch.tensor([c.prompt_ids + c.response_ids])
        trainer = token_logprobs(model, ids, torch.ones_like(ids), temperature)[0, len(c.prompt_ids) - 1 :]
        assert (trainer - torch.tensor(c.logprobs)).abs().max() < 1e-5


def test_temperature_0_decodes_greedily_whatever_the_seed():
    # Before: 0 sampled at 1e-6, which is not greedy when the logits are that close.
    model = _policy_with_tiny_logits()
    sampler = KVCacheSampler(model, torch.float32)
    for seed in (0, 1):
        for c in sampler.generate(PROMPTS, SamplingParams(n=2, temperature=0.0, max_new_tokens=6, seed=seed)):
            ids = torch.tensor([c.prompt_ids + c.response_ids])
            logits = model(input_ids=ids).logits[0, len(c.prompt_ids) - 1 : -1]
            assert c.response_ids == logits.argmax(-1).tolist() and c.logprobs == [0.0] * len(c.response_ids)
