"""benchmarks/scale_ladder.py: its CPU smoke mode end to end, the micro-batch search, the FLOPs formula and
the allocator picture."""

import dataclasses
import json
import sys

import pytest
import torch

from tests.conftest import REPO, load_script

ladder = load_script("benchmarks/scale_ladder.py")


def test_smoke_mode_runs_full_steps_and_writes_every_figure(tmp_path):
    output = tmp_path / "ladder.json"
    ladder.main(ladder.LadderArgs(smoke=True, output=output))
    result = json.loads(output.read_text())
    [cell] = result["cells"]
    assert cell["fits"] and cell["micro_batch_size"] == 4 and cell["micro_batch_tried"] == {"4": "fits"}
    # Every rate and the step time are measured (a figure left at 0 is one not written); each part of the split is
    # a median of sub-intervals of its step, so none exceeds the median step.
    for key in ("sampler_tokens_per_s", "learner_tokens_per_s", "mfu", "step_time_s"):
        assert cell[key] > 0, key
    for key in (f"perf/time/{p}" for p in ladder.TIME_PARTS):
        assert 0 <= cell[key] <= cell["step_time_s"], key
    assert cell["perf/time/sample"] > 0 and cell["perf/time/update"] > 0


def test_profile_records_where_one_more_update_spends_its_time(tmp_path):
    output = tmp_path / "ladder.json"
    ladder.main(ladder.LadderArgs(smoke=True, profile=True, output=output))
    [cell] = json.loads(output.read_text())["cells"]
    names = [name for name, calls, ms, share in cell["operators"]]
    assert len(names) == 25 and all(calls >= 1 and ms >= 0 and 0 <= share <= 1 for _, calls, ms, share in cell["operators"])
    # The update's matrix products are among its costliest operators, and the shares are of one total.
    assert {"aten::mm", "aten::addmm", "aten::bmm"} & set(names)
    assert sum(share for *_, share in cell["operators"]) <= 1.0001
    _, _, ms, share = cell["operators"][0]
    assert cell["profiled_device_ms"] == pytest.approx(ms / share, rel=0.01)
    assert 0 < cell["profiled_device_ms"] <= cell["profiled_wall_ms"]
    host_ms = [ms for _, _, ms in cell["host_operators"]]
    assert len(host_ms) == 25 and host_ms == sorted(host_ms, reverse=True)


def test_fp16_over_bf16_is_the_ratio_of_median_times_of_cells_that_ran():
    cells = [{"model": "m", "dtype": d, "fits": True, "step_time_s": t, "perf/time/score": t / 4, "perf/time/update": u}
             for d, t, u in (("fp16", 2.0, 1.0), ("bf16", 1.0, 1.0), ("fp16", 3.0, 1.0), ("bf16", 4.0, 1.0),
                             ("fp16", 2.5, 1.0), ("bf16", 2.0, 1.0))]
    cells.append({"model": "m", "dtype": "bf16", "fits": False})
    cells.append({"model": "n", "dtype": "fp16", "fits": True, "step_time_s": 1.0, "perf/time/score": 0.1,
                  "perf/time/update": 0.5})
    # Step time medians: fp16 2.5, bf16 2.0; "n" has no bf16 cell.
    assert ladder.time_ratios(cells, ladder.step_seconds) == {"m": 1.25}
    # Learner time (score + update) medians: fp16 0.625 + 1, bf16 0.5 + 1.
    assert ladder.time_ratios(cells, ladder.learner_seconds) == {"m": pytest.approx(1.625 / 1.5)}


@pytest.mark.parametrize("cell_timeout_s, limit", [(1200.0, "the ladder's --time-limit-s"), (1.0, "--cell-timeout-s")])
def test_a_cell_stopped_by_a_time_limit_is_not_measured_rather_than_too_large(cell_timeout_s, limit, monkeypatch):
    # The cell's own process (spawned, so it imports this script by its name) is killed after a second.
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    monkeypatch.setitem(sys.modules, "scale_ladder", ladder)  # another test may have loaded the script again
    args = dataclasses.replace(ladder.smoke_settings(ladder.LadderArgs()), in_process=False, cell_timeout_s=cell_timeout_s)
    cell = ladder.run_isolated(args, "tiny", 8, "fp32", timeout_s=1.0)
    assert cell["fits"] is None and cell["error"] == f"stopped by {limit} after 1 s"
    assert ladder.describe(cell) == f"tiny × 8 fp32: not measured (stopped by {limit} after 1 s)"
    assert ladder.time_ratios([cell], ladder.step_seconds) == {}


