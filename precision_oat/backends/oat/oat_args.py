"""Our typed arguments as Oat's ``PPOArgs``: the one place where the two vocabularies meet.

:func:`to_oat_args` fills every Oat field the backend depends on from
:class:`~precision_oat.args.Args` and does what Oat's ``default_args_validation`` would (that
function asserts a GPU count, so it is not called). :class:`PrecisionPPOArgs` adds the
fields the actor and learner read that Oat has no name for.

Sizes, in Oat's terms (W = number of learner processes):
    rollout_batch_size            prompts per RL step, all learners together
    rollout_batch_size_per_device prompts per step per learner = prompts_per_step / W
    train_batch_size              responses per optimiser step, all learners together
    train_batch_size_per_device   responses per forward/backward (DeepSpeed's micro-batch)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from oat.algorithms.ppo import PPOArgs
from oat.types import RLAlgo

from precision_oat.algorithms import AlgorithmSpec
from precision_oat.args import Args, OatArgs, algorithm_spec
from precision_oat.checks import largest_divisor_below
from precision_oat.errors import UserError
from precision_oat.precision.policy import Precision

# The actor scores with the task, not with one of Oat's oracles; any name Oat does not know works.
TASK_ORACLE = "precision-oat-task"


@dataclass
class PrecisionPPOArgs(PPOArgs):
    """Oat's ``PPOArgs`` plus the precision policy, the algorithm and the run they came from."""

    # The precision policy: sampler, trainer and master dtypes, loss scaling.
    precision: Precision = field(default_factory=Precision)
    # The resolved algorithm (which mixin fills each hook, and its constants).
    algorithm: Optional[AlgorithmSpec] = None
    # Sampler inside each actor: "vllm" (Oat's engine) or "builtin" (KV-cache decoder, runs on CPU).
    sampler: str = "vllm"
    # Folder of the run: metrics.jsonl, config.json, Oat's checkpoints under oat/.
    output_dir: str = "runs/oat"
    # The precision-oat arguments these were mapped from (task, data, logging).
    source: Optional[Args] = None


