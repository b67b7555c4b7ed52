"""--export-tokens: the parquet files of a real run hold the tokens its metrics.jsonl was computed from."""

import json

import pandas as pd
import pytest

from precision_oat.backends.local.driver import train
from tests.backends.helpers import make_args


def test_exported_tokens_agree_with_the_steps_metrics(tmp_path, embedded_policy_dir):
    out = tmp_path / "run"
    # pg's advantage is Dr.GRPO's, A = r − mean over the prompt's G = 4 responses.
    train(make_args(model=str(embedded_policy_dir), algo="pg", dtype="bf16", steps=3, export_tokens=1,
                    output_dir=str(out)))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sorted(p.name for p in (out / "tokens").iterdir()) == [f"step_00000{s}.parquet" for s in (1, 2, 3)]
    for row in rows:
        tokens = pd.read_parquet(out / "tokens" / f"step_{row['step']:06d}.parquet")
        assert list(tokens.columns) == ["response", "position", "token_id", "logp_sampler", "logp_old", "delta",
                                        "advantage", "reward"]
        # 8 prompts × 4 samples, each response's positions 0, 1, … in order.
        per_response = tokens.groupby("response")
        assert per_response.ngroups == 32 and len(tokens) == pytest.approx(32 * row["response/length_mean"], abs=1e-9)
        assert all(list(g["position"]) == list(range(len(g))) for _, g in per_response)
        assert tokens["delta"].abs().mean() == pytest.approx(row["mismatch/abs_logp_diff_mean"], rel=1e-5)
        assert ((tokens["logp_old"] - tokens["logp_sampler"]) == tokens["delta"]).all()
        assert (tokens["logp_sampler"] < 0).all()
        response = per_response.first()
        assert response["reward"].mean() == pytest.approx(row["reward/mean"], rel=1e-6)
        group_mean = response["reward"].groupby(response.index // 4).transform("mean")
        assert (response["advantage"] - (response["reward"] - group_mean)).abs().max() < 1e-6
        assert response["advantage"].abs().mean() == pytest.approx(row["train/advantage_abs_mean"], rel=1e-6)


def test_every_n_steps_exports_those_steps_only(tmp_path, embedded_policy_dir):
    out = tmp_path / "run"
    train(make_args(model=str(embedded_policy_dir), steps=3, export_tokens=2, output_dir=str(out)))
    assert [p.name for p in (out / "tokens").iterdir()] == ["step_000002.parquet"]