@pytest.mark.parametrize("learner_kind", ["builtin", "deepspeed"])
def test_micro_batch_search_moves_down_on_out_of_memory_and_drops_the_failed_gradients(learner_kind):
    from precision_oat.backends.local.driver import build_learner
    from precision_oat.rl.rollout import collate
    from precision_oat.rl.settings import learner_settings
    from precision_oat.samplers.kv_cache import KVCacheSampler
    from precision_oat.samplers.sampler import SamplingParams

    args = ladder.dataclasses.replace(ladder.smoke_settings(ladder.LadderArgs()), micro_batch_sizes=(4, 2),
                                      learner=learner_kind)
    model = ladder.random_model("tiny")
    completions = KVCacheSampler(model, torch.float32).generate([[3, 4], [5, 6]], SamplingParams(n=4, max_new_tokens=4))
    rollout = collate(completions, [float(i % 2) for i in range(8)], 4, pad_token_id=0)
    def build_with_small_memory(flags, *rest, **kw):
        learner = build_learner(flags, *rest, **kw)
        # The device runs out in the update's second 4-row forward, after the first one's backward.
        forwards = []

        def run_out(module, inputs, output):
            if torch.is_grad_enabled() and inputs[0].shape[0] > 2:
                forwards.append(1)
                if len(forwards) == 2:
                    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
        learner.model.model.layers[0].register_forward_hook(run_out)
        return learner

    cell = {"micro_batch_tried": {}}
    learner, stats = ladder.largest_fitting_update(args, cell, model, 4, "fp32", rollout, torch.device("cpu"),
                                                   build_with_small_memory, learner_settings)
    assert cell["micro_batch_tried"] == {4: "out of memory", 2: "fits"} and cell["micro_batch_size"] == 2
    assert learner.settings.train.micro_batch_size == 2 and "error" not in cell

    # The same step by a fresh learner at 2 rows: the failed attempt left no gradient behind.
    fresh_args = ladder.cell_args(args, 4, "fp32", 2)
    fresh = build_learner(ladder.copy.deepcopy(model), learner_settings(fresh_args, torch.device("cpu")))
    fresh_stats = fresh.update(rollout, 0).stats
    assert stats["loss/policy"] == fresh_stats["loss/policy"]
    for (name, w), (_, v) in zip(learner.export_weights(), fresh.export_weights()):
        assert torch.equal(w.cpu(), v.cpu()), name


def test_step_flops_count_the_output_projection_at_response_positions_only():
    model = ladder.random_model("tiny")
    # tiny: tied, so the body is every parameter but the shared V × h matrix; L = 2, h = 32; 3 sequences of
    # 10 tokens, 4 of them the response: the head projects those 4 alone.
    head = model.get_output_embeddings().weight.numel()
    body = sum(p.numel() for p in model.parameters()) - head
    expected = 3 * (8 * (body * 10 + head * 4) + 16 * 2 * 32 * 10**2)
    assert ladder.step_flops(model, 3, 10, 4) == expected
    assert ladder.step_flops(model, 3, 10, 4) < ladder.step_flops(model, 3, 10, 10)


def test_the_kv_cache_of_a_cell_holds_its_sequences_in_its_dtype():
    # The paper's 1.5B shape: 28 layers, 2 KV heads of 128; 64 sequences of 8,320 tokens.
    config = ladder.build_config("qwen2.5-1.5b")
    per_token = 2 * 28 * 2 * 128 * 2  # K and V, every layer, 2 bytes
    assert ladder.kv_cache_gb(config, 64, 8320, "fp16") == 1.1 * 64 * 8320 * per_token / 2**30 + 0.5
    assert ladder.kv_cache_gb(config, 64, 8320, "fp32") == 1.1 * 64 * 8320 * 2 * per_token / 2**30 + 0.5
    args = ladder.LadderArgs(prompts_per_step=8, num_samples=8, prompt_len=128)
    assert ladder.cell_args(args, 8192, "fp16", 4, config).rollout.vllm_kv_cache_gb == pytest.approx(16.1, abs=0.05)
    assert ladder.cell_args(dataclasses.replace(args, kv_cache_for_the_step=False), 8192, "fp16", 4, config) \
        .rollout.vllm_kv_cache_gb is None


def test_a_cells_model_flags_are_the_ladders():
    args = ladder.LadderArgs(gradient_checkpointing=False, compile_layers=True)
    model = ladder.cell_args(args, 1024, "fp16", 8).model
    assert (model.gradient_checkpointing, model.compile_layers) == (False, True)


def test_the_allocator_picture_sums_live_blocks_by_the_frames_that_allocated_them():
    def frame(path, line, name):
        return {"filename": path, "line": line, "name": name}

    adam = [frame("/lib/torch/optim/adamw.py", 9, "_init_group"),
            frame("/lib/deepspeed/zero/stage_1_and_2.py", 7, "step"),
            frame("/src/precision_oat/rl/step.py", 5, "_update"), frame("/src/precision_oat/rl/step.py", 3, "update")]
    gb = 2**30
    segments = [
        {"total_size": 8 * gb, "allocated_size": 6 * gb, "blocks": [
            {"state": "active_allocated", "size": 4 * gb, "frames": adam},
            {"state": "active_allocated", "size": 2 * gb, "frames": adam},
            {"state": "inactive", "size": 2 * gb, "frames": []}]},
        {"total_size": 3 * gb, "allocated_size": 3 * gb, "blocks": [{"state": "active_allocated", "size": 3 * gb}]},
    ]
    picture = ladder.allocator_picture(segments)
    origin = "stage_1_and_2.py:7 step < step.py:5 _update < step.py:3 update"
    assert picture["live_by_origin_gb"] == {origin: 6.0, "before the learner": 3.0}
    assert picture["largest_live_blocks_gb"] == [[4.0, origin], [3.0, "before the learner"], [2.0, origin]]
    assert picture["most_pinned_segments_gb"] == [[2.0, 8.0]]
