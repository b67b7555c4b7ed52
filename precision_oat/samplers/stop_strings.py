"""Responses that end at a stop string (the ``r1`` template's ``</answer>``), on any sampler.

A sampler stops on tokens only; a response is cut after the first token whose text completes a stop
string, and counts as finished. Sampling on and cutting after gives the kept tokens, and their log μ,
exactly the distribution that stopping there would have: each token is drawn given those before it.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from precision_oat.samplers.sampler import Completion


def cut_at_stop_strings(completion: Completion, tokenizer, stops: Sequence[str]) -> Completion:
    """``completion`` up to and including the token that completes the first of ``stops`` in its text (itself when
    none occurs)."""
    ids = completion.response_ids

    def reached(n: int) -> bool:
        text = tokenizer.decode(ids[:n], skip_special_tokens=True)
        return any(stop in text for stop in stops)

    if not stops or not reached(len(ids)):
        return completion
    # The shortest prefix whose text holds a stop string: texts of longer prefixes hold it too.
    low, high = 1, len(ids)
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if reached(middle) else (middle + 1, high)
    kept = completion.kept_ids[:low] if completion.kept_ids is not None else None
    return dataclasses.replace(completion, response_ids=ids[:low], logprobs=completion.logprobs[:low], finished=True,
                               kept_ids=kept)
