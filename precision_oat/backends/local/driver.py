"""The local backend's driver: everything that happens once per run, in order, then the step loop.

    train(args)   check the flags against the launcher, the installed stacks and the devices
                  → this process's place among the launcher's processes
                  → check the run folder, reading only (a new run's, or a resume's flags)
                  → load the policy and the task, and check the prompts' lengths
                  → claim the run folder (lock; a new run's marker and config.json)
                  → build the run: fp16 preflight, sampler, learner, actor, resume
                  → :func:`~precision_oat.backends.local.loop.run_steps`

One process, or several under ``torchrun`` (:mod:`precision_oat.distributed.world`): every
rank runs this file; rank 0 alone writes the run folder. Your own learner or actor class runs
through the same driver: ``train(args, learner_class=MyLearner)`` or ``--learner-class
my_module:MyLearner`` (docs/extending.md).
"""

from __future__ import annotations

import importlib
import random
import traceback
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Optional

import torch

from precision_oat import stacks
from precision_oat.algorithms import PolicyLoss, compose
from precision_oat.args import Args, PrecisionArgs, RolloutArgs, TrainArgs, run_contract, unread_flags
from precision_oat.checks import checks_deferred
from precision_oat.backends.local.loop import Run, prompts_of_step, run_steps
from precision_oat.distributed.world import World, check_layout, check_same_config, under_launcher, world_from_env
from precision_oat.errors import LEARNER_MEMORY_FLAGS, UserError, out_of_memory_explained
from precision_oat.learners.builtin import PrecisionLearner
from precision_oat.learners.deepspeed_config import deepspeed_refuses, ensure_process_group
from precision_oat.learners.learner import compile_layers
from precision_oat.learners.lora import lora_targets
from precision_oat.lab.preflight import before_fp16_run
from precision_oat.models import Policy, load_policy, resolve_device
from precision_oat.precision.batch_invariance import enable_batch_invariance
from precision_oat.precision.policy import Precision, describe_contract
from precision_oat.precision.weight_sync import push_weights
from precision_oat.presets import to_values
from precision_oat.rl.actor import PrecisionActor, encode_prompt
from precision_oat.rl.settings import LearnerSettings, learner_settings
from precision_oat.runs.alarms import parse_alarms
from precision_oat.runs.checkpoint import check_world_size, checkpoint_step, require_checkpoint, resume_checkpoint
from precision_oat.runs.folder import check_new_run, config_values, output_dir_for, start_new_run
from precision_oat.runs.lock import RunLock
from precision_oat.runs.log import RunLog
from precision_oat.runs.resume import check_resume, drop_superseded, record_resume
from precision_oat.samplers import build_sampler
from precision_oat.samplers.sampler import SamplingParams, stop_token_ids
from precision_oat.tasks import build_task
from precision_oat.tasks.prompt_limit import PromptLimit, fit_prompt_limit
from precision_oat.tasks.task import Task


