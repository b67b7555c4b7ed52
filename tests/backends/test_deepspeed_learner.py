"""``--learner deepspeed`` on CPU (bf16 and fp32; DeepSpeed refuses fp16 without a GPU): the same
update as the built-in learner, its checkpoints, LoRA, and the loop end to end."""

import json
import weakref

import pytest
import torch

from precision_oat.backends.local.driver import build_learner, train
from precision_oat.errors import NonFiniteWeights, UserError
from precision_oat.learners.deepspeed_config import local_fp32_masters
from precision_oat.precision.weight_sync import push_weights
from precision_oat.rl.settings import learner_settings
from precision_oat.samplers.kv_cache import KVCacheSampler
from tests.conftest import tiny_model
from tests.backends.helpers import make_args
from tests.backends.test_local_learner import rollout_of


def build(kind, model, **flags):
    zero_stage = flags.pop("zero_stage", 0)
    args = make_args(learner=kind, **(dict(zero_stage=zero_stage) if kind == "deepspeed" else {}), **flags)
    return build_learner(model, learner_settings(args, torch.device("cpu")))


@pytest.mark.parametrize("zero_stage", [0, 2])
def test_deepspeed_and_builtin_learners_make_the_same_fp32_update(zero_stage):
    rollout = rollout_of(tiny_model(), n=2)
    flags = dict(dtype="fp32", algo="grpo-tis", num_samples=2, micro_batch_size=4, learning_rate=1e-3)
    builtin = build("builtin", tiny_model(), **flags)
    deepspeed = build("deepspeed", tiny_model(), zero_stage=zero_stage, **flags)
    a, b = builtin.update(rollout, step=0).stats, deepspeed.update(rollout, step=0).stats
    assert abs(a["loss/policy"] - b["loss/policy"]) < 1e-6
    assert abs(a["train/grad_norm"] - b["train/grad_norm"]) < 1e-5 * a["train/grad_norm"]
    assert b["train/optimizer_steps"] == 1 and b["train/skipped_steps"] == 0 and b["train/loss_scale"] == 1.0
    exported_a, exported_b = dict(builtin.export_weights()), dict(deepspeed.export_weights())
    assert exported_a.keys() == exported_b.keys()
    moved = 0
    for name, w in exported_a.items():
        torch.testing.assert_close(exported_b[name].cpu(), w.cpu(), atol=1e-6, rtol=1e-5)
        moved += not torch.equal(w.cpu(), tiny_model().state_dict()[name])
    assert moved > 0


def test_bf16_deepspeed_learner_keeps_fp32_masters_and_steps():
    model = tiny_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    learner = build("deepspeed", model, dtype="bf16", algo="pg", num_samples=4, zero_stage=1, learning_rate=1e-3)
    assert next(learner.model.parameters()).dtype == torch.bfloat16
    stats = learner.update(rollout_of(tiny_model()), step=0).stats
    assert stats["train/optimizer_steps"] == 1.0 and stats["mismatch/abs_logp_diff_mean"] > 0
    masters = dict(learner.export_weights())
    assert all(w.dtype == torch.float32 for w in masters.values())
    # An Adam step of 1e-3 is below bf16's resolution for most weights, but the fp32 masters hold it.
    changed = [n for n, w in masters.items() if not torch.equal(w.cpu(), before[n])]
    assert len(changed) == len(masters)


def test_a_weight_sync_streams_the_gathered_masters_one_at_a_time():
    flags = dict(dtype="bf16", algo="pg", num_samples=4, zero_stage=1, learning_rate=1e-3)
    learner = build("deepspeed", tiny_model(), **flags)
    learner.update(rollout_of(tiny_model()), step=0)
    sampler = KVCacheSampler(tiny_model(), torch.bfloat16)
    exported, most_alive = [], 0

    def watched(weights):
        nonlocal most_alive
        for name, master in weights:
            exported.append(weakref.ref(master))
            most_alive = max(most_alive, sum(ref() is not None for ref in exported))
            yield name, master

    checked = push_weights(sampler, watched(learner.export_weights()),
                           make_args(learner="deepspeed", **flags).precision.build())
    # Every master reached the sampler and was checked there, but never more than two were held at once
    # (the one being loaded and the one just checked), not a whole fp32 copy of the model.
    assert checked == len(exported) == len(learner.trainable) > 2
    assert most_alive <= 2


def test_fp16_deepspeed_on_cpu_is_refused_with_the_fix():
    if torch.cuda.is_available():
        pytest.skip("fp16 DeepSpeed runs where CUDA is")
    with pytest.raises(UserError, match="--dtype fp16 with DeepSpeed needs a CUDA device"):
        build("deepspeed", tiny_model(), dtype="fp16")