def to_oat_args(args: Args, *, pretrain: str, output_dir: Path, cuda_devices: int) -> PrecisionPPOArgs:
    """Map ``args`` onto Oat's fields.

    ``pretrain`` is a folder ``from_pretrained`` loads (the program resolves the embedded
    model and GGUF files to one); ``cuda_devices`` is the number of visible GPUs (0: CPU).
    """
    oat: OatArgs = getattr(args, "oat", None) or OatArgs()
    precision = args.precision.build()
    precision.deepspeed_config()  # refuses what DeepSpeed cannot do, before any process starts
    spec = algorithm_spec(args)
    r, t, e, m = args.rollout, args.train, args.eval, args.model

    if cuda_devices == 0:
        if r.sampler == "vllm":
            raise UserError("--sampler vllm with --backend oat needs a CUDA GPU (vLLM 0.8.4); use --sampler builtin")
        if precision.trainer == "fp16":
            raise UserError(
                "--backend oat on CPU: DeepSpeed refuses fp16 without a GPU; use --trainer-dtype bf16 or fp32"
            )
    gpus = oat.gpus or max(cuda_devices, 1)
    if cuda_devices and gpus > cuda_devices:
        raise UserError(f"--gpus {gpus}: only {cuda_devices} GPUs are visible")
    collocate = oat.collocate if oat.collocate is not None else gpus == 1
    learners = gpus if collocate else gpus - gpus // 2
    if cuda_devices == 0 and learners > 1:
        raise UserError(f"--gpus {gpus}: without CUDA the Oat backend runs one learner (its CPU shims do not combine "
                        "several: their statistics come out wrong and the second weight broadcast hangs); use --gpus 1")

    g = r.num_samples
    if r.prompts_per_step % learners:
        raise UserError(f"--prompts-per-step {r.prompts_per_step} must be a multiple of the {learners} learners")
    local_responses = r.prompts_per_step // learners * g
    global_batch = t.train_batch_size or r.prompts_per_step * g
    if global_batch % learners or local_responses % (global_batch // learners):
        raise UserError(
            f"--train-batch-size {global_batch} must split evenly over {learners} learners and divide the "
            f"{local_responses} responses each learner gets per step"
        )
    per_learner = global_batch // learners
    micro = min(t.micro_batch_size, per_learner)
    if per_learner % micro:
        raise UserError(f"--micro-batch-size {micro} must divide the {per_learner} responses per learner step; "
                        f"use {largest_divisor_below(per_learner, micro)}, or another divisor of {per_learner}")

    out = PrecisionPPOArgs(
        # --- processes ---
        launch_type="local_mp",
        gpus=gpus,
        num_gpus_per_actor=1,
        collocate=collocate,
        vllm_sleep=collocate and cuda_devices > 0,
        vllm_gpu_ratio=r.vllm_gpu_memory_utilization,
        enable_prefix_caching=r.vllm_prefix_caching,
        master_addr="127.0.0.1",
        shm_size_mb=oat.shm_size_mb,
        # --- model ---
        pretrain=pretrain,
        ref_pretrain=pretrain,
        critic_pretrain=pretrain,
        tokenizer=m.tokenizer or "",
        # Oat loads eager attention or, asked, flash-attention 2 (--attn-implementation was checked in args.py).
        flash_attn=oat.flash_attn or m.attn_implementation == "flash_attention_2",
        gradient_checkpointing=m.gradient_checkpointing,
        # Oat's fused lm-head returns log-probs rounded to the compute dtype; the plain path keeps fp32.
        use_fused_lm_head=False,
        lora_rank=args.lora.lora_rank,
        lora_alpha=int(args.lora.lora_alpha),
        lora_dropout=args.lora.lora_dropout,
        target_modules=list(args.lora.lora_target_modules),
        # --- precision (Oat's two booleans; the DeepSpeed sections come from `precision`) ---
        bf16=precision.trainer == "bf16",
        fp16=precision.trainer == "fp16",
        zero_stage=args.train.zero_stage,
        adam_offload=oat.adam_offload,
        # --- algorithm: our mixins compute advantages and loss; Oat's own terms are off ---
        algo=RLAlgo.PPO,
        # Our mixins compute advantages and loss, so this only decides how Oat's learn() batches the
        # buffer: a group method keeps each prompt's G samples together ("ppo" would shuffle the
        # groups apart and load a value model).
        critic_type="drgrpo",
        beta=0.0,
        kl_penalty_coef=0.0,
        tis_c=None,
        num_ppo_epochs=t.num_epochs,
        max_epochs=1,
        # --- rollout ---
        oracle=TASK_ORACLE,
        # Makes Oat's collector pass the reference answers on to the actors.
        online_evaluation=True,
        oracle_type="reward",
        num_samples=g,
        temperature=r.temperature,
        top_p=r.top_p,
        top_k=-1,
        generate_max_length=r.max_new_tokens,
        prompt_max_length=r.max_prompt_length,
        rollout_batch_size=r.prompts_per_step,
        rollout_batch_size_per_device=r.prompts_per_step // learners,
        pi_buffer_maxlen_per_device=local_responses,
        # --- optimiser ---
        train_batch_size=global_batch,
        train_batch_size_per_device=micro,
        learning_rate=t.learning_rate,
        lr_scheduler="constant",
        lr_warmup_ratio=0.0,
        adam_beta_1=t.adam_betas[0],
        adam_beta_2=t.adam_betas[1],
        l2=t.weight_decay,
        max_norm=t.max_grad_norm if t.max_grad_norm is not None else 0.0,
        seed=t.seed,
        # --- length of the run: Oat stops once more than max_queries responses were collected ---
        num_prompt_epoch=t.steps,
        max_queries=t.steps * r.prompts_per_step * g - 1,
        # --- evaluation ---
        eval_steps=e.eval_every or -1,
        eval_n=e.eval_samples,
        eval_temperature=e.eval_temperature,
        eval_top_p=e.eval_top_p,
        eval_top_k=-1,
        eval_generate_max_length=e.eval_max_new_tokens or r.max_new_tokens,
        eval_batch_size=max(1, r.prompts_per_step // learners),
        # --- outputs: metrics go through our RunLog; Oat saves an HF folder at the end ---
        save_path=str(Path(output_dir) / "oat"),
        save_steps=args.log.save_every or 10**9,
        max_save_num=args.log.keep_checkpoints or 10**9,
        wb_run_name=args.log.run_name or Path(output_dir).name,
        use_wb=False,
        logging_steps=1,
        # --- precision-oat ---
        precision=precision,
        algorithm=spec,
        sampler=r.sampler,
        output_dir=str(output_dir),
        source=args,
    )
    # What Oat's default_args_validation derives.
    out.enn_max_try = out.num_ensemble
    out.rm_train_budget = math.inf
    return out
