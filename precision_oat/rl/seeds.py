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


def derive_seed(seed: int, stream: str, index: int) -> int:
    """A 31-bit seed for draw ``index`` of ``stream`` in the run seeded with ``seed``."""
    digest = hashlib.blake2b(f"{seed}/{stream}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 2**31
