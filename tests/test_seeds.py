"""Every row of every step draws from a stream of its own, in one run and across neighbouring seeds."""

from precision_oat.args import RolloutArgs
from precision_oat.rl.actor import PrecisionActor
from precision_oat.seeds import row_seed
from tests.conftest import byte_tokenizer

STEPS, ROWS = 300, 64


def row_seeds_of_run(seed: int) -> list[int]:
    """The seed of every (step, row) stream a run seeded ``seed`` samples its rollouts from."""
    actor = PrecisionActor(None, None, byte_tokenizer(), RolloutArgs(), seed)
    return [row_seed(actor.params(step).seed, row) for step in range(STEPS) for row in range(ROWS)]


def test_no_two_steps_and_rows_of_a_run_share_a_stream():
    seeds = row_seeds_of_run(0)
    assert len(set(seeds)) == STEPS * ROWS


def test_runs_seeded_s_and_s_plus_1_share_no_stream():
    assert not set(row_seeds_of_run(7)) & set(row_seeds_of_run(8))


def test_row_seeds_fit_a_signed_64_bit_integer():
    assert all(0 <= s < 2**63 for s in row_seeds_of_run(0))
