"""The mismatch lab end to end on CPU: real sampler, real trainer forward, real files."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from precision_oat.lab.__main__ import cli
from precision_oat.lab.lab import RATIO_KEYS, LabArgs, bf16_fp16_ratios, labelled_arms, run_lab
from tests.conftest import REPO, load_script, save_byte_model

STAT_KEYS = {
    "mismatch/k1", "mismatch/k2", "mismatch/k3", "mismatch/abs_logp_diff_mean", "mismatch/abs_logp_diff_max",
    "mismatch/prob_diff_max", "mismatch/prob_diff_min", "mismatch/seq_logratio_mean", "mismatch/seq_logratio_std",
    "mismatch/seq_logratio_abs_max", "mismatch/seq_logratio_slope", "mismatch/seq_kl", "mismatch/ratio_out_of_band",
}


@pytest.fixture(scope="module")
def embedded_report(embedded_policy_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("lab")
    args = LabArgs(model=str(embedded_policy_dir), num_prompts=16, num_samples=4, max_new_tokens=6,
                   device="cpu", output_dir=out)
    return run_lab(args, log=lambda *_: None), out


def test_lab_writes_documented_json_and_its_figures(embedded_report):
    report, out = embedded_report
    on_disk = json.loads((out / "mismatch.json").read_text())
    assert on_disk == json.loads(json.dumps(report))
    assert set(on_disk) == {"settings", "dtypes", "ratios"}
    assert list(on_disk["dtypes"]) == ["bf16", "fp16", "fp32"]
    for stats in on_disk["dtypes"].values():
        assert STAT_KEYS <= set(stats)
        assert stats["sequences"] == 16 * 4
        assert stats["response_tokens"] > 0
    assert set(on_disk["ratios"]) == set(RATIO_KEYS)
    assert on_disk["settings"]["num_prompts"] == 16 and on_disk["settings"]["device"] == "cpu"
    for name in ("token_probs.png", "seq_logratio.png", "atlas.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_atlas_names_a_batch_invariant_runs_arms_so_and_joins_several_runs(embedded_report, tmp_path):
    report, out = embedded_report
    invariant = {**report, "settings": {**report["settings"], "batch_invariant": True}}
    assert list(labelled_arms(invariant)) == ["bf16 (batch-invariant)", "fp16 (batch-invariant)",
                                             "fp32 (batch-invariant)"]
    (tmp_path / "invariant.json").write_text(json.dumps(invariant))
    figure = tmp_path / "atlas.png"
    run = subprocess.run([sys.executable, "benchmarks/atlas_figure.py", str(out / "mismatch.json"),
                          str(tmp_path / "invariant.json"), "--output", str(figure)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().endswith("bf16, fp16, fp32, bf16 (batch-invariant), fp16 (batch-invariant), "
                                       "fp32 (batch-invariant)")
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bf16_mismatch_exceeds_fp16_and_fp32_is_near_zero(embedded_report):
    report, _ = embedded_report
    stats = report["dtypes"]
    # 7 versus 10 mantissa bits: ~8x per rounding; on the embedded policy ~10x on CPU.
    assert report["ratios"]["abs_logp_diff_mean"] > 3.0
    assert stats["bf16"]["mismatch/seq_kl"] > stats["fp16"]["mismatch/seq_kl"]
    assert stats["fp32"]["mismatch/abs_logp_diff_mean"] < 1e-5
    ratio = stats["bf16"]["mismatch/abs_logp_diff_mean"] / stats["fp16"]["mismatch/abs_logp_diff_mean"]
    assert report["ratios"]["abs_logp_diff_mean"] == pytest.approx(ratio, rel=1e-12)


def test_each_arm_reports_the_bands_a_mask_would_need_on_its_pair(embedded_report):
    stats = embedded_report[0]["dtypes"]
    for arm in stats.values():
        assert arm["band/token_ratio_low"] <= 1.0 <= arm["band/token_ratio_high"]
        assert arm["band/geo_ratio_low"] <= 1.0 <= arm["band/geo_ratio_high"]
    assert stats["fp32"]["band/geo_mask_default_kept"] == 1.0
    width = {dtype: arm["band/token_ratio_high"] - arm["band/token_ratio_low"] for dtype, arm in stats.items()}
    assert width["bf16"] > 3 * width["fp16"] > 3 * width["fp32"]


def test_a_ratio_of_two_zero_mismatches_is_undefined_and_one_over_zero_is_infinite(tmp_path):
    # Before: 0 / 0 was reported as inf. GPT-2 decodes through HF's cached forward, which on CPU gives the trainer's
    # bits exactly in either dtype, so both arms measure no mismatch at all.
    from transformers import GPT2Config

    model = save_byte_model(tmp_path / "gpt2", GPT2Config, n_embd=32, n_layer=1, n_head=2, n_positions=256)
    lines = []
    args = LabArgs(model=str(model), dtypes=("bf16", "fp16"), num_prompts=2, num_samples=2, max_new_tokens=4,
                   device="cpu", plots=False, self_consistency=False, output_dir=tmp_path / "lab")
    report = run_lab(args, log=lines.append)
    assert all(report["dtypes"][arm][f"mismatch/{key}"] == 0 for arm in ("bf16", "fp16") for key in RATIO_KEYS)
    on_disk = json.loads((tmp_path / "lab" / "mismatch.json").read_text())
    assert all(math.isnan(on_disk["ratios"][key]) for key in RATIO_KEYS)
    assert "bf16/fp16: abs_logp_diff_mean nan  seq_logratio_std nan  k3 nan  seq_kl nan" in lines
    bf16 = {f"mismatch/{key}": 0.5 for key in RATIO_KEYS}
    assert bf16_fp16_ratios({"bf16": bf16, "fp16": report["dtypes"]["fp16"]}) == {key: math.inf for key in RATIO_KEYS}


def test_the_vllm_benchmark_table_prints_a_zero_fp16_mismatch_as_an_infinite_ratio():
    # Before: its bf16/fp16 row divided by the fp16 value and raised ZeroDivisionError.
    bench = load_script("benchmarks/vllm_mismatch.py")
    fp16 = {key: 0.0 for key, _ in bench.KEYS}
    fp16[bench.KEYS[1][0]] = 2.5e-4
    lines = bench.table("t", {"bf16": {key: 2e-3 for key, _ in bench.KEYS}, "fp16": fp16})
    assert lines[-1].split() == ["bf16/fp16", "inf", "8.0x", "inf"]


def test_cli_reads_a_prompt_file_and_skips_plots_on_request(byte_model_dir, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"question": f"question {i}?"}) + "\n" for i in range(3)))
    out = tmp_path / "out"
    report = cli(["--model", str(byte_model_dir), "--prompt-data", str(prompts), "--input-key", "question",
                  "--dtypes", "fp32", "--num-prompts", "2", "--num-samples", "2", "--max-new-tokens", "4",
                  "--device", "cpu", "--no-plots", "--output-dir", str(out)])
    assert report["dtypes"]["fp32"]["sequences"] == 2 * 2
    assert report["ratios"] == {}
    assert sorted(p.name for p in out.iterdir()) == ["histograms.npz", "mismatch.json"]


def test_a_second_run_into_the_same_folder_leaves_none_of_the_first_runs_files(byte_model_dir, tmp_path):
    # Before: the first run's figures stayed beside the second's mismatch.json, showing arms it did not measure.
    common = ["--model", str(byte_model_dir), "--num-prompts", "2", "--num-samples", "2", "--max-new-tokens", "3",
              "--device", "cpu", "--output-dir", str(tmp_path)]
    cli([*common, "--dtypes", "bf16", "fp32"])
    assert {"token_probs.png", "seq_logratio.png", "atlas.png"} <= {p.name for p in tmp_path.iterdir()}
    report = cli([*common, "--dtypes", "fp16", "--no-plots"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["histograms.npz", "mismatch.json"]
    assert list(json.loads((tmp_path / "mismatch.json").read_text())["dtypes"]) == list(report["dtypes"]) == ["fp16"]
    assert {name.split("|")[0] for name in np.load(tmp_path / "histograms.npz").files} == {"fp16"}


def test_task_counting_gives_the_rl_runs_own_long_prompts(byte_model_dir, tmp_path):
    from precision_oat.lab.prompts import load_prompts
    from precision_oat.tasks.counting import CountingTask

    task = CountingTask()
    args = LabArgs(model=str(byte_model_dir), task="counting", num_prompts=3)
    assert load_prompts(args, tokenizer=None) == [task.render(ex) for ex in task.train_set()[:3]]
    report = cli(["--model", str(byte_model_dir), "--task", "counting", "--dtypes", "fp32", "--num-prompts", "2",
                  "--num-samples", "2", "--max-new-tokens", "4", "--device", "cpu", "--no-plots",
                  "--output-dir", str(tmp_path)])
    assert report["settings"]["task"] == "counting" and report["dtypes"]["fp32"]["sequences"] == 2 * 2


@pytest.mark.parametrize("flags, expected", [
    (["--task", "counting", "--prompt-data", "p.jsonl"],
     "error: --task counting --prompt-data p.jsonl: the task makes its own prompts; drop one of the two"),
    (["--task", "counting"], "error: --task counting: the embedded policy (no --model) reads digits and arithmetic "
                             "signs only; give --model <HF folder>"),
])
def test_a_task_without_prompts_of_its_own_is_refused_before_anything_is_written(flags, expected, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        cli([*flags, "--device", "cpu", "--output-dir", str(out)])
    assert str(e.value.code) == expected
    assert not out.exists()


def test_an_arm_named_twice_is_refused_before_anything_is_written(tmp_path):
    # Before: the arm was sampled and scored twice, and the second measurement replaced the first in mismatch.json.
    out = tmp_path / "lab"
    with pytest.raises(SystemExit) as e:
        cli(["--dtypes", "fp32", "bf16", "fp32", "--device", "cpu", "--output-dir", str(out)])
    assert str(e.value.code) == ("error: --dtypes fp32 bf16 fp32: fp32 given more than once; mismatch.json keeps one "
                                 "result per arm, so name each arm once (and run the lab again to repeat one)")
    assert not out.exists()


@pytest.mark.parametrize("flags, expected", [
    (["--temperature", "0"], "error: --temperature 0.0: must be a finite number ≥ 0.01 (vLLM samples a lower one at "
                             "0.01, or greedily at 0, while the trainer scores at the value given)"),
    # Before: accepted, and the built-in sampler drew at 1e-6 what the trainer scored at 1e-7.
    (["--temperature", "1e-7"], "error: --temperature 1e-07: must be a finite number ≥ 0.01 (vLLM samples a lower "
                                "one at 0.01, or greedily at 0, while the trainer scores at the value given)"),
    (["--num-samples", "0"], "error: --num-samples 0: must be an integer ≥ 1"),
    (["--micro-batch-size", "0"], "error: --micro-batch-size 0: must be an integer ≥ 1"),
    (["--num-prompts", "-1"], "error: --num-prompts -1: must be an integer ≥ 1"),
    # Before: "error: --prompt-data: no prompts to sample from", a flag that was not given.
    (["--max-operand", "-3"],
     "error: --max-operand -3: must be an integer ≥ 0 (the arithmetic prompts add two numbers from 0 to it)"),
])
def test_a_value_the_measurement_cannot_use_is_refused_before_anything_is_written(flags, expected, tmp_path):
    # Before: --temperature 0 wrote NaN for every statistic, --num-prompts -1 took all prompts but the last, and
    # the other two failed with a traceback after sampling.
    out = tmp_path / "lab"
    with pytest.raises(SystemExit) as e:
        cli([*flags, "--dtypes", "fp32", "--device", "cpu", "--no-plots", "--output-dir", str(out)])
    assert str(e.value.code) == expected
    assert not out.exists()


@pytest.mark.parametrize("command", ["precision_oat.lab", "precision_oat.lab.preflight"])
def test_an_output_dir_where_a_file_stands_is_refused_in_one_line_before_the_model_loads(command, tmp_path):
    # Before: a FileExistsError (NotADirectoryError under the file) traceback; the preflight's came after its whole run.
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    for out, expected in ((taken, f"error: --output-dir {taken}: is a file; pass a folder (it is created when missing)"),
                          (taken / "sub", f"error: --output-dir {taken / 'sub'}: {taken} is a file, so no folder can be "
                                          "made under it; pass another folder")):
        run = subprocess.run([sys.executable, "-m", command, "--model", str(tmp_path / "no-model"), "--device", "cpu",
                              "--output-dir", str(out)], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert run.returncode == 1 and run.stderr.strip() == expected, run.stderr
    assert taken.read_text() == "not a folder"


@pytest.mark.parametrize("command", ["precision_oat.lab", "precision_oat.lab.preflight"])
def test_an_output_dir_that_cannot_be_made_is_one_line(command, embedded_policy_dir):
    # Before: the mkdir's FileNotFoundError as a traceback, after the model had loaded.
    run = subprocess.run([sys.executable, "-m", command, "--model", str(embedded_policy_dir), "--device", "cpu",
                          "--num-prompts", "1", "--output-dir", "/proc/self/lab"], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 1 and run.stderr.strip().splitlines() == [
        "error: --output-dir /proc/self/lab: cannot be created or written (FileNotFoundError: No such file or "
        "directory); pass a folder in a place you can write"], run.stderr


def test_lab_rescores_with_a_deepspeed_trainer_and_measures_the_trainer_against_itself(embedded_policy_dir, tmp_path):
    args = LabArgs(model=str(embedded_policy_dir), trainer="deepspeed", dtypes=("bf16", "fp32"), num_prompts=8,
                   num_samples=2, max_new_tokens=6, micro_batch_size=8, device="cpu", plots=False, output_dir=tmp_path)
    report = run_lab(args, log=lambda *_: None)
    assert report["settings"]["trainer"] == "deepspeed"
    bf16, fp32 = report["dtypes"]["bf16"], report["dtypes"]["fp32"]
    # The DeepSpeed engine scores what the fp32 sampler drew to fp32 rounding, and bf16 far less closely.
    assert fp32["mismatch/abs_logp_diff_mean"] < 1e-5
    assert bf16["mismatch/abs_logp_diff_mean"] > 100 * fp32["mismatch/abs_logp_diff_mean"]
    # The floor: the same tokens at micro-batch 8 and 2, and through the update path.
    assert bf16["trainer/microbatch_small"] == 2
    for stats in (bf16, fp32):
        for key in ("trainer/microbatch_gap_abs_mean", "trainer/update_path_gap_abs_mean"):
            assert 0.0 <= stats[key] < 1e-2, (key, stats[key])
    assert fp32["trainer/microbatch_gap_abs_mean"] < 1e-5


def test_the_smaller_micro_batch_splits_the_rows_even_when_they_fit_one_forward(embedded_report, tmp_path):
    # Before: 64 sequences at --micro-batch-size 64 were compared with micro-batches of 16, but 16 sequences with
    # micro-batches of 16: the same single forward, a gap of 0 by construction.
    report, _ = embedded_report
    assert report["dtypes"]["bf16"]["trainer/microbatch_small"] == 16
    args = LabArgs(num_prompts=4, num_samples=4, max_new_tokens=4, dtypes=("bf16",), device="cpu", plots=False,
                   output_dir=tmp_path)
    assert run_lab(args, log=lambda *_: None)["dtypes"]["bf16"]["trainer/microbatch_small"] == 4


@pytest.mark.skipif(torch.cuda.is_available() or importlib.util.find_spec("deepspeed") is None,
                    reason="needs DeepSpeed and no CUDA (where DeepSpeed computes fp16)")
def test_lab_refuses_fp16_with_a_deepspeed_trainer_on_cpu_before_sampling(embedded_policy_dir, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        cli(["--model", str(embedded_policy_dir), "--trainer", "deepspeed", "--device", "cpu",
             "--output-dir", str(out)])
    message = str(e.value.code)
    assert message.startswith("error: --trainer deepspeed --dtypes bf16 fp16 fp32: ") and "\n" not in message
    assert "use --dtypes bf16 fp32, or --trainer hf" in message
    assert "--learner" not in message and "--dtype " not in message
    assert not out.exists()


def test_lab_names_a_missing_stack_with_its_own_flags_before_loading_anything(tmp_path):
    absent = [m for m in ("vllm", "deepspeed") if importlib.util.find_spec(m) is None]
    if not absent:
        pytest.skip("vLLM and DeepSpeed are both installed here")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        cli(["--sampler", "vllm", "--trainer", "deepspeed", "--device", "cpu", "--output-dir", str(out)])
    message = str(e.value.code)
    assert message.startswith("error: --sampler vllm --trainer deepspeed needs vLLM and DeepSpeed") and "\n" not in message
    assert f"lacks {', '.join(absent)};" in message
    assert 'pip install -e ".[vllm,deepspeed]" on a CUDA machine' in message and "--learner" not in message
    assert not out.exists()
