"""``--export-tokens N``: a step's response tokens as one parquet file, for analysis outside the run.

One row per response token of the step, in response order then position:

    response        the response's index in the step (responses r·G … r·G + G − 1 answer prompt r)
    position        the token's index within its response (0 = first response token)
    token_id        the sampled token
    logp_sampler    log μ, as the sampler returned it
    logp_old        log π_old, the trainer's score before the update
    delta           Δ = log π_old − log μ (the token the mismatch metrics average)
    advantage       the response's advantage, computed by the learner's own compute_advantages
    reward          the response's reward

log π_θ after the update is not exported: it would take one more forward pass over the rollout.
Only response tokens are rows, so the response mask is 1 on every row.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from precision_oat.rl.rollout import Rollout

TOKENS_FOLDER = "tokens"
# A step's file, or the temporary one it is written to.
TOKEN_FILE = re.compile(r"^step_(\d+)\.parquet(?:\.tmp)?$")


def token_file(out: Path, step: int) -> Path:
    """Where step ``step``'s tokens go (the step six digits long, like a checkpoint's folder)."""
    return out / TOKENS_FOLDER / f"step_{step:06d}.parquet"


def drop_tokens_after(out: Path, step: int) -> None:
    """Delete the token files of the steps after ``step``."""
    for path in (out / TOKENS_FOLDER).glob("step_*"):
        match = TOKEN_FILE.match(path.name)
        if match and int(match.group(1)) > step:
            path.unlink()


def export_tokens(path: Path, rollout: Rollout, old_logprobs: torch.Tensor, advantages: torch.Tensor) -> Path:
    """Write ``rollout``'s response tokens with their μ, π_old and advantage to ``path`` (atomically)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    mask = rollout.response_mask.cpu() > 0
    rows, columns = mask.nonzero(as_tuple=True)
    # Column t holds the token at position t + 1 of the sequence (the one it predicts).
    token_ids = rollout.input_ids.cpu()[rows, columns + 1]
    position = (mask.cumsum(-1) - 1)[rows, columns]
    log_mu = rollout.sampler_logprobs.cpu()[rows, columns]
    log_old = old_logprobs.detach().cpu().float()[rows, columns]
    table = pa.table({
        "response": rows.numpy().astype("int32"),
        "position": position.numpy().astype("int32"),
        "token_id": token_ids.numpy().astype("int64"),
        "logp_sampler": log_mu.numpy(),
        "logp_old": log_old.numpy(),
        "delta": (log_old - log_mu).numpy(),
        "advantage": advantages.detach().cpu().float()[rows].numpy(),
        "reward": rollout.rewards.cpu().float()[rows].numpy(),
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path
