"""What a run prints: the banner names LoRA, step lines carry an ETA, and wandb adds one line saying where its run is."""

import json
import re

from precision_oat.backends.local.driver import train
from precision_oat.runs.log import duration, step_line
from tests.backends.helpers import make_args


def test_an_offline_lora_run_prints_its_lora_its_eta_and_one_wandb_line(tmp_path, embedded_policy_dir, capfd):
    out = tmp_path / "run"
    train(make_args(model=str(embedded_policy_dir), steps=3, lora_rank=4, lora_alpha=8.0,
                    lora_target_modules=["q_proj", "v_proj"], wandb_mode="offline", log_every=1, output_dir=str(out)))
    printed = capfd.readouterr()
    lines = (printed.out + printed.err).splitlines()
    assert lines[0].endswith(" · device cpu · LoRA rank 4 alpha 8 on q_proj, v_proj")
    # The contract says what LoRA trains and what the sampler gets, on the console and in config.json.
    lora = ("lora rank 4 alpha 8 on q_proj, v_proj: the adapters are the trained weights (with their masters), the base "
            "stays frozen, and every push merges them into the base in fp32 before the cast to the sampler dtype")
    (contract,) = [line for line in lines if line.startswith("precision contract: ")]
    assert contract.endswith(" · " + lora)
    assert json.loads((out / "config.json").read_text())["precision_contract"]["lora"] == lora.removeprefix("lora ")
    steps = [line for line in lines if line.startswith("step ")]
    assert len(steps) == 3
    assert all(re.search(r"  eta \d+s$", line) for line in steps[:2]) and "eta" not in steps[2]
    # wandb's own banner and closing history dump are gone; one line names the offline run's folder.
    said = [line for line in lines if line.startswith("wandb")]
    (folder,) = (out / "wandb").glob("offline-run-*")
    assert said == [f"wandb: offline run in {folder} (upload: wandb sync {folder})"]


def test_the_banner_and_the_contract_say_nothing_of_lora_when_it_is_off():
    assert make_args().lora.describe() == "" and make_args().lora.contract() == {}


def test_a_time_left_is_shown_to_the_unit_that_matters():
    assert [duration(s) for s in (0.4, 42, 185, 7620)] == ["0s", "42s", "3m05s", "2h07m"]


def test_a_step_line_shows_the_records_console_keys_and_the_time_left():
    row = {"step": 3, "reward/mean": 0.5, "mismatch/k3": 1.5e-4, "train/loss_scale": 65536.0, "eval/average/avg@1": 0.2}
    # 7 steps left at 2.5 s each: 17.5 s, rounded to 18 s; keys outside the console's list are not shown.
    assert step_line(row, 10, 2.5) == "step    3/10  reward 0.500  k3 1.5e-04  scale 65536  eta 18s"
    assert step_line({**row, "step": 10}, 10, 2.5) == "step   10/10  reward 0.500  k3 1.5e-04  scale 65536"
    assert step_line(row, 10) == "step    3/10  reward 0.500  k3 1.5e-04  scale 65536"