def train(args: Args, learner_class: Optional[type] = None, actor_class: Optional[type] = None) -> dict:
    """Run the loop; return the summary (also printed and written to OUTPUT_DIR/summary.json).

    ``learner_class`` / ``actor_class`` (or ``--learner-class`` / ``--actor-class``) replace the
    learner composed from ``--algo`` and the shared actor; checkpoints, resume, logging and the
    precision contract are the same.
    """
    # Everything that can be wrong with the arguments fails here, before any model loads or any file is written.
    learner_class = learner_class or imported_class("learner_class", args.train.learner_class)
    actor_class = actor_class or imported_class("actor_class", args.train.actor_class) or PrecisionActor
    check_classes(args.train.learner, learner_class, actor_class)
    args = with_class_names(args, learner_class, actor_class)
    settings = learner_settings(args, resolve_device(args.train.device))
    check_before_start(args.rollout, args.train, args.precision, settings.precision)
    parse_alarms(args.log.mismatch_alarm)  # a key no step logs is refused before anything is written
    world, device = processes(args.train.device)
    settings = replace(settings, device=device, world=world)  # this process's device (a rank's own GPU) and its place
    out = world.broadcast(output_dir_for(args.log.output_dir, args.algorithm.algo, args.precision.dtype))
    check_same_config(world, config_values(out, args))
    newest = require_checkpoint(out) if args.log.resume else None
    if newest is not None:
        check_world_size(newest, world)

    def check_folder() -> Optional[dict]:
        # Both read only: a refused resume or folder is refused before the model loads.
        if newest is not None:
            return check_resume(out, to_values(args), args.train.steps, checkpoint_step(newest), unread_flags(args))
        check_new_run(out, args.log.overwrite)
        return None

    finished = world.broadcast(world.on_main(check_folder))
    if finished is not None:
        return finished
    if settings.precision.batch_invariant:
        enable_batch_invariance()  # before the first CUDA work, which the model's loading may be
    # The model and the task load before the folder is claimed, so a prompt over the limit writes nothing.
    workload = load_workload(args, world)

    def claim() -> RunLock:
        lock = RunLock(out)
        if newest is None:
            start_new_run(out, args)
        return lock

    # One run at a time in a folder (rank 0 holds the lock); a new run never writes over an old one.
    with world.on_main(claim) or nullcontext():
        run = build_run(out, args, settings, learner_class, actor_class, *workload)
        return run_steps(run, args.train, args.rollout, args.eval, args.log)


def load_workload(args: Args, world: World) -> tuple[Policy, Task, list]:
    """The policy, the task and its training prompts, checked against the length limits and the process layout."""
    torch.manual_seed(args.train.seed)
    random.seed(args.train.seed)
    policy = load_policy(args.model)
    if args.lora.lora_rank:
        lora_targets(policy.model, args.lora)
    built = build_task(args.task, args.eval, policy.tokenizer)
    built.check_response_limit(policy.tokenizer, args.rollout.max_new_tokens)
    # Evaluation prompts are held to the limit too: they go to the same sampler (vLLM's max_model_len counts on it).
    task = PromptLimit(built, lambda e: len(encode_prompt(built, policy.tokenizer, e)), args.rollout.max_prompt_length,
                       args.rollout.drop_long_prompts, log=world.say)
    examples = task.train_set()
    evaluated = task.eval_sets() if args.eval.eval_every or args.train.steps == 0 else {}
    check_layout(world, args.train.learner, args.rollout.prompts_per_step, args.rollout.num_samples,
                 args.train.train_batch_size, evaluated)
    return policy, task, examples


def preflight_responses(rollout: RolloutArgs, seed: int, tokenizer) -> SamplingParams:
    """How the fp16 preflight samples the response it measures after each of the run's first prompts: as the run."""
    return SamplingParams(temperature=rollout.temperature, top_p=rollout.top_p, max_new_tokens=rollout.max_new_tokens,
                          stop_token_ids=stop_token_ids(tokenizer), seed=seed)


