"""The trainer's log-probs in chunks: the values of one full-vocabulary fp32 log-softmax, bit for bit,
its gradients, no fp32 tensor larger than a chunk of positions × the vocabulary, and, from a model,
no tensor of any dtype that wide: its output projection runs a chunk at a time too. Compiled, a chunk
gives the same values to fp32 rounding and writes no fp32 tensor of the vocabulary's width at all."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from precision_oat.rl.scoring import logits_logprobs, projects_plainly, token_logprobs
from precision_oat.rl.truncation import Truncation
from tests.conftest import tiny_model

VOCAB = 50
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def full_vocabulary_logprobs(logits, input_ids, temperature, truncation=None):
    """The straightforward computation: log_softmax over [B, L-1, V] in fp32, then the kept sets' segment log-sum-exp."""
    scaled = logits[:, :-1].float() / temperature
    targets = input_ids[:, 1:]
    logps = scaled.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1)
    if truncation is None:
        return logps
    b, l, v = scaled.shape
    flat = scaled.reshape(b * l, v)
    counts = truncation.counts.reshape(-1)
    positions = counts.nonzero().squeeze(-1)
    segment = torch.repeat_interleave(torch.arange(len(positions)), counts[positions])
    picked = flat[positions[segment], truncation.ids]
    peak = torch.full((len(positions),), float("-inf")).scatter_reduce(0, segment, picked.detach(), "amax")
    mass = torch.zeros_like(peak).index_add(0, segment, (picked - peak[segment]).exp())
    chosen = flat[positions, targets.reshape(-1)[positions]]
    return logps.reshape(-1).index_put((positions,), chosen - peak - mass.log()).reshape(b, l)


def _batch(dtype, seed=0, rows=3, length=9):
    g = torch.Generator().manual_seed(seed)
    logits = (4 * torch.randn(rows, length, VOCAB, generator=g)).to(dtype)
    ids = torch.randint(0, VOCAB, (rows, length), generator=g)
    # Responses start after a prompt of 3 tokens; the last row is 2 tokens shorter (right padding).
    mask = torch.zeros(rows, length - 1)
    mask[:, 2:] = 1.0
    mask[-1, -2:] = 0.0
    return logits, ids, mask


