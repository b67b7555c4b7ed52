"""``to_oat_args``: our flags onto Oat's PPOArgs, sizes in Oat's terms, refusals up front."""

import pytest


def test_cpu_layout_is_one_collocated_actor_learner_pair_with_gloo(oat_args):
    a = oat_args("--dtype", "bf16", "--sampler", "builtin")
    assert (a.gpus, a.num_gpus_per_actor, a.collocate) == (1, 1, True)
    # vLLM sleep only makes sense with a GPU to free.
    assert a.vllm_sleep is False
    assert a.master_addr == "127.0.0.1"
    assert a.sampler == "builtin"


def test_precision_maps_to_oat_flags_and_our_policy(oat_args):
    bf16 = oat_args("--dtype", "bf16")
    assert (bf16.bf16, bf16.fp16) == (True, False)
    fp32 = oat_args("--dtype", "fp32")
    assert (fp32.bf16, fp32.fp16) == (False, False)
    mixed = oat_args("--dtype", "fp32", "--sampler-dtype", "bf16")
    assert (mixed.precision.sampler, mixed.precision.trainer) == ("bf16", "fp32")
    assert (mixed.bf16, mixed.fp16) == (False, False)


def test_flash_attention_2_asked_by_either_flag_reaches_oat(oat_args):
    # The shipped presets ask for it with attn_implementation; Oat's own switch is flash_attn.
    assert oat_args("--dtype", "bf16", "--attn-implementation", "flash_attention_2").flash_attn is True
    assert oat_args("--dtype", "bf16", "--flash-attn").flash_attn is True
    assert oat_args("--dtype", "bf16").flash_attn is False


def test_sizes_in_oat_terms(oat_args):
    # 4 prompts × 8 samples = 32 responses per step; optimiser batches of 16, micro-batches of 4.
    a = oat_args("--dtype", "bf16", "--prompts-per-step", "4", "--num-samples", "8", "--train-batch-size", "16",
                 "--micro-batch-size", "4", "--steps", "3", "--num-epochs", "2", "--max-new-tokens", "6")
    assert (a.rollout_batch_size, a.rollout_batch_size_per_device) == (4, 4)
    assert a.pi_buffer_maxlen_per_device == 32
    assert (a.train_batch_size, a.train_batch_size_per_device) == (16, 4)
    assert (a.num_samples, a.num_ppo_epochs, a.generate_max_length) == (8, 2, 6)
    # Oat stops once more than max_queries responses were collected: after exactly 3 steps of 32.
    assert a.max_queries == 3 * 32 - 1


def test_whole_rollout_is_one_optimiser_batch_by_default(oat_args):
    a = oat_args("--dtype", "bf16", "--prompts-per-step", "2", "--num-samples", "4", "--micro-batch-size", "64")
    assert (a.train_batch_size, a.train_batch_size_per_device) == (8, 8)


def test_algorithm_and_optimiser(oat_args):
    a = oat_args("--dtype", "fp32", "--algo", "grpo-tis", "--learning-rate", "3e-4", "--weight-decay", "0.1",
                 "--max-grad-norm", "0.5", "--temperature", "1.0", "--seed", "7")
    assert a.algorithm.objective == "clip" and a.algorithm.correction == "token-tis"
    assert a.algorithm.correction_cap == 2.0
    # Oat's own TIS, KL terms and fused lm-head (log-probs rounded to bf16) stay off.
    assert a.tis_c is None and a.beta == 0.0 and a.kl_penalty_coef == 0.0
    assert a.use_fused_lm_head is False
    assert a.critic_type == "drgrpo"
    assert (a.learning_rate, a.l2, a.max_norm, a.seed) == (3e-4, 0.1, 0.5, 7)
    assert a.lr_scheduler == "constant"
    # Oat's critic type only keeps groups together; it does not follow the advantage estimator.
    assert oat_args("--dtype", "fp32", "--algo", "gspo").critic_type == "drgrpo"


def test_gpu_layouts(oat_args):
    # Four GPUs, not collocated: two for vLLM actors, two for learners.
    a = oat_args("--sampler", "vllm", "--dtype", "bf16", "--prompts-per-step", "8", cuda_devices=4)
    assert (a.gpus, a.collocate) == (4, False)
    assert a.rollout_batch_size_per_device == 4
    assert a.pi_buffer_maxlen_per_device == 4 * 8
    # One GPU: actor and learner share it, vLLM sleeps during updates.
    b = oat_args("--sampler", "vllm", "--dtype", "fp16", cuda_devices=1)
    assert (b.gpus, b.collocate, b.vllm_sleep) == (1, True, True)
    assert b.fp16 is True


@pytest.mark.parametrize(
    "flags, cuda_devices, message",
    [
        (("--sampler", "vllm", "--dtype", "bf16"), 0, "needs a CUDA GPU"),
        (("--dtype", "fp16"), 0, "DeepSpeed refuses fp16 without a GPU"),
        (("--dtype", "fp32", "--gpus", "2", "--collocate", "True"), 0, "without CUDA the Oat backend runs one learner"),
        (("--prompts-per-step", "3", "--dtype", "bf16"), 4, "multiple of the 2 learners"),
        (("--micro-batch-size", "3", "--prompts-per-step", "2", "--num-samples", "2", "--dtype", "bf16"), 0,
         "--micro-batch-size 3 must divide the 4 responses per learner step; use 2, or another divisor of 4"),
    ],
)
def test_refusals_name_the_flags(oat_args, flags, cuda_devices, message):
    with pytest.raises(ValueError, match=message):
        oat_args(*flags, cuda_devices=cuda_devices)


def test_vllm_at_another_temperature_runs_a_loss_without_mu(oat_args):
    args = oat_args("--sampler", "vllm", "--dtype", "bf16", "--temperature", "0.7", "--algo", "grpo", cuda_devices=1)
    assert args.temperature == 0.7
    # At temperature 1 every algorithm runs.
    assert oat_args("--sampler", "vllm", "--dtype", "bf16", "--algo", "grpo-tis", cuda_devices=1).temperature == 1.0
