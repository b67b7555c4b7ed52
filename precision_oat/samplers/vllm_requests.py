"""The seam between a sampler's :class:`~precision_oat.samplers.sampler.SamplingParams` and vLLM: requests out,
completions back. Shared by the local backend's :class:`~precision_oat.samplers.vllm_sampler.VLLMSampler` and
Oat's engines."""

from __future__ import annotations

from precision_oat.samplers.sampler import Completion, SamplingParams
from precision_oat.seeds import row_seed


def request_params(vllm, params: SamplingParams, num_prompts: int, flat_logprobs: bool = False) -> list:
    """One ``vllm.SamplingParams`` per sample (n per prompt, prompt-major), each with its row's seed.

    Row (first_prompt + i)·n + k, sample k of prompt i, gets ``row_seed(seed, row)``, the stream
    the built-in sampler gives that row. One request per sample rather than one per prompt with
    ``n``, because vLLM seeds the k-th sample of a request s + k, which ties the streams of
    different steps and rows together by arithmetic. Only ``stop_token_ids`` end a response,
    and only the sampled token's log-probability comes back: as a dict per position, or with
    ``flat_logprobs`` (vLLM ≥ 0.11) in one flat list per response, a few Python objects a response
    instead of a few a token.
    """
    first_row = params.first_prompt * params.n
    return [
        vllm.SamplingParams(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_new_tokens,
            stop_token_ids=list(params.stop_token_ids),
            ignore_eos=True,
            seed=None if params.seed is None else row_seed(params.seed, first_row + row),
            logprobs=0,
            detokenize=False,
            **({"flat_logprobs": True} if flat_logprobs else {}),
        )
        for row in range(num_prompts * params.n)
    ]


def completions_from(prompts: list[list[int]], outputs, params: SamplingParams) -> list[Completion]:
    """vLLM's request outputs (one per entry of ``prompts``) as :class:`Completion` s, in request order."""
    stops = set(params.stop_token_ids)
    completions = []
    for prompt, out in zip(prompts, outputs):
        for sample in sorted(out.outputs, key=lambda s: s.index):
            ids = list(sample.token_ids)
            if isinstance(sample.logprobs, list):
                logprobs = [step[token].logprob for step, token in zip(sample.logprobs, ids)]
            else:  # vLLM's FlatLogprobs: with logprobs=0, the sampled token's alone at each position
                logprobs = list(sample.logprobs.logprobs)
            finished = sample.finish_reason == "stop" and bool(ids) and ids[-1] in stops
            completions.append(Completion(list(prompt), ids, logprobs, finished))
    return completions
