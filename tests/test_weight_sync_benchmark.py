"""benchmarks/weight_sync.py runs on CPU with a real DeepSpeed learner (its figures come from the GPU)."""

import json

from tests.conftest import load_script


def test_the_weight_sync_benchmark_times_each_part_of_a_deepspeed_learners_sync(tmp_path):
    weight_sync = load_script("benchmarks/weight_sync.py")
    out = tmp_path / "sync.json"
    result = weight_sync.main(["--repeats", "2", "--output", str(out), "--", "--device", "cpu", "--dtype", "bf16",
                               "--learner", "deepspeed", "--output-dir", str(tmp_path / "run")])
    assert json.loads(out.read_text()) == result
    assert set(result["median_s"]) == set(weight_sync.PARTS)
    assert all(len(times) == 2 and all(t > 0 for t in times) for times in result["all_s"].values())
