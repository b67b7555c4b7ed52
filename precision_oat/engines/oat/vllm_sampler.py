"""Oat's vLLM engine behind the :class:`~precision_oat.sampling.Sampler` seam.

The actor keeps one code path for both samplers: token ids in, :class:`Completion` out,
with log μ of every sampled token. Weights reach this engine through Oat's own weight sync
(``WorkerWrap.update_weight``), so :meth:`load_weights` is not used here.

vLLM 0.8.4 (V1 engine) reports log-probabilities of the raw logits, before temperature and
top-p; the learner scores logits / temperature. The two agree for temperature 1 and
top_p 1, the paper's setting, and the program warns otherwise.
"""

from __future__ import annotations

from typing import Iterable

import torch
import vllm

from precision_oat.sampling import Completion, SamplingParams


class OatVLLMSampler:
    def __init__(self, llm: "vllm.LLM"):
        self.llm = llm

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        sampling = vllm.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_new_tokens,
            stop_token_ids=list(params.stop_token_ids),
            seed=params.seed,
            # 0 extra candidates: only the sampled token's log-probability.
            logprobs=0,
        )
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], sampling_params=sampling, use_tqdm=False)
        completions = []
        for prompt, output in zip(prompts, outputs):
            for sample in output.outputs:
                tokens = list(sample.token_ids)
                logprobs = [step[token].logprob for token, step in zip(tokens, sample.logprobs)]
                completions.append(Completion(list(prompt), tokens, logprobs, sample.finish_reason == "stop"))
        return completions

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        raise NotImplementedError("Oat pushes weights into vLLM itself (PPOActor.update_weight)")
