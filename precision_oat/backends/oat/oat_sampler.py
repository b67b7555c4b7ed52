"""Oat's vLLM engine behind the :class:`~precision_oat.samplers.sampler.Sampler` seam.

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

from precision_oat.samplers.sampler import Completion, SamplingParams
from precision_oat.samplers.vllm_requests import completions_from, request_params


class OatVLLMSampler:
    def __init__(self, llm: "vllm.LLM"):
        self.llm = llm

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        requests = request_params(vllm, params, len(prompts))
        rows = [p for p in prompts for _ in range(params.n)]
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in rows], sampling_params=requests, use_tqdm=False)
        return completions_from(rows, outputs, params)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        raise NotImplementedError("Oat pushes weights into vLLM itself (PPOActor.update_weight)")

    def sleep(self) -> None:
        """Oat schedules its vLLM engine itself."""

    def weights_for_check(self) -> dict[str, torch.Tensor]:
        return {}  # Oat's own weight sync is not ours to check
