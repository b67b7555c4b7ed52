"""No pass of a run holds the logits of whole sequences: the fp16 preflight, the rollout's scoring and
update (with the self-gap's forward), the evaluation and the end-of-run probe each project a chunk of
positions at a time (``--logprob-chunk-size``), and the samplers one position per row."""

from __future__ import annotations

import json

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from precision_oat.backends.local.driver import train
from tests.backends.helpers import make_args

CHUNK = 4
# The probe's sampler decodes its prompts × 4 samples at once, one position each: the widest decode of the run.
DECODE_ROWS = 32 * 4


class VocabularyWide(TorchDispatchMode):
    """The shapes of every tensor whose last dimension is the vocabulary (the output projection's weight and
    its gradient aside)."""

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.vocab, self.weight_shape = vocab, sorted((vocab, hidden))
        self.shapes: set[tuple[int, ...]] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] == self.vocab and sorted(t.shape) != self.weight_shape:
                self.shapes.add(tuple(t.shape))
        return out


def test_no_pass_of_a_run_holds_the_logits_of_more_than_a_chunk_of_positions(tmp_path, byte_model_dir):
    # fp16 on both sides runs the preflight; the run evaluates, measures the self-gap and probes at its end.
    args = make_args(model=str(byte_model_dir), dtype="fp16", steps=1, prompts_per_step=2, num_samples=2,
                     max_new_tokens=24, logprob_chunk_size=CHUNK, micro_batch_size=4, eval_every=1, eval_limit=2,
                     probe_dtypes=["bf16"], output_dir=str(tmp_path))
    with VocabularyWide(vocab=258, hidden=32) as seen:
        summary = train(args)
    assert (tmp_path / "preflight.json").exists() and summary["probe"]["dtypes"]["bf16"]["response_tokens"] > 0
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert "precision/self_gap_abs_mean" in row and any(k.startswith("eval/") for k in row)
    positions = [t[:-1] for t in seen.shapes]
    assert positions, "the recorder saw no logits"
    # Rows of one position each (a sampler's next token), or a chunk of scored positions: never [rows, length].
    assert all(len(p) == 1 or (len(p) == 2 and p[1] == 1) for p in positions), sorted(positions)
    assert max(p[0] for p in positions) <= max(CHUNK, DECODE_ROWS)
    assert any(p == (CHUNK,) for p in positions), "the chunked scoring did not run"
