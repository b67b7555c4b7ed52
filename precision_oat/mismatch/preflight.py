"""The fp16 preflight: will this policy fit in fp16? One forward and one backward tell.

fp16 tops out at 65504. Before an fp16 run, :func:`run_preflight` runs the policy once on
real prompts, each followed by a response the policy samples (activations at response
positions, far from the prompt, are what training computes most of), in fp32 on a copy of
the weights (so every number is a real magnitude, not an inf that already overflowed), and
reports:

1. the largest |activation| of every module output and of the logits, and the headroom
   65504 / max|x| of each: below 1 the value overflows to inf in fp16, below a few it is
   one unlucky prompt away from doing so;
2. whether the same forward computed in fp16 produces inf or nan, and in which module first;
3. the share of gradient values (of one backward of the mean next-token negative
   log-likelihood of the prompts and responses) that, multiplied by the initial loss scale, round to zero
   in fp16 (magnitude at most 2**-25, half the smallest subnormal 2**-24) or fall below the
   smallest normal 2**-14 (and so keep fewer than 10 mantissa bits).

:func:`check` turns the report into a verdict: it raises
:class:`~precision_oat.precision.policy.PrecisionError` when some headroom is below the margin or
the fp16 forward is not finite. ``python -m precision_oat.mismatch.preflight`` runs all of
it on a model and prompts given as the mismatch lab takes them, prints the table and
writes ``OUTPUT_DIR/preflight.json`` (keys in docs/metrics.md, "fp16 preflight").
:func:`before_fp16_run` is the same check run by the local backend before an fp16 run.

Departures from a real fp16 step, on purpose: the gradients are fp32 gradients scaled and
rounded once, whereas an fp16 backward also rounds every intermediate gradient; positions
that are padding are left out of every maximum.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Optional

import torch

from precision_oat.errors import UserError
from precision_oat.mismatch.prompts import PromptSource, check_prompt_source, load_prompts
from precision_oat.precision.policy import LossScaling, Precision, PrecisionError
from precision_oat.samplers.sampler import SamplingParams, stop_token_ids

if TYPE_CHECKING:
    from precision_oat.args import PrecisionArgs

FP16_MAX = 65504.0
FP16_SMALLEST_NORMAL = 2.0**-14
# The flag of the training command that skips the preflight; named in check()'s message.
OVERRIDE_FLAG = "--skip-fp16-preflight"
DEFAULT_MARGIN = 8.0
# The automatic check runs on at most this many of the run's first prompts, this many per forward.
RUN_PROMPTS = 32
RUN_MICRO_BATCH = 8
LOGITS = "logits"
# Rows of the printed table: modules with the smallest headroom, and parameters with the most underflow.
TABLE_MODULES = 10
WORST_PARAMETERS = 5


def run_preflight(model, prompt_ids: list[list[int]], *, initial_loss_scale: float, device,
                  micro_batch_size: int = 8, responses: Optional[SamplingParams] = None) -> dict:
    """Activation headroom, fp16 forward finiteness and gradient underflow of ``model`` on ``prompt_ids``.

    ``model`` is an HF causal LM in any dtype on any device; it is left untouched (the work
    happens on a copy in fp32 on ``device``, cast to fp16 for the second forward, then freed).
    With ``responses``, each prompt is followed by one response sampled with those settings,
    and the prompt and response positions are measured together; without, the prompts alone.
    """
    _validate(model, prompt_ids, initial_loss_scale, micro_batch_size)
    device = torch.device(device)
    sequences = prompt_ids if responses is None else with_responses(model, prompt_ids, responses, device)
    work = copy.deepcopy(model).to(device=device, dtype=torch.float32).eval()
    try:
        for p in work.parameters():
            p.grad = None
            p.requires_grad_(True)
        batches = list(_micro_batches(sequences, micro_batch_size, _pad_id(work), device))
        activations, nll = _fp32_forward_backward(work, batches)
        gradients = _gradient_report(work, initial_loss_scale)
        gradients["loss"] = nll
        work.zero_grad(set_to_none=True)
        work.to(torch.float16)
        fp16_forward = _fp16_forward(work, batches)
    finally:
        del work
        if device.type == "cuda":
            gc.collect()
            torch.cuda.empty_cache()

    logits = activations.pop(LOGITS)
    modules = sorted(activations.values(), key=_headroom_key)
    worst = min([*modules, logits], key=_headroom_key)
    return {
        "fp16_max": FP16_MAX,
        "prompts": len(prompt_ids),
        "tokens": sum(len(ids) for ids in sequences),
        "response_tokens": sum(len(ids) for ids in sequences) - sum(len(ids) for ids in prompt_ids),
        "device": str(device),
        "min_headroom": {"name": worst["name"], "max_abs": worst["max_abs"], "headroom": worst["headroom"]},
        "logits": logits,
        "modules": modules,
        "fp16_forward": fp16_forward,
        "gradients": gradients,
    }


def with_responses(model, prompt_ids: list[list[int]], params: SamplingParams, device) -> list[list[int]]:
    """Each prompt followed by one response that ``model`` samples in fp32 with ``params``."""
    from precision_oat.samplers.kv_cache import KVCacheSampler

    sampler = KVCacheSampler(model, torch.float32, device, _pad_id(model))
    try:
        completions = sampler.generate(prompt_ids, dataclasses.replace(params, n=1))
    finally:
        del sampler
    return [c.prompt_ids + c.response_ids for c in completions]


def check(report: dict, margin: float = DEFAULT_MARGIN, margin_flag: str = "--margin") -> None:
    """Raise :class:`PrecisionError` when fp16 has less than ``margin``x headroom, or its forward is not finite."""
    if not margin > 0:
        raise UserError(f"{margin_flag} {margin}: must be a positive factor, e.g. {DEFAULT_MARGIN:g}")
    fixes = f"use --dtype bf16, or pass {OVERRIDE_FLAG} to train in fp16 anyway"
    worst = report["min_headroom"]
    headroom = worst["headroom"]
    if headroom is not None and headroom < margin:
        rows = sorted([*report["modules"], report["logits"]], key=lambda r: r.get("order", math.inf))
        first = next(r for r in rows if r["headroom"] is not None and r["headroom"] < margin)
        origin = "" if first["name"] == worst["name"] else f"; the first module past the margin is {first['name']}"
        raise PrecisionError(
            f"fp16 preflight: {worst['name']} reaches max |activation| {_fmt_abs(worst['max_abs'])}: headroom "
            f"{FP16_MAX:.0f}/max|x| = {headroom:.3g}x is below the {margin:g}x margin ({margin_flag}){origin}; {fixes}"
        )
    forward = report["fp16_forward"]
    if not forward["finite"]:
        raise PrecisionError(
            f"fp16 preflight: the forward in fp16 produces inf/nan, first in {forward['first_nonfinite']}, "
            f"although every fp32 activation has at least {_fmt_headroom(headroom)} headroom; {fixes}"
        )


def before_fp16_run(model, prompt_ids: list[list[int]], precision: Precision, flags: "PrecisionArgs", folder: Path,
                    device, log=print, responses: Optional[SamplingParams] = None) -> Optional[dict]:
    """The automatic preflight of a training run that computes in fp16 on either side.

    Runs on ``prompt_ids`` (the run's first prompts, at most :data:`RUN_PROMPTS`), each followed
    by a response sampled with ``responses`` (the run's sampling settings), writes
    ``folder/preflight.json`` and ``folder/preflight.txt`` (the table), prints a one-line
    verdict, and raises :class:`PrecisionError` (one line) when :func:`check` fails at
    ``--fp16-preflight-margin``. Returns the report; None when nothing runs in fp16 or
    ``--skip-fp16-preflight`` is given.
    """
    if not precision.uses_fp16:
        return None
    if flags.skip_fp16_preflight:
        log(f"fp16 preflight: skipped ({OVERRIDE_FLAG})")
        return None
    scale = precision.loss_scaling.initial_scale if precision.loss_scaling.enabled else 1.0
    report = run_preflight(model, prompt_ids[:RUN_PROMPTS], initial_loss_scale=scale, device=device,
                           micro_batch_size=RUN_MICRO_BATCH, responses=responses)
    folder = Path(folder)
    (folder / "preflight.json").write_text(json.dumps(report, indent=2, allow_nan=False))
    (folder / "preflight.txt").write_text(format_report(report) + "\n")
    try:
        check(report, flags.fp16_preflight_margin, margin_flag="--fp16-preflight-margin")
    except PrecisionError as e:
        raise PrecisionError(f"{e} (table: {folder / 'preflight.txt'})") from None
    worst, g = report["min_headroom"], report["gradients"]
    log(f"fp16 preflight: ok · least headroom {_fmt_headroom(worst['headroom'])} ({worst['name']}) ≥ "
        f"{flags.fp16_preflight_margin:g}x margin · fp16 forward finite · "
        f"{100 * g['flush_to_zero_share']:.2f}% of gradients round to zero at loss scale {scale:g} · "
        f"{folder / 'preflight.txt'}")
    return report


def format_report(report: dict) -> str:
    """A short table: the modules with the least headroom, the logits, the fp16 forward, the gradients."""
    lines = [f"fp16 preflight · {report['prompts']} prompts, {report['tokens']} tokens "
             f"({report['response_tokens']} of them in responses) · "
             f"device {report['device']} · headroom = {FP16_MAX:.0f} / max|activation|"]
    rows = [report["logits"], *report["modules"][:TABLE_MODULES]]
    width = max(len(r["name"]) for r in rows)
    lines.append(f"  {'module':<{width}}  {'type':<20}  {'max|x|':>9}  {'headroom':>9}")
    for r in rows:
        lines.append(f"  {r['name']:<{width}}  {r['type']:<20}  {_fmt_abs(r['max_abs']):>9}  "
                     f"{_fmt_headroom(r['headroom']):>9}")
    hidden = len(report["modules"]) - TABLE_MODULES
    if hidden > 0:
        lines.append(f"  … {hidden} more modules with more headroom (preflight.json lists all)")
    forward = report["fp16_forward"]
    logits = "finite" if forward["logits_finite"] else "not finite"
    lines.append("fp16 forward: finite" if forward["finite"] else
                 f"fp16 forward: inf/nan in {len(forward['nonfinite_modules'])} module outputs, "
                 f"first in {forward['first_nonfinite']}; logits {logits}")
    g = report["gradients"]
    lines.append(f"gradients at loss scale {g['loss_scale']:g}: of {g['nonzero']:,} nonzero values, "
                 f"{100 * g['flush_to_zero_share']:.2f}% round to zero in fp16, "
                 f"{100 * g['below_normal_share']:.2f}% fall below its smallest normal, "
                 f"{100 * g['overflow_share']:.2f}% overflow")
    if g["overflow"]:
        lines.append(overflow_note(g))
    for p in g["worst_parameters"]:
        if p["flush_to_zero_share"] > 0 or p["below_normal_share"] > 0:
            lines.append(f"  {p['name']}: {100 * p['flush_to_zero_share']:.2f}% to zero, "
                         f"{100 * p['below_normal_share']:.2f}% below normal")
    return "\n".join(lines)


def overflow_note(gradients: dict) -> str:
    """What an overflowing gradient value means for the run: a warning, not a refusal."""
    return (f"  {gradients['overflow']:,} gradient values overflow at loss scale {gradients['loss_scale']:g}: a step "
            "with this gradient would be skipped and the scale lowered until it fits (dynamic loss scaling); "
            "the RL loss is not this next-token loss, so the run itself may skip none (train/skipped_steps says)")


def fp16_gradient_counts(grad: torch.Tensor, loss_scale: float) -> dict[str, int]:
    """Of the nonzero values of ``grad`` × ``loss_scale``: how many round to zero in fp16, fall below
    its smallest normal, or overflow to inf."""
    scaled = grad.detach().float() * loss_scale
    nonzero = grad != 0
    as_fp16 = scaled.to(torch.float16)
    return {
        "numel": grad.numel(),
        "nonzero": int(nonzero.sum()),
        "flush_to_zero": int((nonzero & (as_fp16 == 0)).sum()),
        "below_normal": int((nonzero & (scaled.abs() < FP16_SMALLEST_NORMAL)).sum()),
        "overflow": int((torch.isfinite(scaled) & torch.isinf(as_fp16)).sum()),
    }


# --- the passes ---


@dataclass
class _Batch:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor

    @property
    def real(self) -> torch.Tensor:
        return self.attention_mask.bool()

    def forward(self, model) -> torch.Tensor:
        return model(input_ids=self.input_ids, attention_mask=self.attention_mask, use_cache=False).logits


def _fp32_forward_backward(model, batches: list[_Batch]) -> tuple[dict[str, dict], float]:
    """Per-module max |output| over real positions, and the gradients of the mean next-token NLL."""
    maxima: dict[str, torch.Tensor] = {}
    order: dict[str, int] = {}
    types = {name: type(m).__name__ for name, m in model.named_modules()}
    current: list[_Batch] = []

    def record(name: str, output) -> None:
        x = _first_tensor(output)
        if x is None:
            return
        m = _max_abs(x, current[0])
        order.setdefault(name, len(order))
        maxima[name] = torch.maximum(maxima[name], m) if name in maxima else m

    handles = _hook_every_module(model, record)
    targets = sum(int(b.attention_mask[:, 1:].sum()) for b in batches)
    total_nll = 0.0
    try:
        for batch in batches:
            current[:] = [batch]
            logits = batch.forward(model)
            record(LOGITS, logits)
            nll = _next_token_nll_sum(logits, batch)
            (nll / targets).backward()
            total_nll += float(nll.detach())
    finally:
        for h in handles:
            h.remove()
    rows = {}
    for name, m in maxima.items():
        value = float(m)
        max_abs = value if math.isfinite(value) else None
        rows[name] = {"name": name, "type": "logits" if name == LOGITS else types[name], "order": order[name],
                      "max_abs": max_abs, "headroom": _headroom(max_abs)}
    return rows, total_nll / targets


def _fp16_forward(model, batches: list[_Batch]) -> dict:
    """Which module outputs of the same forward computed in fp16 hold inf or nan."""
    bad: dict[str, torch.Tensor] = {}
    order: list[str] = []
    current: list[_Batch] = []

    def record(name: str, output) -> None:
        x = _first_tensor(output)
        if x is None:
            return
        if name not in bad:
            order.append(name)
        nonfinite = ~torch.isfinite(_max_abs(x, current[0]))
        bad[name] = bad[name] | nonfinite if name in bad else nonfinite

    handles = _hook_every_module(model, record)
    try:
        with torch.no_grad():
            for batch in batches:
                current[:] = [batch]
                record(LOGITS, batch.forward(model))
    finally:
        for h in handles:
            h.remove()
    nonfinite = [name for name in order if bool(bad[name])]
    return {
        "finite": not nonfinite,
        "first_nonfinite": nonfinite[0] if nonfinite else None,
        "nonfinite_modules": nonfinite,
        "logits_finite": LOGITS not in nonfinite,
    }


def _gradient_report(model, loss_scale: float) -> dict:
    keys = ("numel", "nonzero", "flush_to_zero", "below_normal", "overflow")
    total = dict.fromkeys(keys, 0)
    per_parameter = []
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        counts = fp16_gradient_counts(p.grad, loss_scale)
        for k in keys:
            total[k] += counts[k]
        per_parameter.append({"name": name, "numel": counts["numel"], "nonzero": counts["nonzero"],
                              **_shares(counts)})
    per_parameter.sort(key=lambda r: (r["flush_to_zero_share"], r["below_normal_share"]), reverse=True)
    return {"loss_scale": float(loss_scale), **total, **_shares(total),
            "worst_parameters": per_parameter[:WORST_PARAMETERS]}


def _shares(counts: dict[str, int]) -> dict[str, float]:
    n = max(counts["nonzero"], 1)
    return {f"{k}_share": counts[k] / n for k in ("flush_to_zero", "below_normal", "overflow")}


# --- helpers ---


def _validate(model, prompt_ids, initial_loss_scale, micro_batch_size) -> None:
    if not prompt_ids or any(len(ids) == 0 for ids in prompt_ids):
        raise UserError("prompt_ids: give at least one prompt, and no empty one")
    if all(len(ids) < 2 for ids in prompt_ids):
        raise UserError("prompt_ids: every prompt has one token; the gradient check needs prompts of 2+ tokens")
    vocab = model.get_input_embeddings().num_embeddings
    top = max(max(ids) for ids in prompt_ids)
    if top >= vocab or min(min(ids) for ids in prompt_ids) < 0:
        raise UserError(f"prompt_ids: token id {top} is outside the model's vocabulary of {vocab}; "
                        "tokenize with the model's own tokenizer")
    if not (initial_loss_scale > 0 and math.isfinite(initial_loss_scale)):
        raise UserError(f"--initial-loss-scale {initial_loss_scale}: must be a positive number, e.g. 65536")
    if micro_batch_size < 1:
        raise UserError(f"--micro-batch-size {micro_batch_size}: must be at least 1")


def _pad_id(model) -> int:
    pad = getattr(model.config, "pad_token_id", None)
    return pad if isinstance(pad, int) and pad >= 0 else 0


def _micro_batches(prompt_ids: list[list[int]], size: int, pad_id: int, device: torch.device):
    for start in range(0, len(prompt_ids), size):
        group = prompt_ids[start : start + size]
        width = max(len(ids) for ids in group)
        ids = torch.full((len(group), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(group), width), dtype=torch.long)
        for i, row in enumerate(group):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        yield _Batch(ids.to(device), mask.to(device))


def _next_token_nll_sum(logits: torch.Tensor, batch: _Batch) -> torch.Tensor:
    targets = batch.input_ids[:, 1:].masked_fill(batch.attention_mask[:, 1:] == 0, -100)
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), targets.flatten(),
                                             ignore_index=-100, reduction="sum")


def _hook_every_module(model, record) -> list:
    handles = []
    for name, module in model.named_modules():
        if name:  # the root's output is the logits, recorded on their own
            handles.append(module.register_forward_hook(lambda _m, _in, out, name=name: record(name, out)))
    return handles


def _first_tensor(output) -> Optional[torch.Tensor]:
    """The tensor a module returns: itself, the first element of a tuple, or the first field of an HF output."""
    if isinstance(output, Mapping):
        output = next(iter(output.values()), None)
    elif isinstance(output, (tuple, list)):
        output = output[0] if output else None
    return output if isinstance(output, torch.Tensor) and output.is_floating_point() else None


def _max_abs(x: torch.Tensor, batch: _Batch) -> torch.Tensor:
    """max |x| (inf or nan when x holds one) over the real positions, when x's leading dims are (batch, sequence).

    Built from amax and amin so that no |x| copy of a large output (the logits) is made.
    """
    x = x.detach()
    if x.numel() == 0:
        return x.new_zeros((), dtype=torch.float32)
    if x.dim() >= 2 and tuple(x.shape[:2]) == tuple(batch.attention_mask.shape):
        dims = tuple(range(2, x.dim()))
        hi, lo = (x.amax(dims), x.amin(dims)) if dims else (x, x)
        return torch.maximum(hi, -lo)[batch.real].amax().float()
    return torch.maximum(x.amax(), -x.amin()).float()


def _headroom(max_abs: Optional[float]) -> Optional[float]:
    """65504 / max|x|: 0.0 when fp32 itself overflowed (max_abs None), None when the output is all zeros."""
    if max_abs is None:
        return 0.0
    return FP16_MAX / max_abs if max_abs > 0 else None


def _headroom_key(row: dict) -> float:
    return math.inf if row["headroom"] is None else row["headroom"]


def _fmt_abs(value: Optional[float]) -> str:
    return "inf/nan" if value is None else f"{value:.3g}"


def _fmt_headroom(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:.3g}x"


# --- command line ---


@dataclass
class PreflightArgs(PromptSource):
    """Check before an fp16 run that activations fit under 65504 and gradients survive the loss scale."""

    # Prompts per forward.
    micro_batch_size: int = 8
    # "auto" picks CUDA when available.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # Tokens of the response sampled after each prompt (fp32, temperature 1) and measured with it; 0 measures prompts alone.
    response_tokens: int = 64
    # Loss scale of the first fp16 step (the training default).
    initial_loss_scale: float = LossScaling.initial_scale
    # Fail when an activation is within this factor of 65504 (headroom below it).
    margin: float = DEFAULT_MARGIN
    # Folder for preflight.json.
    output_dir: Path = Path("runs/preflight")


def preflight_from_args(args: PreflightArgs, log=print) -> dict:
    """Load the model and prompts as the mismatch lab does, run the preflight, write preflight.json."""
    from precision_oat.args import ModelArgs
    from precision_oat.models import load_policy, resolve_device

    check_prompt_source(args)
    device = resolve_device(args.device)
    policy = load_policy(ModelArgs(model=args.model, gguf_file=args.gguf_file), log)
    prompts = load_prompts(args, policy.tokenizer)
    if not prompts:
        raise UserError(f"--prompt-data {args.prompt_data}: no prompts to run the preflight on")
    prompt_ids = [policy.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
    responses = SamplingParams(max_new_tokens=args.response_tokens, stop_token_ids=stop_token_ids(policy.tokenizer),
                               seed=0) if args.response_tokens > 0 else None
    report = run_preflight(policy.model, prompt_ids, initial_loss_scale=args.initial_loss_scale, device=device,
                           micro_batch_size=args.micro_batch_size, responses=responses)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "preflight.json").write_text(json.dumps(report, indent=2, allow_nan=False))
    log(format_report(report))
    log(f"wrote {out / 'preflight.json'}")
    return report


def cli(argv=None) -> dict:
    import tyro

    args = tyro.cli(PreflightArgs, args=argv, prog="python -m precision_oat.mismatch.preflight")
    try:
        report = preflight_from_args(args, log=lambda line: print(line, flush=True))
        check(report, args.margin)
    except UserError as e:
        sys.exit(f"error: {e}")
    return report


if __name__ == "__main__":
    cli()
