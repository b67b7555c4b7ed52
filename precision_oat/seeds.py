"""Every random stream of a run, derived from the one ``--seed``.

A stream is named (what it drives) and indexed (the step, epoch or evaluation it belongs
to), so resuming at step k reproduces exactly the draws an uninterrupted run makes there,
and no two streams share a seed by accident of arithmetic.
"""

from __future__ import annotations

import hashlib

# What each stream drives.
ROLLOUT = "rollout"  # the sampler's draws for the rollouts of a step
SHUFFLE = "shuffle"  # the learner's order of responses into mini-batches at a step
PROMPT_ORDER = "prompt-order"  # the shuffle of the prompt set in an epoch over the prompts
EVALUATION = "evaluation"  # the sampler's draws for an evaluation after a step
ROW = "row"  # one response's draws within a batch sampled with a ROLLOUT or EVALUATION seed


def derive_seed(seed: int, stream: str, index: int) -> int:
    """A 63-bit seed for draw ``index`` of ``stream`` in the run seeded with ``seed``.

    63 bits (a signed 64-bit integer, what torch generators and vLLM requests take), so that the
    many row streams of a run do not meet by chance: among 55,000 draws of 31 bits, two are
    equal with even odds.
    """
    digest = hashlib.blake2b(f"{seed}/{stream}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 2**63


def row_seed(batch_seed: int, row: int) -> int:
    """The seed of row ``row`` (its place in the whole batch) of a batch sampled with ``batch_seed``.

    Derived, not ``batch_seed + row``: with addition, row r of one step would draw the stream of
    row r − k of a step whose seed is k larger.
    """
    return derive_seed(batch_seed, ROW, row)