def _kept_sets(ids, mask, seed=0):
    """A random top-p set at every response position, holding the sampled token."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.zeros(mask.shape, dtype=torch.long)
    kept = []
    for i, t in mask.nonzero().tolist():
        others = torch.randperm(VOCAB, generator=g)[: int(torch.randint(1, 12, (1,), generator=g))]
        chosen = [int(ids[i, t + 1])] + [v for v in others.tolist() if v != ids[i, t + 1]]
        counts[i, t] = len(chosen)
        kept += chosen
    return Truncation(counts, torch.tensor(kept))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("top_p", [False, True])
def test_chunked_logprobs_are_bit_identical_to_the_full_vocabulary_softmax_at_every_chunk_size(dtype, top_p):
    logits, ids, mask = _batch(dtype)
    truncation = _kept_sets(ids, mask) if top_p else None
    reference = full_vocabulary_logprobs(logits, ids, 0.7, truncation)
    for chunk_size in (1, 3, 7, 1024):
        assert torch.equal(logits_logprobs(logits, ids, 0.7, truncation, chunk_size=chunk_size), reference)
        masked = logits_logprobs(logits, ids, 0.7, truncation, response_mask=mask, chunk_size=chunk_size)
        assert torch.equal(masked, torch.where(mask.bool(), reference, 0.0))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("top_p", [False, True])
def test_chunked_gradient_matches_the_full_vocabulary_softmax(dtype, top_p):
    logits, ids, mask = _batch(dtype)
    truncation = _kept_sets(ids, mask) if top_p else None
    upstream = torch.randn(mask.shape, generator=torch.Generator().manual_seed(1)) * mask
    reference = logits.clone().requires_grad_()
    (full_vocabulary_logprobs(reference, ids, 0.7, truncation) * upstream).sum().backward()
    chunked = logits.clone().requires_grad_()
    (logits_logprobs(chunked, ids, 0.7, truncation, mask, chunk_size=3) * upstream).sum().backward()
    assert chunked.grad.dtype == dtype
    # The backward takes the softmax as exp(z − log Σ exp z) from the saved normaliser rather than
    # exp(log_softmax(z)): a few fp32 roundings apart, so equal to fp32 rounding, then cast to the dtype.
    tolerance = {torch.float32: 1e-6, torch.bfloat16: 8e-3, torch.float16: 1e-3}[dtype]
    torch.testing.assert_close(chunked.grad.float(), reference.grad.float(), rtol=tolerance, atol=tolerance)
    # Prompt and padding positions get no gradient.
    assert torch.count_nonzero(chunked.grad[:, :-1][mask == 0]) == 0


def test_chunked_gradient_on_a_tiny_model_matches_the_full_vocabulary_softmax():
    ids = torch.randint(2, 32, (3, 10), generator=torch.Generator().manual_seed(0))
    attention = torch.ones_like(ids)
    mask = torch.zeros(3, 9)
    mask[:, 3:] = 1.0
    upstream = torch.randn(3, 9, generator=torch.Generator().manual_seed(1)) * mask
    grads = []
    for scoring in (lambda logits: full_vocabulary_logprobs(logits, ids, 0.7),
                    lambda logits: logits_logprobs(logits, ids, 0.7, response_mask=mask, chunk_size=4)):
        model = tiny_model()
        logits = model(input_ids=ids, attention_mask=attention).logits
        (scoring(logits) * upstream).sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    # fp32 throughout: the logits' gradients differ by fp32 rounding (~1e-7 of their largest value),
    # and so does every weight's gradient, relative to its largest entry.
    for name, grad in grads[0].items():
        assert float((grads[1][name] - grad).abs().max()) <= 1e-6 * float(grad.abs().max()), name


class LargestFloat32(TorchDispatchMode):
    """Records the element count of the largest fp32 tensor any operation returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("top_p", [False, True])
def test_scoring_never_makes_an_fp32_tensor_larger_than_a_chunk_of_the_vocabulary(top_p):
    logits, ids, mask = _batch(torch.bfloat16, rows=4, length=33)
    truncation = _kept_sets(ids, mask) if top_p else None
    logits.requires_grad_()
    chunk_size = 4
    with LargestFloat32() as recorder:
        logprobs = logits_logprobs(logits, ids, 0.7, truncation, mask, chunk_size=chunk_size)
        (logprobs * mask).sum().backward()
    assert 0 < recorder.largest <= chunk_size * VOCAB


