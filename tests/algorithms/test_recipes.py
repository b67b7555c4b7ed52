"""Recipes, the registry and the class builders."""

import ast
import dataclasses
import pathlib
import sys

import pytest
import torch

import precision_oat.algorithms as algorithms
from precision_oat.algorithms import (
    ADVANTAGES, CORRECTIONS, OBJECTIVES, RECIPES, REDUCTIONS, AlgorithmSpec, ClipMixin, ConstantNormMixin,
    DrGRPOMixin, ISPGMixin, Mean, NoCorrectionMixin, PolicyBatch, PolicyLoss, SeqMISMixin, TokenMeanMixin,
    build_policy_loss, compose, register, resolve,
)
from precision_oat.algorithms.registry import lookup
from precision_oat.errors import UserError

PAPER_RECIPES = {"pg", "token-is-pg", "grpo", "grpo-tis", "grpo-mis", "grpo-seq-tis", "gspo", "reinforce", "rloo"}


def random_batch(seed=0, b=4, t=6):
    g = torch.Generator().manual_seed(seed)
    logprobs = -torch.rand(b, t, generator=g, dtype=torch.float64) * 2
    old = logprobs + 0.05 * torch.randn(b, t, generator=g, dtype=torch.float64)
    sampler = old + 0.3 * torch.randn(b, t, generator=g, dtype=torch.float64)
    lengths = torch.tensor([6, 3, 1, 5])
    mask = (torch.arange(t)[None] < lengths[:, None]).to(torch.float64)
    adv = torch.tensor([1.0, -0.5, 2.0, -1.5], dtype=torch.float64)
    return logprobs, old, sampler, adv, mask


def test_paper_recipes_exist_and_resolve():
    assert PAPER_RECIPES <= set(RECIPES)
    for name in RECIPES:
        spec = resolve(name, max_gen_length=16)
        assert spec.loss_constant == 16.0
        assert RECIPES[name].summary


def test_grpo_mis_resolves_to_its_documented_pieces():
    spec = resolve("grpo-mis", max_gen_length=1024)
    assert spec == AlgorithmSpec("drgrpo", "clip", "seq-mis", "constant", is_cap=None, clip_low=0.2,
                                 clip_high=0.2, correction_cap=10.0, loss_constant=1024.0, adv_eps=1e-6)


def test_gspo_recipe_uses_its_tiny_clip_range_and_seq_mean():
    spec = resolve("gspo", max_gen_length=8)
    assert (spec.advantage, spec.objective, spec.reduction) == ("grpo", "gspo", "seq-mean")
    assert (spec.clip_low, spec.clip_high) == (3e-4, 4e-4)


def test_overrides_win_over_the_recipe():
    spec = resolve("grpo-tis", correction="token-mis", correction_cap=3.0, clip_high=0.28, advantage="grpo",
                   reduction="token-mean", max_gen_length=8, adv_eps=1e-4)
    assert (spec.advantage, spec.objective, spec.correction, spec.reduction) == (
        "grpo", "clip", "token-mis", "token-mean")
    assert (spec.correction_cap, spec.clip_low, spec.clip_high, spec.adv_eps) == (3.0, 0.2, 0.28, 1e-4)
    assert resolve("pg", is_cap=5.0, max_gen_length=8).is_cap == 5.0


def test_ppo_is_an_alias_of_clip():
    assert resolve("pg", objective="ppo", max_gen_length=8).objective == "clip"


def test_unknown_recipe_lists_the_valid_names_sorted():
    with pytest.raises(ValueError, match="--algo") as err:
        resolve("dapo", max_gen_length=8)
    assert ", ".join(sorted(RECIPES)) in str(err.value)


@pytest.mark.parametrize("kind, table", [("advantage", ADVANTAGES), ("objective", OBJECTIVES),
                                         ("correction", CORRECTIONS), ("reduction", REDUCTIONS)])
def test_unknown_piece_names_its_flag_and_lists_the_valid_names(kind, table):
    with pytest.raises(ValueError, match=f"--{kind}") as err:
        resolve("grpo", **{kind: "nope"}, max_gen_length=8)
    names = sorted([*table, "ppo"]) if kind == "objective" else sorted(table)
    assert ", ".join(names) in str(err.value)


def test_a_correction_without_a_cap_names_the_flag():
    with pytest.raises(ValueError, match="--correction-cap"):
        resolve("grpo", correction="seq-mis", max_gen_length=8)


def test_caps_must_be_positive():
    with pytest.raises(ValueError, match="--correction-cap"):
        resolve("grpo-tis", correction_cap=-1.0, max_gen_length=8)
    with pytest.raises(ValueError, match="--is-cap"):
        resolve("pg", is_cap=0.0, max_gen_length=8)


