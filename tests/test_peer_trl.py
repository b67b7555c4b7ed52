"""benchmarks/peer_trl.py's parts that need neither TRL nor a GPU: the settings said to each framework, the
prompts and reward TRL is given, and the arithmetic of the figures and the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from precision_oat.backends.local.loop import prompts_of_step
from precision_oat.presets import parse_args
from precision_oat.tasks.counting import CountingTask
from precision_oat.tasks.task import Example
from tests.conftest import load_script

peer = load_script("benchmarks/peer_trl.py")


def settings(**changes):
    return peer.PeerArgs(model=Path("model"), **changes)


def test_precision_oats_command_parses_to_the_shared_settings():
    args = settings(steps=12, learning_rate=3e-5, temperature=0.9, micro_batch_size=16, seed=7)
    command = peer.ours_command(args, Path("ckpt"), "fp16", Path("out"))
    assert command[1:3] == ["-m", "precision_oat.main"]
    parsed = parse_args(command[3:])
    assert (parsed.rollout.prompts_per_step, parsed.rollout.num_samples, parsed.rollout.max_new_tokens) == (8, 4, 768)
    assert (parsed.rollout.temperature, parsed.rollout.vllm_gpu_memory_utilization) == (0.9, 0.3)
    assert not parsed.rollout.vllm_enforce_eager and parsed.rollout.sampler == "vllm"
    assert (parsed.train.steps, parsed.train.learning_rate, parsed.train.micro_batch_size, parsed.train.seed) == (
        12, 3e-5, 16, 7)
    assert (parsed.train.learner, parsed.train.zero_stage, parsed.precision.dtype, parsed.algorithm.algo) == (
        "deepspeed", 1, "fp16", "grpo")


def test_trl_generates_the_whole_step_once_per_optimizer_step_in_the_same_micro_batches():
    config = peer.trl_config(settings(micro_batch_size=8), "bf16", Path("out"))
    # 8 prompts × 4 samples = 32 responses a step: 4 micro-batches of 8, as precision-oat's --micro-batch-size 8.
    assert config["per_device_train_batch_size"] * config["gradient_accumulation_steps"] == 32
    assert config["gradient_accumulation_steps"] == 4 and config["num_generations"] == 4
    assert (config["bf16"], config["fp16"]) == (True, False)
    assert peer.trl_config(settings(), "fp16", Path("out"))["fp16"]
    # Dr.GRPO as precision-oat's grpo recipe: r − mean, summed tokens over a constant, clip 0.2, no KL.
    assert (config["loss_type"], config["scale_rewards"], config["epsilon"], config["beta"]) == ("dr_grpo", "none",
                                                                                                0.2, 0.0)
    assert config["model_init_kwargs"] == {"dtype": "float32"} and not config["shuffle_dataset"]


def test_trl_reads_each_step_the_prompts_precision_oats_loop_draws_for_it():
    args = settings(steps=3)
    rows = peer.trl_prompt_rows(args)
    task = CountingTask()
    assert len(rows) == 3 * 8
    for step in range(3):
        drawn = prompts_of_step(task.train_set(), step, 8, args.seed)
        assert rows[8 * step: 8 * step + 8] == [
            {"prompt": task.render(e), "question": e.question, "reference": e.reference} for e in drawn]
    # A different seed draws different prompts, so the order carried over is the seed's.
    assert peer.trl_prompt_rows(settings(steps=1, seed=1)) != rows[:8]


def test_a_response_is_cut_only_at_the_limit_without_its_end_token():
    eos = {2}
    assert peer.is_truncated([5, 6, 7, 8], 4, eos)
    assert not peer.is_truncated([5, 6, 7, 2], 4, eos)
    assert not peer.is_truncated([5, 2], 4, eos)


def test_trls_reward_is_the_counting_grader():
    reward = peer.counting_reward(max_new_tokens=50, eos_ids={2})
    # Count 100 … 129: the prompt shows 100 … 109, so the answer is the N = 20 numbers 110 … 129.
    example = Example("100", "129")
    right = CountingTask().answer(example)
    half = "".join(f"{n}\n" for n in range(110, 120))
    scores = reward(completions=[right, half, right], completion_ids=[[9, 2], [9] * 10, [9] * 50],
                    question=["100"] * 3, reference=["129"] * 3, prompts=["p"] * 3)
    # Whole count: 20 / max(20, 20) = 1; ten numbers in order: 10 / max(20, 10) = 0.5; the third was cut at the
    # 50-token limit with no end token, and a cut response scores the task's truncated_reward, 0.
    assert scores == [1.0, 0.5, 0.0]


def step(seconds, tokens, reward, own, lab_abs):
    parts = dict(zip(peer.PARTS, (seconds * 0.5, seconds * 0.2, seconds * 0.2, seconds * 0.05, seconds * 0.05)))
    lab = {"abs_logp_diff_mean": lab_abs, "k3": lab_abs / 10, "seq_kl": lab_abs * 3, "seq_logratio_std": lab_abs * 2}
    return {"step_s": seconds, "parts": parts, "tokens": tokens, "reward": reward, "own": own, "lab": lab}


def test_the_figures_time_only_the_steps_after_the_warm_up():
    own = lambda lo, mean, hi: {"sampling/importance_sampling_ratio/min": lo,  # noqa: E731
                                "sampling/importance_sampling_ratio/mean": mean,
                                "sampling/importance_sampling_ratio/max": hi}
    steps = [step(10.0, 100, 0.1, own(0.5, 1.0, 1.5), 0.04), step(2.0, 200, 0.2, own(0.9, 1.0, 1.1), 0.02),
             step(3.0, 300, 0.3, own(0.8, 1.2, 1.2), 0.02), step(4.0, 400, 0.4, own(0.95, 0.8, 2.0), 0.04)]
    s = peer.summarize(steps, warmup=1)
    assert (s["steps"], s["timed_steps"]) == (4, 3)
    assert s["step_s"] == 3.0  # median of 2, 3, 4 s; the 10 s warm-up step left out
    assert s["parts_s"]["sample"] == pytest.approx(1.5)  # median of half of 2, 3, 4 s
    assert s["tokens_per_s"] == pytest.approx(100.0)  # (200 + 300 + 400) tokens / (2 + 3 + 4) s
    assert s["reward_first_last"] == [0.1, 0.4]
    # The mismatch over every step: the lowest minimum, the mean of means, the highest maximum.
    assert s["own"] == pytest.approx({"sampling/importance_sampling_ratio/min": 0.5,
                                      "sampling/importance_sampling_ratio/mean": 1.0,
                                      "sampling/importance_sampling_ratio/max": 2.0})
    assert s["lab"]["abs_logp_diff_mean"] == pytest.approx(0.03)  # (0.04 + 0.02 + 0.02 + 0.04) / 4


def test_precision_oats_metrics_become_step_records_with_the_reward_counted_as_scoring():
    row = {"perf/time/sample": 1.0, "perf/time/score": 0.5, "perf/time/reward": 0.25, "perf/time/update": 2.0,
           "perf/time/sync": 0.1, "perf/time/other": 0.15, "response/length_mean": 300.0, "reward/mean": 0.2,
           "mismatch/abs_logp_diff_mean": 0.01, "mismatch/abs_logp_diff_max": 2.0, "mismatch/k3": 1e-4,
           "mismatch/seq_kl": 0.03, "mismatch/seq_logratio_std": 0.2}
    [record] = peer.ours_steps([row], responses_per_step=32)
    assert record["step_s"] == pytest.approx(4.0)  # 1 + 0.5 + 0.25 + 2 + 0.1 + 0.15
    assert record["parts"]["score"] == pytest.approx(0.75)
    assert record["tokens"] == 9600.0  # 300 tokens on average × 32 responses
    assert record["own"] == {"mismatch/abs_logp_diff_mean": 0.01, "mismatch/abs_logp_diff_max": 2.0}
    assert record["lab"]["k3"] == 1e-4


def test_the_table_gives_precision_oat_over_trl():
    trl_steps = [step(6.0, 6000, 0.1, {"sampling/sampling_logp_difference/mean": 0.04,
                                       "sampling/importance_sampling_ratio/min": 0.5,
                                       "sampling/importance_sampling_ratio/max": 1.5}, 0.04)] * 2
    ours_steps = [step(3.0, 6000, 0.1, {"mismatch/abs_logp_diff_mean": 0.04}, 0.04)] * 2
    trl, ours = peer.summarize(trl_steps, 1), peer.summarize(ours_steps, 1)
    r = peer.ratios(ours, trl)
    # 3 s against 6 s a step; 2,000 against 1,000 generated tokens a second.
    assert r == pytest.approx({"step_time": 0.5, "tokens_per_s": 2.0})
    text = peer.table({"bf16": {"trl": {"summary": trl, "gpu_peak_gib": 50.0}, "precision-oat": {"summary": ours},
                                "ratio": r}}, responses=32)
    assert "step time 0.50x, generated tok/s 2.00x" in text
    # 6,000 tokens over 32 responses: 188 a response.
    assert ("| bf16 | trl | 1 | 6.00 | 3.00 / 1.20 / 1.20 / 0.30 / 0.30 | 188 | 1,000 | 50.0 | "
            "Δlogp 4.00e-02, IS ratio 0.50–1.50 |") in text
    assert peer.ratios({"steps": 0}, trl) == {}


def test_nvidia_smis_memory_is_summed_over_the_gpus():
    assert peer.parse_memory_used("1024\n2048\n") == 3072.0


def test_a_micro_batch_that_does_not_divide_the_step_is_refused_in_one_line():
    with pytest.raises(SystemExit) as e:
        peer.main(["--model", "m", "--micro-batch-size", "5"])
    assert str(e.value).startswith("error: --micro-batch-size 5: it must divide the step's 32 responses")


def test_the_tables_of_the_h200_comparison_are_those_its_committed_runs_give(tmp_path, capsys):
    import shutil

    from tests.conftest import REPO

    committed = REPO / "benchmarks" / "results" / "h200_peer_trl"
    shutil.copytree(committed, tmp_path / "runs")
    peer.main(["--output", str(tmp_path / "runs"), "--report-only"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(rows) == 5  # the header, then TRL and precision-oat in bf16 and fp16
    for page in (REPO / "docs" / "results.md", committed / "README.md"):
        text = page.read_text()
        assert all(row in text for row in rows), page


def test_every_flag_of_the_benchmark_has_its_own_help():
    from tests.test_args import _check_help, _render_help, parse_help

    text = _render_help(lambda: peer.main(["--help"]))
    _check_help(parse_help(text), "benchmarks/peer_trl.py")