def build_run(out: Path, args: Args, settings: LearnerSettings, learner_class: Optional[type], actor_class: type,
              policy: Policy, task: Task, examples: list) -> Run:
    """The parts of a run in its claimed folder ``out`` (config.json is written, a resume has been checked)."""
    precision, spec, device, world = settings.precision, settings.algo, settings.device, settings.world
    say = world.say
    algorithm = (f"{spec.advantage} / {spec.objective} / {spec.correction} / {spec.reduction}"
                 if learner_class is None else learner_class.__qualname__)
    say(f"precision-oat · backend local · algo {args.algorithm.algo} ({algorithm}) · sampler {args.rollout.sampler} · "
        f"learner {args.train.learner} · device {device}" + (f" · {world.size} processes" if world.size > 1 else "") +
        args.lora.describe() +
        f"\nprecision policy:\n{precision.describe()}", flush=True)

    say(f"precision contract: {describe_contract(run_contract(args.precision, args.lora, args.backend))}", flush=True)
    if not args.log.resume:
        first = prompts_of_step(examples, 0, args.rollout.prompts_per_step, args.train.seed)
        world.on_main(lambda: before_fp16_run(
            policy.model, [encode_prompt(task, policy.tokenizer, e) for e in first], precision, args.precision, out,
            device, log=lambda line: say(line, flush=True),
            responses=preflight_responses(args.rollout, args.train.seed, policy.tokenizer),
            chunk_size=args.train.logprob_chunk_size))
    # The sampler copies the fp32 weights first; the learner then takes the model over (it
    # casts it in place and may wrap it with LoRA).
    sampler = build_sampler(policy, precision, device, args.rollout, args.train.seed,
                            folder=out / "vllm_init" / (f"rank{world.rank}" if world.size > 1 else ""),
                            longest_response=max(args.rollout.max_new_tokens, args.eval.eval_max_new_tokens or 0),
                            partial_pushes=args.lora.lora_rank > 0, world=world)
    learner = build_learner(policy.model, settings, learner_class)
    actor = actor_class(sampler, task, policy.tokenizer, args.rollout, args.train.seed, world)
    if type(actor).encode is not PrecisionActor.encode:  # an actor of its own may render prompts its own way
        examples = fit_prompt_limit(examples, [len(actor.encode(e)) for e in examples], args.rollout.max_prompt_length,
                                    args.rollout.drop_long_prompts, "prompts as the actor renders them", say)

    start_step, alarms_inside = 0, {}
    flags = to_values(args)
    if args.log.resume:
        resumed = resume_checkpoint(out, learner, world)
        start_step, alarms_inside = resumed.step, resumed.alarms
        push_weights(sampler, learner.export_weights(), precision)
        if world.is_main:
            record_resume(out, flags, start_step)
            drop_superseded(out, resumed.folder)
        say(f"resumed from {resumed.folder} at step {start_step}", flush=True)

    # Rank 0 writes the run's metrics; the other ranks only compute.
    log = RunLog(out, flags, wandb_mode=args.log.wandb_mode, project=args.log.wandb_project,
                 run_name=args.log.run_name or out.name,
                 resume_step=start_step if args.log.resume else None) if world.is_main else None
    return Run(out, world, device, precision, policy.tokenizer, examples, sampler, learner, actor, log,
               start_step, alarms_inside)


def build_learner(model, settings: LearnerSettings, learner_class: Optional[type] = None):
    """``learner_class`` as given, or ``--learner``'s base with ``--algo``'s mixins before it, built on ``model``."""
    kind = settings.train.learner
    cls = learner_class or compose(settings.algo, learner_base(kind))
    with out_of_memory_explained(f"the {kind} learner's start (weights, masters, optimiser state)",
                                 LEARNER_MEMORY_FLAGS):
        learner = cls(model, settings)
    if settings.model.compile_layers:
        compile_layers(learner.model)
    return learner


def learner_base(learner: str) -> type:
    """The class ``--learner`` names."""
    if learner == "deepspeed":
        from precision_oat.learners.deepspeed_learner import DeepSpeedLearner

        return DeepSpeedLearner
    return PrecisionLearner


def imported_class(name: str, spec: Optional[str]) -> Optional[type]:
    """The class a ``--learner-class`` / ``--actor-class`` value ``module:Class`` names (None for None)."""
    if spec is None:
        return None
    module_name, _, class_name = spec.partition(":")
    flag = "--" + name.replace("_", "-")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is None or not module_name.startswith(e.name):
            raise UserError(f"{flag} {spec}: {module_name} failed to import: {where_it_failed(e)}") from e
        raise UserError(f"{flag} {spec}: no module {module_name!r} on the path; run from the folder that holds "
                        f"{module_name.replace('.', '/')}.py, or install it") from e
    except (SyntaxError, ImportError) as e:
        # The module's own bug: one line that still finds it (the cause stays attached).
        raise UserError(f"{flag} {spec}: {module_name} failed to import: {where_it_failed(e)}") from e
    found = getattr(module, class_name, None)
    if not isinstance(found, type):
        raise UserError(f"{flag} {spec}: {module_name} has no class {class_name!r}")
    return found