def test_compose_puts_the_mixins_first_in_the_mro():
    cls = compose(resolve("grpo-mis", max_gen_length=8))
    mro = cls.__mro__
    assert mro[1:6] == (SeqMISMixin, ClipMixin, DrGRPOMixin, ConstantNormMixin, PolicyLoss)


def test_compose_leaves_out_the_defaults_and_keeps_the_base_overrides():
    class Base(PolicyLoss):
        def reduce(self, per_token_loss, batch):
            return per_token_loss.sum() * 0.0 + 7.0

    spec = resolve("pg", reduction="token-mean", max_gen_length=8)
    cls = compose(spec, Base)
    assert issubclass(cls, Base) and ISPGMixin in cls.__mro__
    assert NoCorrectionMixin not in cls.__mro__ and TokenMeanMixin not in cls.__mro__
    loss_fn = cls()
    loss_fn.algo = spec
    logprobs, old, sampler, adv, mask = random_batch()
    assert loss_fn.policy_loss(PolicyBatch(logprobs, old, sampler, adv, mask))[0].item() == 7.0


def test_a_hand_written_learner_equals_the_resolved_recipe():
    logprobs, old, sampler, adv, mask = random_batch()

    class L(SeqMISMixin, ClipMixin, DrGRPOMixin, PolicyLoss):
        pass

    class LConst(SeqMISMixin, ClipMixin, DrGRPOMixin, ConstantNormMixin, PolicyLoss):
        pass

    # PolicyLoss reduces by token mean, so the three-mixin class is grpo-mis with that reduction
    for cls, spec in [(L, resolve("grpo-mis", reduction="token-mean", max_gen_length=8)),
                      (LConst, resolve("grpo-mis", max_gen_length=8))]:
        mine = cls()
        mine.algo = spec
        built = build_policy_loss(spec)
        a, stats_a = mine.policy_loss(PolicyBatch(logprobs.clone().requires_grad_(), old, sampler, adv, mask))
        b, stats_b = built.policy_loss(PolicyBatch(logprobs.clone().requires_grad_(), old, sampler, adv, mask))
        assert a.item() == b.item() and stats_a == stats_b
        rewards = adv.view(2, 2)
        torch.testing.assert_close(mine.compute_advantages(rewards), built.compute_advantages(rewards), atol=0, rtol=0)


@pytest.mark.parametrize("name", sorted(PAPER_RECIPES))
def test_micro_batch_losses_and_gradients_add_up_for_every_recipe(name):
    spec = resolve(name, max_gen_length=8)
    loss_fn = build_policy_loss(spec)
    logprobs, old, sampler, adv, mask = random_batch()
    full_logp = logprobs.clone().requires_grad_()
    full, _ = loss_fn.policy_loss(PolicyBatch(full_logp, old, sampler, adv, mask))
    full.backward()
    n_tokens = float(mask.sum())
    parts_logp = logprobs.clone().requires_grad_()
    total = 0.0
    for rows in (slice(0, 1), slice(1, 4)):
        part, _ = loss_fn.policy_loss(PolicyBatch(parts_logp[rows], old[rows], sampler[rows], adv[rows], mask[rows],
                                                  num_sequences=4, num_tokens=n_tokens))
        part.backward()
        total += part.item()
    assert total == pytest.approx(full.item(), abs=1e-12)
    torch.testing.assert_close(parts_logp.grad, full_logp.grad, atol=1e-12, rtol=1e-9)
    assert full_logp.grad.abs().sum() > 0


def test_stats_are_python_floats_with_slash_keys_and_sequence_means_say_over_how_many():
    for name in PAPER_RECIPES:
        logprobs, old, sampler, adv, mask = random_batch()
        loss_fn = build_policy_loss(resolve(name, max_gen_length=8))
        _, stats = loss_fn.policy_loss(PolicyBatch(logprobs, old, sampler, adv, mask))
        assert stats and all(type(v) in (float, Mean) and k.split("/")[0] in ("loss", "mismatch") for k, v in stats.items())
        # A mean over sequences counts the batch's sequences; any other statistic is a token mean.
        assert all(v.count == mask.shape[0] for v in stats.values() if type(v) is Mean)
    _, stats = build_policy_loss(resolve("pg", max_gen_length=8)).policy_loss(PolicyBatch(*random_batch()))
    assert type(stats["loss/is_weight_mean"]) is Mean


