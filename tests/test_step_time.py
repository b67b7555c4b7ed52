"""benchmarks/step_time.py on CPU: the embedded policy, the built-in learner and sampler, three rounds."""

from __future__ import annotations

import json

from tests.conftest import load_script


def test_rounds_alternate_the_dtypes_and_report_medians_within_their_spread(tmp_path, embedded_policy_dir, capsys):
    step_time = load_script("benchmarks/step_time.py")
    args = step_time.BenchArgs(model=str(embedded_policy_dir), batch=8, prompt_len=4, response_len=4,
                               micro_batch_size=4, warmup=1, iters=3, rounds=3, device="cpu",
                               output=tmp_path / "step_time.json")
    result = step_time.main(args)
    written = json.loads((tmp_path / "step_time.json").read_text())
    assert all(written[k] == result[k] for k in ("dtypes", "spread", "fp16_over_bf16"))
    assert written["settings"]["rounds"] == 3

    printed = [line.split(":")[0] for line in capsys.readouterr().out.splitlines() if "learner step" in line]
    assert printed == ["fp16", "bf16", "bf16", "fp16", "fp16", "bf16"]
    keys = {"learner_step_s/builtin", "sampler_tokens_per_s/builtin"}
    for dtype in ("fp16", "bf16"):
        assert set(result["dtypes"][dtype]) == keys
        for key, value in result["dtypes"][dtype].items():
            low, high = result["spread"][dtype][key]
            assert 0 < low <= value <= high, (dtype, key)
    ratio = result["fp16_over_bf16"]["learner_step_s/builtin"]
    assert ratio > 0 and set(result["fp16_over_bf16"]) == keys
    # The ratio is the median of the rounds' ratios, not the ratio of the medians: both lie in the spreads' ratio.
    fp16, bf16 = result["spread"]["fp16"]["learner_step_s/builtin"], result["spread"]["bf16"]["learner_step_s/builtin"]
    assert fp16[0] / bf16[1] <= ratio <= fp16[1] / bf16[0]