def where_it_failed(error: BaseException) -> str:
    """``Type at file:line: message`` of an import's failure: the file and line of a syntax error, else the deepest frame."""
    if isinstance(error, SyntaxError):
        return f"{type(error).__name__} at {error.filename}:{error.lineno}: {error.msg}"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith("<frozen")]
    at = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(error).__name__}{at}: {(str(error).splitlines() or [''])[0]}"


# The hooks an algorithm has no neutral choice for, and the mixins that fill them.
REQUIRED_HOOKS = (("compute_advantages", "advantage estimator", "GRPOMixin"), ("objective", "objective", "ISPGMixin"))


def check_classes(learner: str, learner_class: Optional[type], actor_class: type) -> None:
    """A learner class must derive from ``--learner``'s base and fill every hook; an actor class derive from the shared actor."""
    if learner_class is not None:
        base = learner_base(learner)
        if not issubclass(learner_class, base):
            raise UserError(f"learner class {learner_class.__qualname__} does not derive from {base.__name__}, the "
                            f"base of --learner {learner}; derive it from {base.__name__} or pick the "
                            "--learner whose base it has")
        for hook, piece, example in REQUIRED_HOOKS:
            if getattr(learner_class, hook) is getattr(PolicyLoss, hook):
                raise UserError(f"learner class {learner_class.__qualname__} mixes in no {piece} (no {hook}); put "
                                f"one before its base, e.g. class {learner_class.__name__}({example}, …, "
                                f"{base.__name__}) (docs/extending.md)")
    if not issubclass(actor_class, PrecisionActor):
        raise UserError(f"actor class {actor_class.__qualname__} does not derive from "
                        "precision_oat.rl.actor.PrecisionActor")


def with_class_names(args: Args, learner_class: Optional[type], actor_class: type) -> Args:
    """``args`` naming the classes handed to :func:`train` as ``module:qualname``, so config.json records them."""
    names = {}
    if learner_class is not None and args.train.learner_class is None:
        names["learner_class"] = f"{learner_class.__module__}:{learner_class.__qualname__}"
    if actor_class is not PrecisionActor and args.train.actor_class is None:
        names["actor_class"] = f"{actor_class.__module__}:{actor_class.__qualname__}"
    if not names:
        return args
    with checks_deferred():  # a class defined in a function has a qualname no flag could spell; it is recorded as is
        return replace(args, train=replace(args.train, **names))


def check_before_start(r: RolloutArgs, t: TrainArgs, flags: PrecisionArgs, precision: Precision) -> None:
    """Refuse what the flags cannot do with this launcher, these installed stacks and these devices."""
    world = world_from_env()
    if r.vllm_tensor_parallel_size > 1 and r.sampler != "vllm":
        raise UserError(f"--vllm-tensor-parallel-size {r.vllm_tensor_parallel_size} needs --sampler vllm")
    if world.size % r.vllm_tensor_parallel_size:
        raise UserError(f"--vllm-tensor-parallel-size {r.vllm_tensor_parallel_size} does not divide the {world.size} "
                        "processes (WORLD_SIZE); use a divisor of it, or launch a multiple of it with torchrun")
    if r.sampler == "vllm":
        stacks.require("vllm")
    if t.learner == "deepspeed":
        stacks.require("deepspeed")
        if deepspeed_refuses(precision.trainer, resolve_device(t.device)):
            flag = "--trainer-dtype" if flags.trainer_dtype else "--dtype"
            raise UserError(f"{flag} fp16: --learner deepspeed needs a CUDA device for fp16 (DeepSpeed refuses "
                            f"fp16 on CPU); use --learner builtin, or {flag} bf16/fp32")
    # The evaluation sets are checked once the task is built.
    check_layout(world, t.learner, r.prompts_per_step, r.num_samples, t.train_batch_size, {})


def processes(device_flag: str) -> tuple[World, torch.device]:
    """This process's place among the launcher's processes (one without a launcher), and its device (``--device``)."""
    world = world_from_env()
    device = resolve_device(device_flag)
    if world.size > 1 or under_launcher():
        if device.type == "cuda":
            device = torch.device("cuda", world.local_rank)
            torch.cuda.set_device(device)
        ensure_process_group(device)
        world = replace(world, device=device)
    return world, device
