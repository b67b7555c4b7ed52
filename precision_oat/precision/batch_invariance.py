"""``--batch-invariant``: vLLM's batch-invariant kernels for the sampler and, in the same process, the trainer.

With ``VLLM_BATCH_INVARIANT=1`` vLLM replaces torch's matmul, softmax, log-softmax and mean kernels
process-wide (``vllm.model_executor.layers.batch_invariant``) with ones whose reduction order does not
depend on how many rows are in the batch; on Hopper the matmuls stay cuBLAS's with split-k turned off
through its workspace settings, elsewhere they are Triton kernels. vLLM's own RMSNorm and linear
layers switch to batch-invariant kernels too, and its attention to batch-invariant settings. Since our engine lives in the learner's process, the
trainer's forward and backward run on the same matmul and softmax kernels: :func:`enable_batch_invariance`
installs them at start-up, before the learner's first CUDA work, because cuBLAS reads its workspace
settings when its first handle is made.

What the two sides still do not share (why |Δlogp| need not reach 0): attention (vLLM's paged kernels,
decoding one token at a time, against torch's SDPA over the whole sequence), RMSNorm and the
activation (vLLM's Triton and fused kernels against HF's torch ops, whose mean is vLLM's), rotary embeddings (vLLM's cached cos/sin
kernel against HF's), and the fused projections (vLLM multiplies by one q/k/v and one gate/up matrix
where HF runs three and two: other shapes, another reduction). Exact equality would take the trainer
running vLLM's own layers, with a backward for each.
"""

from __future__ import annotations

import os

from precision_oat.errors import UserError


def enable_batch_invariance() -> None:
    """Set vLLM's batch-invariant mode for this process and install its kernels now (CUDA only)."""
    import torch

    if not torch.cuda.is_available():
        raise UserError("--batch-invariant: vLLM's batch-invariant kernels run on CUDA only; drop --batch-invariant "
                        "here, or run on a CUDA GPU")
    os.environ["VLLM_BATCH_INVARIANT"] = "1"
    try:
        from vllm.model_executor.layers.batch_invariant import init_batch_invariance
    except ImportError as e:
        raise UserError(f"--batch-invariant needs vLLM's batch-invariant kernels ({e}); pip install "
                        "-e \".[vllm]\" from the clone") from None
    init_batch_invariance()