def test_registering_a_piece_makes_it_resolvable_and_composable():
    try:
        @register("objective", "test-neg-logp")
        class NegLogpMixin:
            def objective(self, batch):
                return -batch.logprobs, {}

        spec = resolve("grpo", objective="test-neg-logp", max_gen_length=8)
        assert NegLogpMixin in compose(spec).__mro__
        with pytest.raises(ValueError, match="already registered"):
            register("objective", "test-neg-logp")(NegLogpMixin)
    finally:
        OBJECTIVES.pop("test-neg-logp", None)


@pytest.mark.parametrize("algo, constant", [
    ("grpo", dict(correction_cap=2.0)),  # the none correction: this would be plain GRPO, not GRPO-TIS
    ("grpo", dict(is_cap=3.0)),
    ("pg", dict(clip_high=0.28)),
    ("grpo-tis", dict(icepop_low=0.1)),
    ("grpo-icepop", dict(divergence_threshold=0.05)),
    ("pg", dict(adv_eps=0.0)),
])
def test_a_constant_that_no_chosen_piece_reads_is_refused_naming_the_pieces_that_do(algo, constant):
    (name, value), = constant.items()
    readers = [n for table in (ADVANTAGES, OBJECTIVES, CORRECTIONS) for n, cls in table.items() if name in cls.reads]
    with pytest.raises(UserError) as e:
        resolve(algo, max_gen_length=8, **constant)
    message = str(e.value)
    assert message.startswith(f"--{name.replace('_', '-')} {value:g}: none of this run's pieces") and readers
    assert all(n in message for n in readers), message
    # The same constant with a piece that reads it is taken.
    kind = next(k for k, table in (("advantage", ADVANTAGES), ("objective", OBJECTIVES), ("correction", CORRECTIONS))
                if readers[0] in table)
    cap = {"correction_cap": 2.0} if getattr(lookup(kind, readers[0]), "needs_cap", False) else {}
    spec = resolve(algo, max_gen_length=8, **{kind: readers[0], **cap, **constant})
    assert getattr(spec, name) == value


def test_a_piece_that_does_not_say_what_it_reads_may_read_any_constant():
    try:
        @register("correction", "test-own-cap")
        class OwnCapMixin:
            def correction(self, batch):
                return batch.mask.new_ones(batch.mask.shape), {}

        assert resolve("grpo", correction="test-own-cap", correction_cap=2.0, max_gen_length=8).correction_cap == 2.0
    finally:
        CORRECTIONS.pop("test-own-cap", None)


def test_every_built_in_piece_says_what_it_reads_and_names_real_constants():
    constants = {f.name for f in dataclasses.fields(AlgorithmSpec)}
    for table in (ADVANTAGES, OBJECTIVES, CORRECTIONS, REDUCTIONS):
        for name, cls in table.items():
            assert cls.reads is not None and set(cls.reads) <= constants, (name, cls.reads)


def test_every_mixin_is_exported_by_name():
    for table in (ADVANTAGES, OBJECTIVES, CORRECTIONS, REDUCTIONS):
        for cls in table.values():
            assert getattr(algorithms, cls.__name__) is cls


def test_the_algorithms_package_imports_only_torch_and_the_standard_library():
    # ... and the project's exception type, a module with no imports of its own.
    root = pathlib.Path(algorithms.__file__).parent
    allowed = set(sys.stdlib_module_names) | {"torch", "precision_oat.errors"}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                tops = [node.module if node.module == "precision_oat.errors" else node.module.split(".")[0]]
            else:
                continue
            assert set(tops) <= allowed, f"{path.relative_to(root)} imports {tops}"


def test_recipe_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        RECIPES["pg"].objective = "clip"


@pytest.mark.parametrize("objective", ["pg", "token-is"])
@pytest.mark.parametrize("correction", ["token-tis", "token-mis", "seq-tis", "seq-mis", "icepop"])
def test_an_objective_weighted_by_the_sampler_refuses_a_correction_that_weighs_by_it_again(objective, correction):
    # pg's weight is exp Σ(log π_θ − log μ); a TIS/MIS/IcePop weight π_old/μ on top of it squares the sampler's
    # weight on the first update (π_θ = π_old): a response with ρ = 0.5 would get e^1, not e^0.5.
    with pytest.raises(ValueError, match=rf"--objective {objective} with --correction {correction}"):
        resolve("pg", objective=objective, correction=correction, correction_cap=10.0, max_gen_length=8)


@pytest.mark.parametrize("correction", ["none", "geo-mask", "divergence-mask"])
def test_an_objective_weighted_by_the_sampler_takes_a_pure_mask(correction):
    assert resolve("pg", correction=correction, max_gen_length=8).correction == correction
