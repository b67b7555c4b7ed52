"""Where the weight sync's time goes, with a run's own learner and sampler.

    python benchmarks/weight_sync.py [--repeats 10] [--output OUT.json] -- FLAGS OF python -m precision_oat.main

e.g. SmolLM2 on one GPU, as experiments/h200/scale.sh runs its 8 × 4 loop:

    python benchmarks/weight_sync.py -- --model <HF folder> --sampler vllm --learner deepspeed --zero-stage 1 \\
        --dtype fp16 --device cuda --max-new-tokens 768 --vllm-kv-cache-gb 2

Builds the policy, the sampler and the learner as a run does (no update: the masters are the
loaded weights), then times each part, median of ``--repeats``:

    export       reading ``learner.export_weights()`` to the end (the masters, gathered where partitioned)
    push         ``push_weights`` into the awake sampler: the export, the cast to the sampler dtype,
                 the sampler's load and the precision contract's check
    sleep        ``sampler.sleep()`` (vLLM's sleep mode releases its KV cache and weights)
    push_asleep  ``push_weights`` into the sleeping sampler: the loop's sync, wake-ups included
    push_reload  only for a vLLM sampler that loads pushes directly (``loads_directly``, decided at its
                 start): the same push through vLLM's in-place reload, the path it would take otherwise

Figures printed and written to ``--output`` (JSON).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

PARTS = ("export", "push", "sleep", "push_asleep")


def command_line() -> argparse.ArgumentParser:
    """This script's own flags; the rest (after ``--``) are the run's."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=10, help="timed syncs of each kind")
    parser.add_argument("--output", type=Path, help="JSON file of the figures")
    return parser


def main(argv=None) -> dict:
    from precision_oat.backends.local.driver import build_learner
    from precision_oat.models import load_policy, resolve_device
    from precision_oat.precision.weight_sync import push_weights
    from precision_oat.rl.settings import learner_settings
    from precision_oat.rl.step import finished
    from precision_oat.samplers import build_sampler
    from precision_oat.timing_scripts import figures, script_and_run_args

    ours, run_flags, args = script_and_run_args(command_line(), argv)
    device = resolve_device(args.train.device)
    precision = args.precision.build()
    policy = load_policy(args.model)
    folder = Path(args.log.output_dir or "runs/weight_sync") / "vllm_init"
    sampler = build_sampler(policy, precision, device, args.rollout, args.train.seed, folder=folder)
    learner = build_learner(policy.model, learner_settings(args, device))

    def timed(part) -> float:
        start = finished(device)
        part()
        return finished(device) - start

    def export():
        for _ in learner.export_weights():
            pass

    def push():
        push_weights(sampler, learner.export_weights(), precision)

    times = {name: [] for name in PARTS}
    push()  # the first push may differ (allocations, vLLM's first reload); it is not timed
    for _ in range(ours.repeats):
        times["export"].append(timed(export))
        times["push"].append(timed(push))
        times["sleep"].append(timed(sampler.sleep))
        times["push_asleep"].append(timed(push))
    weights = getattr(sampler, "weights", None)  # a vLLM sampler's EngineWeights
    loads_directly = getattr(weights, "loads_directly", None)
    if loads_directly:
        weights.loads_directly = False
        times["push_reload"] = [timed(push) for _ in range(ours.repeats)]
        weights.loads_directly = True
    median = {name: statistics.median(values) for name, values in times.items()}
    for name, value in median.items():
        print(f"{name:12s} {value * 1000:8.1f} ms  (median of {ours.repeats})", flush=True)
    return figures(ours, run_flags, device, loads_directly=loads_directly, median_s=median, all_s=times)


if __name__ == "__main__":
    main()