def test_deepspeed_run_resumes_where_an_uninterrupted_run_ends(tmp_path, embedded_policy_dir):
    common = dict(model=str(embedded_policy_dir), algo="grpo", dtype="bf16", learning_rate=5e-3, learner="deepspeed",
                  zero_stage=1)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(make_args(**common, steps=3, output_dir=str(straight)))
    train(make_args(**common, steps=2, output_dir=str(resumed)))
    assert (resumed / "checkpoints" / "step_000002" / "deepspeed").is_dir()
    train(make_args(**common, steps=3, output_dir=str(resumed), resume=True))
    rows = lambda f: [json.loads(line) for line in (f / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    a, b = rows(straight), rows(resumed)
    assert [r["step"] for r in b] == [1, 2, 3]
    assert a[-1]["reward/mean"] == b[-1]["reward/mean"]
    assert abs(a[-1]["loss/policy"] - b[-1]["loss/policy"]) < 1e-6
    assert b[-1]["train/optimizer_steps"] == 3


def test_deepspeed_lora_exports_merged_weights():
    model = tiny_model()
    learner = build("deepspeed", model, dtype="fp32", algo="pg", num_samples=4, lora_rank=4, learning_rate=1e-2)
    learner.update(rollout_of(tiny_model()), step=0)
    exported = dict(learner.export_weights())
    assert exported and all(n.endswith("proj.weight") for n in exported)
    for name, module in learner.model.named_modules():
        if hasattr(module, "lora_A") and "default" in module.lora_A:
            a, b = module.lora_A["default"].weight, module.lora_B["default"].weight
            key = name.removeprefix("base_model.model.") + ".weight"
            expected = learner.base_weights[key] + module.scaling["default"] * (b @ a).detach()
            torch.testing.assert_close(exported[key], expected, atol=1e-6, rtol=1e-5)


# A vocabulary of 2048 makes the embedding larger than ZeRO-3's persistence threshold (1e5
# elements), so ZeRO-3 partitions it and leaves an empty placeholder on the module.
PARTITIONED_VOCAB = 2048


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_deepspeed_learner_exports_the_optimizers_fp32_masters(zero_stage, dtype):
    learner = build("deepspeed", tiny_model(vocab=PARTITIONED_VOCAB), dtype=dtype, algo="pg", num_samples=4,
                    zero_stage=zero_stage, learning_rate=1e-2)
    learner.update(rollout_of(tiny_model(vocab=PARTITIONED_VOCAB)), step=0)
    exported = dict(learner.export_weights())
    assert list(exported) == [n for n, _ in learner.trainable]
    flat = torch.cat([w.flatten() for w in exported.values()])
    # One process holds every partition; the optimiser lays the masters out by parameter group, zero-padded,
    # so the two hold the same values, bit for bit, up to order and padding.
    masters = torch.cat([m.flatten() for m in local_fp32_masters(learner.engine)])
    assert flat.dtype == torch.float32
    padded = torch.cat([flat, flat.new_zeros(masters.numel() - flat.numel())])
    assert torch.equal(padded.sort().values, masters.sort().values)
    if dtype == "bf16":
        # A step of 1e-2 moves the masters off the bf16 grid: the export is not the bf16 parameters.
        assert not torch.equal(flat, flat.bfloat16().float())


@pytest.mark.parametrize("zero_stage", [1, 2])
def test_one_rank_reads_its_zero_masters_in_place_with_the_values_a_gather_gives(zero_stage):
    from deepspeed.utils import safe_get_full_fp32_param

    learner = build("deepspeed", tiny_model(), dtype="bf16", algo="pg", num_samples=4, zero_stage=zero_stage,
                    learning_rate=1e-2)
    learner.update(rollout_of(tiny_model()), step=0)
    partitions = local_fp32_masters(learner.engine)
    for (name, param), (exported_name, master) in zip(learner.trainable, learner.export_weights(), strict=True):
        assert exported_name == name and master.shape == param.shape
        assert torch.equal(master, safe_get_full_fp32_param(param)), name
        # No copy: the export is a view of the optimiser's own fp32 partition.
        assert any(p.data_ptr() <= master.data_ptr() < p.data_ptr() + p.numel() * p.element_size()
                   for p in partitions), name


@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_deepspeed_learner_stops_when_its_fp32_masters_are_nan(zero_stage):
    from deepspeed.utils import safe_set_full_fp32_param

    learner = build("deepspeed", tiny_model(vocab=PARTITIONED_VOCAB), dtype="bf16", algo="pg", num_samples=4,
                    zero_stage=zero_stage, learning_rate=1e-3)
    embedding = dict(learner.trainable)["model.embed_tokens.weight"]
    with torch.no_grad():
        if zero_stage == 0:
            for master in local_fp32_masters(learner.engine):
                master.fill_(float("nan"))
        else:
            # Only the master of the embedding (partitioned under ZeRO-3); its bf16 copy stays finite until the step.
            shape = embedding.ds_shape if zero_stage == 3 else embedding.shape
            safe_set_full_fp32_param(embedding, torch.full(shape, float("nan")))
    with pytest.raises(NonFiniteWeights, match="step 1: the optimiser step made weights inf/NaN"):
        learner.update(rollout_of(tiny_model(vocab=PARTITIONED_VOCAB)), step=0)


@pytest.mark.parametrize("vocab", [32, PARTITIONED_VOCAB])
def test_lora_at_zero_3_scores_its_head_in_chunks_and_makes_zero_0s_update(vocab):
    # LoRA freezes the output projection; under ZeRO-3 a chunk of it recomputed in the backward found the frozen
    # weight still a shard (torch's CheckpointError), so this learner keeps each chunk's logits instead.
    flags = dict(dtype="fp32", algo="grpo", num_samples=4, lora_rank=4, learning_rate=1e-2, logprob_chunk_size=3)
    rollout = rollout_of(tiny_model(vocab=vocab))
    plain, sharded = (build("deepspeed", tiny_model(vocab=vocab), zero_stage=stage, **flags) for stage in (0, 3))
    assert plain.recompute_head and not sharded.recompute_head
    a, b = plain.update(rollout, step=0).stats, sharded.update(rollout, step=0).stats
    assert b["train/grad_norm"] > 0
    assert abs(a["loss/policy"] - b["loss/policy"]) < 1e-6
    assert abs(a["train/grad_norm"] - b["train/grad_norm"]) < 1e-5 * a["train/grad_norm"]
