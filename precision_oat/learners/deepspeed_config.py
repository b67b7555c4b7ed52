"""DeepSpeed engines configured by the precision policy (imported only where DeepSpeed is used).

DeepSpeed needs ``torch.distributed``; a single process gets a one-rank group here (gloo on
CPU, nccl on CUDA) unless a launcher (``torchrun``, ``deepspeed``) already set one up. The
fp16 / bf16 sections of the config come from :meth:`Precision.deepspeed_config`: DeepSpeed's
own dynamic loss scaler, fp32 master weights inside its optimiser.
"""

from __future__ import annotations

import os
import socket
from typing import Iterator, Optional

import torch

from precision_oat.errors import UserError
from precision_oat.precision.policy import Precision

INSTALL_HINT = ('DeepSpeed is not installed: pip install -e ".[deepspeed]" (on CPU set DS_BUILD_OPS=0 and pass '
                "--no-build-isolation after installing torch)")


def import_deepspeed():
    try:
        import deepspeed
    except ImportError as e:
        raise UserError(f"--learner deepspeed: {INSTALL_HINT}") from e
    return deepspeed


def ensure_process_group(device: torch.device) -> None:
    """A one-rank process group for this process, unless one exists."""
    import torch.distributed as dist

    # DeepSpeed reads these even when a group exists (an in-process vLLM engine makes one).
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    if dist.is_initialized():
        return
    import_deepspeed().init_distributed(dist_backend="nccl" if device.type == "cuda" else "gloo", verbose=False)


def deepspeed_refuses(dtype: str, device: torch.device) -> bool:
    """True when DeepSpeed cannot compute in ``dtype`` on ``device``: it refuses fp16 off CUDA."""
    return dtype == "fp16" and device.type != "cuda"


def engine_config(precision: Precision, device: torch.device, micro_batch_size: int, zero_stage: int,
                  max_grad_norm: Optional[float], optimizer: Optional[dict] = None) -> dict:
    """A DeepSpeed config: the precision sections, ZeRO, clipping and (optionally) the optimiser."""
    if deepspeed_refuses(precision.trainer, device):
        raise UserError("--dtype fp16 with DeepSpeed needs a CUDA device (DeepSpeed refuses fp16 on CPU); "
                        "use --learner builtin, or --dtype bf16/fp32")
    if zero_stage not in (0, 1, 2, 3):
        raise UserError(f"--zero-stage {zero_stage}: must be 0, 1, 2 or 3")
    config = {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        # Accumulation is ours: the boundary is set by hand on the last micro-batch of a step.
        "gradient_accumulation_steps": 1,
        "gradient_clipping": max_grad_norm or 0.0,
        "zero_optimization": {"stage": zero_stage},
        "steps_per_print": 2**62,
        "wall_clock_breakdown": False,
        **precision.deepspeed_config("--learner deepspeed"),
    }
    if optimizer is not None:
        config["optimizer"] = optimizer
        config["zero_allow_untested_optimizer"] = True
    return config


def local_fp32_masters(engine) -> list[torch.Tensor]:
    """The fp32 master weights this process's optimiser steps: its partition under ZeRO 1–3, all of
    them under ZeRO-0."""
    from deepspeed.runtime.bf16_optimizer import BF16_Optimizer
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    optimizer = engine.optimizer
    if isinstance(optimizer, DeepSpeedZeroOptimizer_Stage3):
        return list(optimizer.fp32_partitioned_groups_flat)
    if isinstance(optimizer, DeepSpeedZeroOptimizer):
        return list(optimizer.single_partition_of_fp32_groups)
    if isinstance(optimizer, BF16_Optimizer):
        return list(optimizer.fp32_groups_flat_partition)
    return list(_unpartitioned_masters(optimizer).values())


def fp32_masters(engine, named_params) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, the whole fp32 master) of each parameter, one at a time, gathered over the ranks where
    ZeRO partitions it (so every rank must read it to the end).

    With one data-parallel rank a ZeRO-1/2 master is read in place, a view of the optimiser's
    partition: gathering copies it and runs a collective per parameter (~60 ms a sync for SmolLM2
    on CPU). The consumer must copy what it keeps, as every sampler's load does.
    """
    from deepspeed.utils import safe_get_full_fp32_param

    unpartitioned = None
    alone = engine.dp_world_size == 1
    for name, param in named_params:
        # ZeRO 1–3 and the BF16 optimiser map each parameter to its master; ZeRO-0's fp16/bf16 wrappers do not.
        master = _master_in_place(param) if alone else None
        if master is None:
            master = safe_get_full_fp32_param(param)
        if master is None:
            unpartitioned = unpartitioned if unpartitioned is not None else _unpartitioned_masters(engine.optimizer)
            master = unpartitioned[id(param)]
        yield name, master.detach().float()


def _master_in_place(param) -> Optional[torch.Tensor]:
    """The fp32 master of a ZeRO-1/2 (or BF16-optimiser) parameter that this rank holds whole, as a view; else None."""
    mapping = getattr(param, "_hp_mapping", None)
    if mapping is None:
        return None
    fragment = mapping.get_hp_fragment()
    return fragment.view(param.shape) if fragment.numel() == param.numel() else None


def _unpartitioned_masters(optimizer) -> dict[int, torch.Tensor]:
    """ZeRO-0: id of each trainable parameter → its fp32 master."""
    from deepspeed.runtime.fp16.fused_optimizer import FP16_Optimizer
    from deepspeed.runtime.fp16.unfused_optimizer import FP16_UnfusedOptimizer
    from torch._utils import _unflatten_dense_tensors

    if isinstance(optimizer, FP16_UnfusedOptimizer):
        # torch optimisers under fp16/bf16: one fp32 copy per parameter.
        groups = zip(optimizer.fp16_groups, optimizer.fp32_groups)
    elif isinstance(optimizer, FP16_Optimizer):
        # Fused optimisers under fp16/bf16: one flat fp32 copy per group.
        groups = ((params, _unflatten_dense_tensors(flat, params))
                  for params, flat in zip(optimizer.fp16_groups, optimizer.fp32_groups_flat))
    elif isinstance(optimizer, torch.optim.Optimizer):
        # fp32 without ZeRO: the optimiser steps the parameters themselves.
        groups = ((group["params"], group["params"]) for group in optimizer.param_groups)
    else:
        raise TypeError(f"no fp32 master weights known in a DeepSpeed {type(optimizer).__name__}")
    masters = {id(p): m for params, copies in groups for p, m in zip(params, copies)}
    if any(m.dtype != torch.float32 for m in masters.values()):
        raise TypeError(f"a DeepSpeed {type(optimizer).__name__} steps weights that are not fp32")
    return masters


def inference_engine(model: torch.nn.Module, precision: Precision, device: torch.device, micro_batch_size: int):
    """``model`` in a DeepSpeed engine (trainer dtype, ZeRO 0), for scoring only."""
    from precision_oat.precision.lm_head import use_fp32_head

    deepspeed = import_deepspeed()
    if precision.fp32_head:
        use_fp32_head(model)
    ensure_process_group(device)
    config = engine_config(precision, device, micro_batch_size, 0, None)
    engine, *_ = deepspeed.initialize(model=model.to(device), config=config)
    engine.eval()
    return engine