def largest_allocation_below(limit: int, run) -> int:
    """The most bytes, under ``limit``, that one operation allocates itself while ``run()`` runs (the torch
    profiler's record, which counts a compiled graph's buffers as the graph's own)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as profiler:
        run()
    return max(e.self_cpu_memory_usage for e in profiler.events() if e.self_cpu_memory_usage < limit)


def test_compiled_chunks_give_the_log_softmax_to_fp32_rounding_and_write_no_fp32_chunk_of_the_vocabulary():
    vocab, chunk_size = 2048, 16
    g = torch.Generator().manual_seed(0)
    logits = (4 * torch.randn(4, 33, vocab, generator=g)).half()
    ids = torch.randint(0, vocab, (4, 33), generator=g)
    mask = torch.ones(4, 32)
    mask[:, :5] = 0.0
    upstream = torch.randn(mask.shape, generator=g) * mask
    reference = logits.clone().requires_grad_()
    expected = full_vocabulary_logprobs(reference, ids, 0.7)
    (expected * upstream).sum().backward()

    def update(compiled):
        z = logits.clone().requires_grad_()
        logprobs = logits_logprobs(z, ids, 0.7, response_mask=mask, chunk_size=chunk_size, compiled=compiled)
        (logprobs * upstream).sum().backward()
        return logprobs, z.grad

    logprobs, grad = update(compiled=True)
    torch.testing.assert_close(logprobs, torch.where(mask.bool(), expected, 0.0), rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(grad.float(), reference.grad.float(), rtol=1e-3, atol=1e-3)
    # Eagerly each chunk's passes write fp32 tensors of its width; compiled, the widest thing written
    # is the chunk's gradient in fp16 (the whole logits and their gradient excepted).
    whole = logits.numel() * logits.element_size()
    assert largest_allocation_below(whole, lambda: update(compiled=False)) >= chunk_size * vocab * 4
    assert largest_allocation_below(whole, lambda: update(compiled=True)) <= chunk_size * vocab * 2


def test_compiled_chunks_with_top_p_kept_sets_are_the_eager_ones():
    logits, ids, mask = _batch(torch.float16)
    truncation = _kept_sets(ids, mask)
    compiled = logits_logprobs(logits, ids, 0.7, truncation, mask, chunk_size=3, compiled=True)
    assert torch.equal(compiled, logits_logprobs(logits, ids, 0.7, truncation, mask, chunk_size=3))


# --- from a model: the output projection in chunks ---


def _sequences(vocab, rows=4, length=37, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, vocab, (rows, length), generator=g)
    attention = torch.ones_like(ids)
    attention[-1, -5:] = 0  # right padding
    mask = torch.zeros(rows, length - 1)
    mask[:, 6:] = 1.0
    mask[-1, -5:] = 0.0
    return ids, attention, mask


def _from_full_logits(model, ids, attention, mask, temperature, truncation=None):
    logits = model(input_ids=ids, attention_mask=attention).logits
    return logits_logprobs(logits, ids, temperature, truncation, mask)


@pytest.mark.parametrize("top_p", [False, True])
@pytest.mark.parametrize("kind", ["qwen2", "llama"])  # a head tied to the embedding, and an untied one
def test_model_scoring_matches_the_full_logits_in_values_and_gradients(kind, top_p):
    ids, attention, mask = _sequences(vocab=VOCAB)
    truncation = _kept_sets(ids, mask) if top_p else None
    upstream = torch.randn(mask.shape, generator=torch.Generator().manual_seed(1)) * mask
    results = []
    for chunked in (False, True):
        model = tiny_model(kind, vocab=VOCAB)
        if chunked:
            logprobs = token_logprobs(model, ids, attention, 0.7, truncation, mask, chunk_size=5)
        else:
            logprobs = _from_full_logits(model, ids, attention, mask, 0.7, truncation)
        (logprobs * upstream).sum().backward()
        results.append((logprobs.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (reference, reference_grads), (values, grads) = results
    # fp32: the projection of a chunk of rows rounds as the projection of all of them, to fp32 rounding.
    torch.testing.assert_close(values, reference, rtol=0, atol=1e-5)
    assert torch.count_nonzero(values[mask == 0]) == 0
    for name, grad in reference_grads.items():
        assert float((grads[name] - grad).abs().max()) <= 1e-5 * float(grad.abs().max()), name


class VocabularyWide(TorchDispatchMode):
    """Watches the tensors, of any dtype, whose last dimension is the vocabulary, other than one shaped like
    the output projection's weight (its gradient): the element count of the largest, and the operators that
    wrote the fp32 ones, in call order."""

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.vocab = vocab
        self.weight_shape = sorted((vocab, hidden))
        self.largest = 0
        self.fp32_writers = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            wide = isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] == self.vocab
            if wide and sorted(t.shape) != self.weight_shape:
                self.largest = max(self.largest, t.numel())
                if t.dtype == torch.float32:
                    self.fp32_writers.append(func.overloadpacket.__name__)
        return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_model_scoring_never_holds_more_than_a_chunk_of_the_vocabulary_in_any_dtype(dtype):
    # The vocabulary (96) differs from every other width in this model (hidden 64, MLP 128, head 16, 37 tokens).
    vocab, chunk_size = 96, 8
    ids, attention, mask = _sequences(vocab)
    model = tiny_model("llama", vocab=vocab).to(dtype).train()
    with VocabularyWide(vocab, hidden=64) as recorder:
        (token_logprobs(model, ids, attention, 0.7, response_mask=mask, chunk_size=chunk_size) * mask).sum().backward()
    assert 0 < recorder.largest <= chunk_size * vocab
    # The same forward through the model's own logits holds all positions at once: the recorder sees it.
    with VocabularyWide(vocab, hidden=64) as recorder:
        model(input_ids=ids, attention_mask=attention)
    assert recorder.largest == ids.numel() * vocab


class AttentionMasks(TorchFunctionMode):
    """The ``attn_mask`` of every scaled-dot-product attention the model runs."""

    def __init__(self):
        super().__init__()
        self.masks = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            self.masks.append(kwargs.get("attn_mask", args[3] if len(args) > 3 else None))
        return func(*args, **kwargs)


def test_right_padded_rows_reach_attention_without_a_mask_and_score_as_each_row_alone():
    ids, attention, mask = _sequences(vocab=VOCAB)
    model = tiny_model("llama", vocab=VOCAB)
    assert model.config._attn_implementation == "sdpa"
    with AttentionMasks() as seen:
        batch = token_logprobs(model, ids, attention, 0.7, response_mask=mask)
    assert seen.masks and all(m is None for m in seen.masks)
    last = int(attention[-1].sum())
    alone = token_logprobs(model, ids[-1:, :last], attention[-1:, :last], 0.7, response_mask=mask[-1:, :last - 1])
    torch.testing.assert_close(batch[-1, :last - 1], alone[0], rtol=0, atol=1e-5)
    # A left-padded row would see its padding without the mask: the mask is kept.
    left = torch.cat([attention[-1:, last:], attention[-1:, :last]], dim=1)
    with AttentionMasks() as seen:
        token_logprobs(model, ids[-1:], left, 0.7, response_mask=mask[-1:])
    assert seen.masks and all(m is not None for m in seen.masks)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_scoring_passes_over_a_chunks_vocabulary_in_fp32_only_to_cast_it_and_take_its_log_softmax(temperature):
    vocab, chunk_size = 96, 8
    ids, attention, mask = _sequences(vocab)
    model = tiny_model("llama", vocab=vocab).to(torch.bfloat16)
    chunks = -(-int(mask.sum()) // chunk_size)
    with torch.no_grad(), VocabularyWide(vocab, hidden=64) as recorder:
        token_logprobs(model, ids, attention, temperature, response_mask=mask, chunk_size=chunk_size)
    per_chunk = ["_to_copy", "_log_softmax"] if temperature == 1.0 else ["_to_copy", "div", "_log_softmax"]
    assert recorder.fp32_writers == per_chunk * chunks


def test_model_scoring_with_no_response_position_still_carries_a_gradient():
    ids, attention, mask = _sequences(vocab=VOCAB)
    model = tiny_model(vocab=VOCAB)
    logprobs = token_logprobs(model, ids, attention, 1.0, response_mask=torch.zeros_like(mask))
    logprobs.sum().backward()  # an empty micro-batch contributes a zero gradient, not an error
    assert not logprobs.any()
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_a_model_that_soft_caps_its_logits_is_scored_from_them():
    from transformers import AutoModelForCausalLM, Gemma2Config

    config = Gemma2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=16, final_logit_softcapping=3.0)
    assert not projects_plainly(config) and projects_plainly(tiny_model().config)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).float().eval()
    ids, attention, mask = _sequences(vocab=VOCAB)
    expected = _from_full_logits(model, ids, attention, mask, 0.7)
    assert torch.equal(token_logprobs(model, ids, attention, 0.7, response_mask=mask, chunk_size=5), expected)
