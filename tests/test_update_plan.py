"""The update plan: micro-batches packed under a token budget."""

import torch

from precision_oat.rl.update_plan import update_plan

# Tokens of each sequence (prompt + response): long and short rows mixed.
LENGTHS = torch.tensor([100, 7, 30, 64, 12, 250, 9, 40, 33, 5, 80, 16])


def plan(micro_batch_size=64, budget=128, train_batch_size=6, epochs=2):
    return update_plan(len(LENGTHS), train_batch_size, micro_batch_size, epochs, torch.Generator().manual_seed(0),
                       lengths=LENGTHS, micro_batch_tokens=budget)


def test_every_micro_batch_pads_to_at_most_the_token_budget_unless_one_row_exceeds_it():
    for mini in plan():
        for micro in mini.micro_batches:
            padded = len(micro) * int(LENGTHS[micro].max())
            assert padded <= 128 or (len(micro) == 1 and LENGTHS[micro[0]] > 128), (micro, padded)


def test_token_budget_packs_each_mini_batch_exactly_once_longest_first():
    for mini in plan():
        rows = torch.cat(mini.micro_batches)
        assert sorted(rows.tolist()) == sorted(mini.index.tolist())
        assert LENGTHS[rows].tolist() == sorted(LENGTHS[mini.index].tolist(), reverse=True)


def test_short_rows_share_a_micro_batch_and_micro_batch_size_still_caps_the_rows():
    # One mini-batch of everything: 12 rows; a budget of 60 puts 5, 7, 9, 12 (×4 ≤ 60) and 16 … together.
    [mini] = plan(budget=60, train_batch_size=None, epochs=1)
    sizes = [len(m) for m in mini.micro_batches]
    assert max(sizes) >= 3 and len(sizes) < len(LENGTHS)
    [mini] = plan(micro_batch_size=2, budget=60, train_batch_size=None, epochs=1)
    assert max(len(m) for m in mini.micro_batches) == 2


def test_without_a_budget_micro_batches_are_consecutive_slices_of_micro_batch_size():
    for mini in plan(micro_batch_size=4, budget=None):
        assert [len(m) for m in mini.micro_batches] == [4, 2]
        assert torch.equal(torch.cat(mini.micro_batches), mini.index)


def test_every_rank_runs_as_many_passes_as_the_rank_with_the_most():
    from precision_oat.distributed.world import World

    def ranks_plan(budget):
        return [update_plan(len(LENGTHS), 6, 64, 2, torch.Generator().manual_seed(0), World(rank, 2), LENGTHS, budget)
                for rank in range(2)]

    for budget in (None, 128, 60):
        plans = ranks_plan(budget)
        for minis in zip(*plans):
            # Each rank packs its own half of the mini-batch, and both halves together are the mini-batch …
            assert sorted(torch.cat([m for mini in minis for m in mini.micro_batches]).tolist()) == \
                sorted(minis[0].index.tolist())
            # … and pads its passes to the other rank's number.
            assert len({len(mini.micro_batches) + mini.padding for mini in minis}) == 1
            assert min(mini.padding for mini in minis) == 0
    # Packing long and short rows apart gives the ranks different numbers of passes: the padding is needed.
    assert any(mini.padding for plan_ in ranks_plan(60) for mini in plan_)
