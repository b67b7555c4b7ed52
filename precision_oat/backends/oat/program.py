"""``run(args)``: precision-oat's learner and actor in Oat's program, launched with launchpad.

    launcher (this process)   maps the args, resolves the model folder, builds Oat's program
    ipc_server                Plasma shared memory: rollouts from actors to learners
    actor_0_i                 OatActor: sampler (vLLM or built-in) + task rewards
    learner_0_i               OatLearner: DeepSpeed, policy_loss, weight broadcast

On a CPU-only machine the layout is one actor and one learner sharing "device 0", the
built-in sampler, gloo everywhere, and a bf16 or fp32 trainer (DeepSpeed refuses fp16
without a GPU). ``python -m precision_oat.main --backend oat …`` lands here.

The console shows what the local backend prints (banner, contract, step lines, the end of the
run); everything the program's processes write goes to ``OUTPUT_DIR/oat.log`` (console.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from precision_oat import stacks
from precision_oat.args import Args, run_contract
from precision_oat.backends.oat.console import OAT_LOG, Relay, oat_output_to
from precision_oat.backends.oat.oat_log import LEARNER_CONSOLE
from precision_oat.errors import UserError
from precision_oat.precision.policy import describe_contract
from precision_oat.runs.folder import output_dir_for, start_new_run, summarize_run, write_json
from precision_oat.runs.lock import RunLock
from precision_oat.runs.log import read_metrics


def portable_embedded_policy(folder: Path) -> Path:
    """The embedded policy's weights in ``folder``, with a tokenizer saved by this venv's transformers.

    The cached policy may have been written by the core venv's newer transformers, whose
    tokenizer files transformers 4.51 (Oat's) cannot read; weights and config load in both.
    """
    from precision_oat.tasks.arithmetic import char_tokenizer, embedded_policy

    source = embedded_policy()
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        if (source / name).is_file():
            shutil.copy2(source / name, folder / name)
    char_tokenizer().save_pretrained(folder)
    return folder


def resolve_pretrain(args: Args, out: Path) -> str:
    """A folder (or hub id) that ``from_pretrained`` loads without extra arguments, as Oat does."""
    m = args.model
    if m.model is None:
        return str(portable_embedded_policy(out / "initial_model"))
    if m.gguf_file is None:
        return m.model
    # Oat loads the policy with a bare from_pretrained: dequantise the GGUF checkpoint once.
    folder = out / "initial_model"
    if not (folder / "config.json").is_file():
        from precision_oat.models import load_policy

        policy = load_policy(m)
        policy.model.save_pretrained(folder)
        policy.tokenizer.save_pretrained(folder)
    return str(folder)


def build_program(args: Args, out: Path):
    """Oat's ``get_program`` with our learner (composed from ``--algo``) and actor."""
    from oat.interface import get_program

    from precision_oat.algorithms import compose
    from precision_oat.backends.oat.cpu import one_device_for_layout
    from precision_oat.backends.oat.oat_actor import OatActor
    from precision_oat.backends.oat.oat_args import to_oat_args
    from precision_oat.backends.oat.oat_learner import OatLearner
    from precision_oat.learners.lora import check_targets_of

    pretrain = resolve_pretrain(args, out)
    if args.lora.lora_rank:
        check_targets_of(pretrain, args.lora)
    oat_args = to_oat_args(args, pretrain=pretrain, output_dir=out, cuda_devices=torch.cuda.device_count())
    learner_cls = compose(oat_args.algorithm, OatLearner)
    with one_device_for_layout():
        program, resources = get_program(oat_args, learner_cls=learner_cls, actor_cls=OatActor)
    return oat_args, program, resources


def run(args: Args) -> dict:
    """Launch the program, wait for it, and return the run's summary (also OUTPUT_DIR/summary.json)."""
    stacks.require("oat")
    out = output_dir_for(args.log.output_dir, args.algorithm.algo, args.precision.dtype).resolve()
    # One run at a time in a folder; a new run never writes over an old one.
    with RunLock(out):
        start_new_run(out, args)
        return launch(args, out)


def banner(args: Args, oat_args) -> str:
    """The start of the console, as the local backend's: the run, the precision policy and its contract."""
    spec, precision = oat_args.algorithm, oat_args.precision
    return (f"precision-oat · backend oat · algo {args.algorithm.algo} ({spec.advantage} / {spec.objective} / "
            f"{spec.correction} / {spec.reduction}) · sampler {oat_args.sampler} · {oat_args.gpus} device(s)"
            f"{' collocated' if oat_args.collocate else ''}{args.lora.describe()}\nprecision policy:\n"
            f"{precision.describe()}\nprecision contract: {describe_contract(run_contract(args.precision, args.lora, args.backend))}")


def launch(args: Args, out: Path) -> dict:
    """Build Oat's program for the claimed folder ``out``, run it to the end, and summarise it."""
    log = out / OAT_LOG
    print(f"Oat's own output (launcher, actors, learner, launchpad, DeepSpeed, vLLM): {log}", flush=True)
    with oat_output_to(log) as console:
        # Importing Oat's stack logs already (vLLM, DeepSpeed).
        import launchpad as lp

        from precision_oat.backends.oat.oat_learner import BAD_INPUT, LEARNER_ERROR

        oat_args, program, resources = build_program(args, out)
        print(banner(args, oat_args), file=console.out)
        r = args.rollout
        if oat_args.sampler == "vllm" and (r.temperature != 1.0 or r.top_p != 1.0):
            print("warning: vLLM 0.8.4 reports log μ before temperature/top-p; the mismatch metrics assume "
                  "--temperature 1 --top-p 1", file=console.err)

        error, learner_console = out / LEARNER_ERROR, out / LEARNER_CONSOLE
        error.unlink(missing_ok=True)
        learner_console.unlink(missing_ok=True)
        # The learner's step lines reach the console as it writes them (the file goes when the run ends).
        with Relay(learner_console, console.out):
            manager = lp.launch(program, launch_type=oat_args.launch_type, local_resources=resources,
                                terminal="current_terminal")
            try:
                manager.wait()
            except BaseException:
                manager.stop_and_wait()
                raise

        if error.is_file():
            reason = error.read_text()
            if reason.startswith(BAD_INPUT):
                raise UserError(reason.removeprefix(BAD_INPUT))
            raise RuntimeError(f"the Oat learner failed:\n{reason}")
        metrics = out / "metrics.jsonl"
        history = read_metrics(metrics) if metrics.is_file() else []
        if not any("loss/policy" in h for h in history):
            raise RuntimeError(f"the Oat program ended without a training step; see {log}")
    summary = summarize_run([h for h in history if "reward/mean" in h], out)
    write_json(out / "summary.json", summary)
    return summary
