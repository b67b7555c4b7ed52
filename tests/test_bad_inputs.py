"""Bad input on the command line or in a preset ends as one ``error:`` line naming the flag.

Every row of ``BAD_INPUTS`` goes through ``parse_args`` in this process; the rows marked
``cli`` also run ``python -m precision_oat.main`` in subprocesses, started at once (torch's
import makes each take seconds). ``scripts/bad_inputs.py`` runs the whole table through the
CLI and counts how each row ends.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from precision_oat import stacks
from precision_oat.args import Args, LogArgs, PrecisionArgs, RolloutArgs, TrainArgs
from precision_oat.errors import UserError
from precision_oat.presets import apply_values, parse_args


@dataclasses.dataclass(frozen=True)
class Bad:
    # Flags after the base command; "{file}" stands for an existing file.
    argv: tuple[str, ...]
    # The flag (or preset key) the error must name.
    flag: str
    # YAML text of a preset passed with --preset, if any.
    preset: Optional[str] = None
    # Also run through the real CLI in a subprocess.
    cli: bool = False
    # Pass --output-dir (off for rows about it).
    output_dir: bool = True

    @property
    def id(self) -> str:
        return " ".join(self.argv) + (f" [preset: {self.preset.strip()}]" if self.preset else "")


def bad(*argv: str, flag: Optional[str] = None, **kw) -> Bad:
    return Bad(tuple(argv), flag or (argv[0] if argv else ""), **kw)


BAD_INPUTS: list[Bad] = [
    # --- rollout ---
    bad("--temperature", "0", cli=True),
    bad("--temperature", "nan"),
    bad("--temperature", "-1"),
    bad("--temperature", "0.001"),  # vLLM would sample at 0.01 and the trainer score at 0.001
    bad("--top-p", "0"),
    bad("--top-p", "1.5"),
    bad("--prompts-per-step", "0"),
    bad("--num-samples", "0"),
    bad("--num-samples", "1", cli=True),  # the pg recipe's group-centred advantage needs G ≥ 2
    bad("--max-new-tokens", "0"),
    bad("--max-prompt-length", "0"),
    bad("--vllm-gpu-memory-utilization", "1.5"),
    bad("--vllm-kv-cache-gb", "0"),
    bad("--backend", "oat", "--vllm-kv-cache-gb", "4", flag="--vllm-kv-cache-gb"),
    bad("--vllm-max-num-seqs", "0"),
    bad("--backend", "oat", "--vllm-max-num-seqs", "512", flag="--vllm-max-num-seqs"),
    bad("--backend", "oat", "--no-vllm-row-seeds", flag="--no-vllm-row-seeds"),
    bad("--vllm-tensor-parallel-size", "0"),
    bad("--backend", "oat", "--vllm-tensor-parallel-size", "2", flag="--vllm-tensor-parallel-size"),
    # vLLM's flags without vLLM, evaluation's without an evaluation, LoRA's without LoRA, one task's with another:
    # the run would go without them
    bad("--vllm-kv-cache-gb", "4"),
    bad("--no-vllm-sleep"),
    bad("--backend", "oat", "--vllm-prefix-caching", flag="--vllm-prefix-caching"),
    bad("--eval-temperature", "0.5"),
    bad("--model", "HuggingFaceTB/SmolLM2-135M-Instruct", "--task", "counting", "--eval-limit", "5", flag="--eval-limit"),
    bad("--eval-samples", "4", "--backend", "oat", flag="--eval-samples"),
    bad("--steps", "0", "--eval-samples", "4", "--backend", "oat", flag="--eval-samples"),  # Oat evaluates by steps only
    bad("--lora-alpha", "32"),
    bad("--lora-target-modules", "q_proj", flag="--lora-target-modules"),
    bad("--model", "HuggingFaceTB/SmolLM2-135M-Instruct", "--task", "counting", "--max-operand", "20",
        flag="--max-operand"),
    bad("--count-lengths", "100", "120"),  # the arithmetic task's prompts have no lengths to count
    bad("--input-key", "question"),
    bad("--no-rescore", "--num-epochs", "2", flag="--no-rescore"),
    bad("--no-rescore", "--train-batch-size", "8", flag="--no-rescore"),
    bad("--backend", "oat", "--no-rescore", flag="--no-rescore"),
    bad("--profile-update", "0"),
    bad("--mismatch-alarm-action", "stop"),  # no --mismatch-alarm for it to act on
    bad("--steps", "2", "--profile-update", "3", flag="--profile-update"),
    bad("--backend", "oat", "--profile-update", "1", flag="--profile-update"),
    # --- task ---
    bad("--task", "counting", "--count-lengths", "10", "20", flag="--count-lengths"),
    bad("--task", "counting", "--count-lengths", "300", "250", flag="--count-lengths"),
    # --- learner ---
    bad("--steps", "-1"),
    bad("--learning-rate", "0"),
    bad("--learning-rate", "inf"),
    bad("--weight-decay", "-0.1"),
    bad("--adam-betas", "0.9", "1.0"),
    bad("--max-grad-norm", "0"),
    bad("--train-batch-size", "0"),
    bad("--micro-batch-tokens", "0"),
    bad("--backend", "oat", "--micro-batch-tokens", "8192", flag="--micro-batch-tokens"),
    bad("--train-batch-size", "10000", cli=True),  # more than the 32 × 8 responses of a step
    bad("--train-batch-size", "100"),  # 256 responses: the last mini-batch would hold 56
    bad("--micro-batch-size", "0"),
    bad("--num-epochs", "0"),
    bad("--seed", "-1"),
    bad("--zero-stage", "4"),
    bad("--zero-stage", "3"),  # the builtin learner has no ZeRO stages: the run would silently go without
    # Oat's own flags, which the local backend would silently go without
    bad("--adam-offload"),
    bad("--flash-attn"),
    bad("--gpus", "2"),
    bad("--learner", "deepspeed", "--shm-size-mb", "100", flag="--shm-size-mb"),
    # --- precision ---
    bad("--initial-loss-scale", "inf", cli=True),
    bad("--initial-loss-scale", "0"),
    bad("--initial-loss-scale", "1e300", "--min-loss-scale", "1e290"),  # above fp32's largest: every step overflows
    bad("--min-loss-scale", "1e9"),  # above the initial 65536
    bad("--loss-scale-growth-factor", "1"),
    bad("--loss-scale-backoff-factor", "1"),
    bad("--loss-scale-hysteresis", "0"),
    bad("--loss-scale-growth-interval", "0"),
    bad("--dtype", "fp16", "--loss-scaling", "none", flag="--loss-scaling"),
    bad("--dtype", "fp16", "--master-dtype", "bf16", flag="--master-dtype"),
    bad("--dtype", "fp16", "--master-dtype", "fp16", flag="--master-dtype"),  # AdamW's fp16 moments: 0/0
    bad("--backend", "oat", "--initial-loss-scale", "1000", flag="--initial-loss-scale"),  # DeepSpeed: powers of two
    bad("--learner", "deepspeed", "--initial-loss-scale", "1000", flag="--initial-loss-scale"),
    bad("--learner", "deepspeed", "--loss-scale-growth-factor", "3", flag="--loss-scale-growth-factor"),
    bad("--learner", "deepspeed", "--dtype", "bf16", "--master-dtype", "bf16", flag="--master-dtype", cli=True),
    bad("--fp16-preflight-margin", "0"),
    bad(flag="--lm-head-dtype", preset="lm_head_dtype: fp16\n"),
    bad("--backend", "oat", "--lm-head-dtype", "fp32", flag="--lm-head-dtype"),  # Oat builds its own engines
    bad("--backend", "oat", "--lora-rank", "4", "--lora-alpha", "2.5", flag="--lora-alpha"),  # Oat's alpha is an int
    # Oat's LoRA sync merges into a state dict that ZeRO-3 leaves sharded (AttributeError ds_shape at the first sync)
    bad("--backend", "oat", "--lora-rank", "4", "--zero-stage", "3", flag="--zero-stage"),
    # DeepSpeed 0.16.8's BF16_Optimizer asserts a non-zero gradient norm; a step of equal rewards has a zero gradient
    bad("--backend", "oat", "--dtype", "bf16", "--zero-stage", "0", flag="--zero-stage"),
    # Oat's vLLM loads the trainer's dtype only; Oat broadcasts compute weights, so a bf16 trainer's fp16 sampler would
    # hold round_fp16(round_bf16(master)).
    bad("--backend", "oat", "--sampler", "vllm", "--dtype", "bf16", "--sampler-dtype", "fp16", flag="--sampler-dtype"),
    bad("--backend", "oat", "--dtype", "bf16", "--sampler-dtype", "fp16", flag="--sampler-dtype"),
    # vLLM 0.8.4 (Oat's) reports log μ before temperature: a loss weighted by π/μ would compare two distributions.
    bad("--backend", "oat", "--sampler", "vllm", "--temperature", "0.7", "--algo", "grpo-tis", flag="--temperature"),
    bad("--backend", "oat", "--sampler", "vllm", "--temperature", "0.7", "--algo", "pg", flag="--temperature"),
    bad("--sampler-dtype", "fp8", flag="--sampler-dtype", cli=True),  # FP8 is vLLM's: needs --sampler vllm
    bad("--sampler-dtype", "fp8", "--sampler", "vllm", "--device", "cpu", flag="--sampler-dtype"),  # CUDA only
    bad("--dtype", "fp32", "--sampler-dtype", "fp8", "--sampler", "vllm", flag="--sampler-dtype"),  # rest in fp32?
    bad("--batch-invariant", flag="--batch-invariant"),
    bad("--batch-invariant", "--sampler", "vllm", "--device", "cpu", flag="--batch-invariant"),
    bad("--backend", "oat", "--batch-invariant", flag="--batch-invariant"),
    bad("--top-p", "0.9", "--sampler", "vllm", flag="--top-p"),  # vLLM does not report its kept set
    bad("--top-p", "0.9", "--backend", "oat", flag="--top-p"),
    # --- algorithm ---
    bad("--is-cap", "0"),
    bad("--clip-low", "1"),
    bad("--clip-high", "nan"),
    bad("--correction", "seq-tis", "--correction-cap", "-1", flag="--correction-cap"),
    bad("--correction", "seq-tis", flag="--correction-cap", cli=True),  # pg sets no cap
    bad("--adv-eps", "-1"),
    bad("--advantage", "grpo", "--adv-eps", "0", flag="--adv-eps"),  # nan on a group of equal rewards
    bad("--icepop-low", "0"),
    bad("--algo", "grpo-icepop", "--icepop-high", "0.9", flag="--icepop-high"),  # the band must hold 1
    bad("--geo-mask-low", "1.02", flag="--geo-mask-low"),
    bad("--divergence-threshold", "-0.1"),
    bad("--correction", "divergence-mask", "--divergence-measure", "k1", "--divergence-level", "seq-max",
        flag="--divergence-level"),
    bad("--algo", "grpo", "--correction-cap", "2", flag="--correction-cap"),  # read by no piece of plain GRPO
    bad("--bypass-mode", "--num-epochs", "2", flag="--bypass-mode"),
    bad("--bypass-mode", "--algo", "grpo-tis", flag="--bypass-mode"),  # π_old/μ would be 1
    bad("--backend", "oat", "--bypass-mode", flag="--bypass-mode"),
    # --- LoRA ---
    bad("--lora-rank", "-1"),
    bad("--lora-alpha", "0"),
    bad("--lora-dropout", "1"),
    # --- task ---
    bad("--max-operand", "0"),
    bad("--max-operand", "100000"),
    bad("--max-train", "0"),
    bad("--grading-timeout", "nan"),
    bad("--truncated-reward", "inf"),
    bad("--prompt-template", "alpaca"),
    bad("--task", "math", "--prompt-template", "fewshot", flag="--prompt-template"),
    bad("--prompt-data", "data/train/math_1k5"),  # the arithmetic task makes its own prompts
    bad("--eval-benchmarks", "aime"),
    bad("--task", "counting", flag="--task"),  # the embedded policy cannot read the counting prompts
    bad("--task", "math", flag="--task"),
    # --- evaluation ---
    bad("--eval-every", "0"),
    bad("--eval-samples", "0"),
    bad("--eval-temperature", "-0.5"),
    bad("--eval-temperature", "0.001"),
    bad("--eval-top-p", "0"),
    bad("--eval-limit", "0"),
    bad("--eval-max-new-tokens", "0"),
    # --- outputs ---
    bad("--save-every", "0"),
    bad("--log-every", "0"),
    bad("--output-dir", "{file}", output_dir=False),
    bad("--output-dir", "", output_dir=False),  # would make the current folder the run's
    bad("--output-dir=", flag="--output-dir", output_dir=False),
    bad(flag="--output-dir", preset="output_dir: ''\n", output_dir=False),
    bad("--resume", output_dir=False),
    bad("--keep-checkpoints", "0"),
    bad("--resume", "--overwrite", flag="--overwrite"),
    bad("--backend", "oat", "--resume", flag="--resume"),
    # --- model ---
    bad("--model", "./no/such/model", cli=True),
    bad("--gguf-file", "model.gguf"),  # without --model
    bad("--attn-implementation", "flash"),
    # --- Oat backend ---
    bad("--gpus", "0"),
    bad("--shm-size-mb", "0"),
    # --- presets: checked the same way, and typed since YAML skips the command-line parser ---
    bad(flag="--steps", preset="steps: -1\n", cli=True),
    bad(flag="--temperature", preset="temperature: hot\n"),
    bad(flag="--dtype", preset="dtype: fp8\n"),
    bad(flag="--learning-rate", preset="learning_rate: .nan\n"),
    bad(flag="--adam-betas", preset="adam_betas: [0.9]\n"),
    bad(flag="--num-samples", preset="num_samples: 0\n"),
    bad(flag="--preset", preset="steps: [1\n", cli=True),  # not YAML
    bad(flag="--preset", preset="- steps\n"),  # not a mapping
    bad(flag="stepz", preset="stepz: 3\n"),  # unknown key
    bad("--num-samples", "1", flag="--num-samples", preset="algo: grpo\n"),  # a flag on top of a valid preset
]


def command(row: Bad, folder: Path) -> list[str]:
    """The arguments after ``python -m precision_oat.main`` for ``row``, files made in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "file").write_text("not a folder\n")
    argv = ["--steps", "1", "--wandb-mode", "disabled"]
    if row.output_dir:
        argv += ["--output-dir", str(folder / "run")]
    if row.preset is not None:
        (folder / "preset.yaml").write_text(row.preset)
        argv += ["--preset", str(folder / "preset.yaml")]
    return argv + [str(folder / "file") if token == "{file}" else token for token in row.argv]


@pytest.mark.parametrize("row", BAD_INPUTS, ids=lambda r: r.id)
def test_bad_input_is_refused_in_one_line_naming_the_flag(row, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(command(row, tmp_path))
    message = str(exit_info.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    assert row.flag in message, message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("engine, fix, not_a_fix", [
    (("--backend", "oat"), "--backend local", "--sampler builtin"),  # Oat's trainer drops kept sets with any sampler
    (("--sampler", "vllm"), "--sampler builtin", "--backend local"),
])
def test_a_refused_top_p_is_told_a_fix_its_engine_can_take(engine, fix, not_a_fix, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(command(bad("--top-p", "0.9", *engine), tmp_path))
    message = str(exit_info.value.code)
    assert message.startswith("error: --top-p 0.9") and fix in message and not_a_fix not in message, message


def test_the_table_covers_forty_inputs_and_every_args_group():
    assert len(BAD_INPUTS) >= 40
    flags = {row.flag for row in BAD_INPUTS}
    for group in ("--temperature", "--steps", "--initial-loss-scale", "--clip-low", "--lora-rank", "--max-operand",
                  "--eval-samples", "--log-every", "--model", "--gpus", "--preset"):
        assert group in flags


def test_the_base_command_alone_is_accepted(tmp_path):
    args = parse_args(command(bad(), tmp_path))
    assert args.train.steps == 1 and args.log.output_dir == tmp_path / "run"


@pytest.mark.parametrize("argv, preset", [
    (("--sampler", "builtin"), "sampler: vllm\nvllm_kv_cache_gb: 4\nvllm_sleep: false\n"),  # the preset's, overridden
    (("--eval-every", "1", "--eval-samples", "4", "--eval-temperature", "1"), None),
    (("--steps", "0", "--eval-limit", "5"), None),  # a --steps 0 run evaluates once
    (("--lora-rank", "2", "--lora-alpha", "4"), None),
    (("--vllm-sleep", "--eval-samples", "1"), None),  # the defaults, typed out: nothing goes unread
    (("--max-operand", "9", "--eval-limit", "5"), None),  # the arithmetic training split is what --eval-limit leaves
    (("--task", "counting", "--model", "HuggingFaceTB/SmolLM2-135M-Instruct", "--count-lengths", "100", "120"), None),
    (("--task", "arithmetic", "--max-operand", "20"),  # the preset's input_key is its own
     "task: math\nmodel: HuggingFaceTB/SmolLM2-135M-Instruct\ninput_key: question\n"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else "preset" if v else "")
def test_flags_a_run_reads_and_a_presets_lines_are_not_refused(argv, preset, tmp_path):
    parse_args(command(bad(*argv, preset=preset), tmp_path))


@pytest.mark.parametrize(
    "argv",
    [
        ("--top-p", "1"),
        ("--steps", "0"),
        ("--lora-rank", "0"),
        ("--eval-every", "1", "--eval-temperature", "0"),  # greedy evaluation
        ("--temperature", "0.01", "--eval-every", "1", "--eval-temperature", "0.01"),  # the lowest vLLM samples at as given
        ("--advantage", "rloo", "--num-samples", "2"),  # the smallest group with a leave-one-out baseline
        ("--num-samples", "1", "--advantage", "reinforce"),
        ("--train-batch-size", "256"),  # exactly the 32 × 8 responses of a step
        ("--min-loss-scale", "65536"),  # equal to the initial scale
        ("--algo", "grpo", "--clip-low", "0.999", "--clip-high", "5"),
        ("--max-operand", "999"),
    ],
    ids=" ".join,
)
def test_values_on_the_edge_of_each_range_are_accepted(argv, tmp_path):
    args = parse_args(command(bad(*argv), tmp_path))
    # Accepted as given: each flag's parsed value is the one on the command line, not a clamped or default one.
    groups = [getattr(args, f.name) for f in dataclasses.fields(args) if dataclasses.is_dataclass(getattr(args, f.name))]
    for flag, given in zip(argv[::2], argv[1::2]):
        name = flag.removeprefix("--").replace("-", "_")
        [value] = [getattr(g, name) for g in groups if hasattr(g, name)]
        assert (value == float(given)) if isinstance(value, (int, float)) else (value == given), (flag, value)


def test_args_built_in_code_are_checked_too():
    with pytest.raises(UserError, match=r"^--temperature 0: must be a finite number ≥ 0.01"):
        RolloutArgs(temperature=0)
    with pytest.raises(UserError, match=r"^--min-loss-scale 4.0: must be ≤ --initial-loss-scale 2.0"):
        PrecisionArgs(initial_loss_scale=2.0, min_loss_scale=4.0)
    with pytest.raises(UserError, match=r"^--train-batch-size 9: exceeds the 8 responses"):
        Args(rollout=RolloutArgs(prompts_per_step=4, num_samples=2), train=TrainArgs(train_batch_size=9))
    with pytest.raises(UserError, match=r"^--log-every 0"):
        dataclasses.replace(LogArgs(), log_every=0)


def test_a_preset_naming_a_folder_says_so(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--preset", str(tmp_path)])
    assert exit_info.value.code == (f"error: --preset {tmp_path}: is a folder; pass a YAML file such as those under "
                                    "args/ (a run's own is OUTPUT_DIR/config.json)")


def test_preset_errors_name_the_preset_and_the_flag():
    with pytest.raises(UserError, match=r"^my preset: --steps many: must be an integer$"):
        apply_values(Args(), {"steps": "many"}, source="my preset")
    with pytest.raises(UserError, match=r"^my preset: --probe-dtypes fp8: must be a list, each item one of fp16, bf16, fp32$"):
        apply_values(Args(), {"probe_dtypes": ["fp8"]}, source="my preset")
    with pytest.raises(UserError, match=r"^my preset: --max-grad-norm big: must be a number \(or null to unset it\)$"):
        apply_values(Args(), {"max_grad_norm": "big"}, source="my preset")


# --- the real command line ---

CLI_ROWS = [row for row in BAD_INPUTS if row.cli]


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """row id → (returncode, stderr, folder) of each ``cli`` row, all run concurrently."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    started = {}
    for i, row in enumerate(CLI_ROWS):
        folder = tmp_path_factory.mktemp(f"row{i}")
        argv = [sys.executable, "-m", "precision_oat.main", *command(row, folder)]
        started[row.id] = (subprocess.Popen(argv, cwd=folder, env=env, text=True,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE), folder)
    results = {}
    for key, (proc, folder) in started.items():
        _, err = proc.communicate(timeout=180)
        results[key] = (proc.returncode, err, folder)
    return results


def test_the_cli_sample_holds_about_ten_rows():
    assert 8 <= len(CLI_ROWS) <= 10


@pytest.mark.parametrize("row", CLI_ROWS, ids=lambda r: r.id)
def test_cli_exits_nonzero_with_one_error_line_and_no_traceback(row, cli_runs):
    code, err, folder = cli_runs[row.id]
    assert code != 0
    assert "Traceback" not in err, err
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert last.startswith("error: ") and row.flag in last, err
    assert not (folder / "run").exists()


# --- optional stacks ---


class _HiddenPackages:
    """An import finder that answers "not found" for ``hidden`` (top-level packages) and defers the rest."""

    def __init__(self, finder, hidden: set[str]):
        self.finder, self.hidden = finder, hidden

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.hidden:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, attr):
        return getattr(self.finder, attr)


@pytest.mark.parametrize("stack", sorted(stacks.STACKS))
def test_a_missing_stack_is_named_with_its_install_command(stack, monkeypatch):
    absent = [m for m in stacks.STACKS[stack].modules if importlib.util.find_spec(m) is None]
    if not absent:
        # Installed here (the core venv has DeepSpeed): hidden from this interpreter, as on an install without it.
        absent = list(stacks.STACKS[stack].modules)
        for name in absent:
            monkeypatch.delitem(sys.modules, name, raising=False)
        monkeypatch.setattr(sys, "meta_path", [_HiddenPackages(f, set(absent)) for f in sys.meta_path])
    before = set(sys.modules)
    assert not stacks.is_available(stack)
    with pytest.raises(UserError) as e:
        stacks.require(stack)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(stacks.STACKS[stack].needed_by + " needs ")
    assert ", ".join(absent) in message
    install = {"oat": "bash scripts/oat_env.sh", "vllm": 'pip install -e ".[vllm]"', "deepspeed": 'pip install -e ".[deepspeed]"'}
    assert install[stack] in message
    assert set(sys.modules) == before, "probing a stack must not import anything"


# --- bad input found once the run is set up: still one line, non-zero, nothing written ---

# The smallest run of the embedded policy.
TINY_RUN = ("--steps", "1", "--prompts-per-step", "2", "--num-samples", "2", "--max-new-tokens", "2",
            "--wandb-mode", "disabled", "--probe-dtypes")
# Modules of a user's own, importable from the folder the test runs in.
USER_MODULES = {
    "no_advantage.py": ("from precision_oat.algorithms import ISPGMixin\n"
                        "from precision_oat.learners.builtin import PrecisionLearner\n\n\n"
                        "class NoAdvantage(ISPGMixin, PrecisionLearner):\n    pass\n"),
    "bad_syntax.py": "x = 1\n\ndef broken(:\n    pass\n",
    "bad_import.py": "import os\nimport no_such_package_anywhere\n",
}
SET_UP_INPUTS = {
    # flags after TINY_RUN → what the error line must hold
    "learner class without an advantage": (("--learner-class", "no_advantage:NoAdvantage"),
                                           "learner class NoAdvantage mixes in no advantage estimator"),
    "module with a syntax error": (("--learner-class", "bad_syntax:X"),
                                   "--learner-class bad_syntax:X: bad_syntax failed to import: SyntaxError at "
                                   "{code}/bad_syntax.py:3: "),
    "module with an import error": (("--actor-class", "bad_import:X"),
                                    "--actor-class bad_import:X: bad_import failed to import: ModuleNotFoundError at "
                                    "{code}/bad_import.py:2: No module named 'no_such_package_anywhere'"),
    "prompts over --max-prompt-length": (("--max-prompt-length", "3"), "--max-prompt-length 3: "),
    "LoRA rank above the layers' width": (("--lora-rank", "1000000"), "--lora-rank 1000000: above "),
    "LoRA on a block with no weight of its own": (("--lora-rank", "4", "--lora-target-modules", "mlp", "q_proj"),
                                                  "--lora-target-modules: mlp holds no weight matrix of its own; "
                                                  "name the layers inside it (this model's: down_proj,"),
    # One misspelt name among good ones would otherwise leave that layer without an adapter.
    "LoRA on a module name the model lacks": (("--lora-rank", "4", "--lora-target-modules", "q_proj", "v_prj"),
                                              "--lora-target-modules v_prj: no module of the model has this name; "
                                              "name its weight layers (this model's: down_proj,"),
}


def run_cli(argv: list[str]) -> str:
    """The one line ``python -m precision_oat.main`` exits with, run through its entry in this process."""
    from precision_oat.main import cli

    with pytest.raises(SystemExit) as exit_info:
        cli(argv)
    message = exit_info.value.code
    assert isinstance(message, str) and message.startswith("error: ") and "\n" not in message, message
    return message


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    for name, text in USER_MODULES.items():
        (code / name).write_text(text)
    monkeypatch.syspath_prepend(str(code))
    monkeypatch.chdir(code)
    return code


@pytest.mark.parametrize("case", SET_UP_INPUTS)
def test_bad_input_found_at_set_up_is_one_line_and_writes_nothing(case, tmp_path, user_code, embedded_policy_dir):
    flags, expected = SET_UP_INPUTS[case]
    out = tmp_path / "run"
    message = run_cli(["--model", str(embedded_policy_dir), *TINY_RUN, "--output-dir", str(out), *flags])
    assert expected.format(code=user_code) in message, message
    assert not out.exists()


def test_an_output_dir_that_cannot_be_created_is_one_line(embedded_policy_dir):
    message = run_cli(["--model", str(embedded_policy_dir), *TINY_RUN, "--output-dir", "/proc/self/run"])
    assert message.startswith("error: --output-dir /proc/self/run: cannot be created or written (FileNotFoundError")


def test_a_run_whose_every_optimiser_step_overflowed_exits_nonzero(tmp_path, embedded_policy_dir):
    # 1e38 fits fp32, but the fp16 trainer's gradients overflow at any scale near it: both steps are skipped.
    # (8 prompts × 4 samples: rewards that differ within a group, so the gradients are not all zero.)
    out = tmp_path / "run"
    message = run_cli(["--model", str(embedded_policy_dir), *TINY_RUN, "--steps", "2", "--prompts-per-step", "8",
                       "--num-samples", "4", "--max-new-tokens", "4", "--output-dir", str(out),
                       "--initial-loss-scale", "1e38", "--min-loss-scale", "1e37"])
    assert message.startswith("error: every optimiser step of the run overflowed and was skipped (2)"), message
    assert "--initial-loss-scale" in message
    # The run itself is kept: its metrics show the skipped steps.
    assert (out / "summary.json").is_file()


def test_resuming_with_another_learner_class_than_the_run_is_refused(tmp_path, user_code, embedded_policy_dir):
    from precision_oat.algorithms import GRPOMixin
    from precision_oat.backends.local.driver import train
    from tests.backends.helpers import make_args

    (user_code / "grpo_learner.py").write_text(USER_MODULES["no_advantage.py"].replace(
        "class NoAdvantage(ISPGMixin,", "from precision_oat.algorithms import GRPOMixin\n\n\n"
        "class Mine(ISPGMixin, GRPOMixin,"))
    from grpo_learner import Mine

    assert issubclass(Mine, GRPOMixin)
    out = tmp_path / "run"
    train(make_args(model=str(embedded_policy_dir), steps=1, output_dir=str(out)), learner_class=Mine)
    config = json.loads((out / "config.json").read_text())
    assert config["learner_class"] == "grpo_learner:Mine"
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # The command line without the class: the stock learner would continue the run.
    base = ["--model", str(embedded_policy_dir), "--output-dir", str(out), "--resume", "--steps", "2",
            *(f"--{k.replace('_', '-')}={v}" for k, v in (("prompts_per_step", 8), ("num_samples", 4),
                                                           ("max_new_tokens", 4), ("log_every", 1000))),
            "--wandb-mode", "disabled", "--probe-dtypes"]
    message = run_cli(base)
    assert message == (f"error: --resume: the run in {out} was trained with the learner class grpo_learner:Mine and "
                       "this command gives none; resume with --learner-class grpo_learner:Mine (from Python: "
                       "train(args, learner_class=…)), or start a new run in another --output-dir")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # The fix the line names works.
    from precision_oat.main import cli

    cli([*base, "--learner-class", "grpo_learner:Mine"])
    assert json.loads((out / "config.json").read_text())["resumes"][0]["step"] == 1
