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
the fp16 forward is not finite. ``python -m precision_oat.lab.preflight`` runs all of
it on a model and prompts given as the mismatch lab takes them, prints the table and
writes ``OUTPUT_DIR/preflight.json`` (keys in docs/metrics.md, "fp16 preflight"); that command
line is this package's ``__main__``.
:func:`before_fp16_run` is the same check run by the local backend before an fp16 run.

Departures from a real fp16 step, on purpose: the gradients are fp32 gradients scaled and
rounded once, whereas an fp16 backward also rounds every intermediate gradient; positions
that are padding are left out of every maximum, and so is the logit of each sequence's last
position (it predicts no token).

Memory is that of the update, not of the whole sequences: the forward and backward run in
training mode with gradient checkpointing where the model has it, rows go in micro-batches
bounded in tokens, and the output projection, the fp32 cross-entropy and their backward run a
chunk of positions at a time, so no tensor holds the vocabulary for more than a chunk. The
automatic check before a run measures as many of the run's first prompts as fit a budget of
:data:`RUN_TOKENS` tokens, each with a response of the run's full length (at 8k-token answers,
three prompts rather than thirty-two), and says so.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch

from precision_oat.errors import UserError, out_of_memory_explained
from precision_oat.precision.policy import Precision, PrecisionError
from precision_oat.rl.scoring import DEFAULT_CHUNK_SIZE, projects_plainly
from precision_oat.samplers.sampler import SamplingParams

if TYPE_CHECKING:
    from precision_oat.args import PrecisionArgs

FP16_MAX = 65504.0
FP16_SMALLEST_NORMAL = 2.0**-14
# The flag of the training command that skips the preflight; named in check()'s message.
OVERRIDE_FLAG = "--skip-fp16-preflight"
DEFAULT_MARGIN = 8.0
# The automatic check runs on at most this many of the run's first prompts, and on no more of them than
# fit this many tokens with a response of the run's full length (always at least one).
RUN_PROMPTS = 32
RUN_TOKENS = 32768
# Rows per forward, and tokens per forward (a row longer than that goes alone).
RUN_MICRO_BATCH = 8
MICRO_BATCH_TOKENS = 16384
# What to lower when the preflight itself runs out of GPU memory.
PREFLIGHT_MEMORY_FLAGS = (f"lower --logprob-chunk-size, or pass {OVERRIDE_FLAG} (the check is then yours to run on a "
                          "larger device: python -m precision_oat.lab.preflight)")
LOGITS = "logits"
# Rows of the printed table: modules with the smallest headroom, and parameters with the most underflow.
TABLE_MODULES = 10
WORST_PARAMETERS = 5


def run_preflight(model, prompt_ids: list[list[int]], *, initial_loss_scale: float, device,
                  micro_batch_size: int = 8, responses: Optional[SamplingParams] = None,
                  chunk_size: int = DEFAULT_CHUNK_SIZE, micro_batch_tokens: int = MICRO_BATCH_TOKENS) -> dict:
    """Activation headroom, fp16 forward finiteness and gradient underflow of ``model`` on ``prompt_ids``.

    ``model`` is an HF causal LM in any dtype on any device; it is left untouched (the work
    happens on a copy in fp32 on ``device``, cast to fp16 for the second forward, then freed).
    With ``responses``, each prompt is followed by one response sampled with those settings,
    and the prompt and response positions are measured together; without, the prompts alone.
    A forward takes at most ``micro_batch_size`` rows and ``micro_batch_tokens`` tokens (a longer
    row alone); the logits exist ``chunk_size`` positions at a time.
    """
    _validate(model, prompt_ids, initial_loss_scale, micro_batch_size)
    if chunk_size < 1 or micro_batch_tokens < 1:
        raise UserError(f"chunk_size {chunk_size}, micro_batch_tokens {micro_batch_tokens}: both must be at least 1")
    device = torch.device(device)
    sequences = prompt_ids if responses is None else with_responses(model, prompt_ids, responses, device)
    work = copy.deepcopy(model).to(device=device, dtype=torch.float32)
    try:
        for p in work.parameters():
            p.grad = None
            p.requires_grad_(True)
        # The update's own memory settings: training mode, and each layer's activations recomputed in the backward.
        work.train()
        if work.supports_gradient_checkpointing:
            # Newer transformers renamed it, and warn on every call of the old name.
            getattr(work, "activation_checkpointing_enable", work.gradient_checkpointing_enable)()
        batches = list(_micro_batches(sequences, micro_batch_size, micro_batch_tokens, _pad_id(work), device))
        activations, nll = _fp32_forward_backward(work, batches, chunk_size)
        gradients = _gradient_report(work, initial_loss_scale)
        gradients["loss"] = nll
        work.zero_grad(set_to_none=True)
        work.to(torch.float16).eval()
        fp16_forward = _fp16_forward(work, batches, chunk_size)
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
                    device, log=print, responses: Optional[SamplingParams] = None,
                    chunk_size: int = DEFAULT_CHUNK_SIZE) -> Optional[dict]:
    """The automatic preflight of a training run that computes in fp16 on either side.

    Runs on the first of ``prompt_ids`` (the run's first prompts: at most :data:`RUN_PROMPTS`, and
    no more than fit :data:`RUN_TOKENS` at full length, :func:`prompts_in_budget`), each followed
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
    measured = prompts_in_budget(prompt_ids, responses.max_new_tokens if responses is not None else 0)
    with out_of_memory_explained("the fp16 preflight", PREFLIGHT_MEMORY_FLAGS):
        report = run_preflight(model, measured, initial_loss_scale=scale, device=device,
                               micro_batch_size=RUN_MICRO_BATCH, responses=responses, chunk_size=chunk_size)
    folder = Path(folder)
    (folder / "preflight.json").write_text(json.dumps(report, indent=2, allow_nan=False))
    (folder / "preflight.txt").write_text(format_report(report) + "\n")
    try:
        check(report, flags.fp16_preflight_margin, margin_flag="--fp16-preflight-margin")
    except PrecisionError as e:
        raise PrecisionError(f"{e} (table: {folder / 'preflight.txt'})") from None
    worst, g = report["min_headroom"], report["gradients"]
    log(f"fp16 preflight: ok · {report['prompts']} of the run's first prompts ({report['tokens']:,} tokens) · "
        f"least headroom {_fmt_headroom(worst['headroom'])} ({worst['name']}) ≥ "
        f"{flags.fp16_preflight_margin:g}x margin · fp16 forward finite · "
        f"{100 * g['flush_to_zero_share']:.2f}% of gradients round to zero at loss scale {scale:g} · "
        f"{folder / 'preflight.txt'}")
    return report


def prompts_in_budget(prompt_ids: list[list[int]], response_tokens: int) -> list[list[int]]:
    """The first of ``prompt_ids`` that the automatic check measures: at most :data:`RUN_PROMPTS`, and no more than
    fit :data:`RUN_TOKENS` tokens when each is followed by ``response_tokens`` (always at least one)."""
    first = prompt_ids[:RUN_PROMPTS]
    longest = max(len(ids) for ids in first) + response_tokens
    return first[: max(1, RUN_TOKENS // longest)]


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

    def targets(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(row, column, next token) of every real position that predicts a real token."""
        row, column = self.attention_mask[:, 1:].nonzero(as_tuple=True)
        return row, column, self.input_ids[row, column + 1]


def _scored_rows(model, batch: _Batch):
    """The forward of ``batch`` up to the logits: (one row per predicting position, the map from those rows to
    logits, the tokens they predict). For a model whose logits are its head's projection of the last hidden state
    the rows are hidden states and the map is the head, so the logits never exist for more than a chunk; a model
    that transforms its logits (a soft cap) gives its full logits, as the trainer's scoring takes them."""
    row, column, tokens = batch.targets()
    if projects_plainly(model.config):
        hidden = model.get_decoder()(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                     use_cache=False).last_hidden_state
        return hidden[row, column], model.get_output_embeddings(), tokens
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False).logits
    return logits[row, column], (lambda rows: rows), tokens


def _fp32_forward_backward(model, batches: list[_Batch], chunk_size: int) -> tuple[dict[str, dict], float]:
    """Per-module max |output| over real positions, and the gradients of the mean next-token NLL.

    The backward runs in two stages: each chunk's head and cross-entropy back to the rows of hidden states
    (detached, so the chunk's logits are freed at once), then the body from those rows' gradient.
    """
    maxima: dict[str, torch.Tensor] = {}
    order: dict[str, int] = {}
    types = {name: type(m).__name__ for name, m in model.named_modules()}
    current: list[_Batch] = []

    def note(name: str, m: torch.Tensor) -> None:
        order.setdefault(name, len(order))
        maxima[name] = torch.maximum(maxima[name], m) if name in maxima else m

    def record(name: str, output) -> None:
        x = _first_tensor(output)
        if x is not None:
            note(name, _max_abs(x, current[0]))

    handles = _hook_every_module(model, record)
    targets = sum(int(b.attention_mask[:, 1:].sum()) for b in batches)
    total_nll = 0.0
    try:
        for batch in batches:
            current[:] = [batch]
            rows, project, tokens = _scored_rows(model, batch)
            leaf = rows.detach().requires_grad_()
            for start in range(0, len(tokens), chunk_size):
                logits = project(leaf[start : start + chunk_size]).float()
                note(LOGITS, _max_abs_all(logits))
                nll = torch.nn.functional.cross_entropy(logits, tokens[start : start + chunk_size], reduction="sum")
                (nll / targets).backward()
                total_nll += float(nll.detach())
                del logits, nll
            if leaf.grad is not None:
                rows.backward(leaf.grad)
            del rows, leaf
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


def _fp16_forward(model, batches: list[_Batch], chunk_size: int) -> dict:
    """Which module outputs of the same forward computed in fp16 hold inf or nan."""
    bad: dict[str, torch.Tensor] = {}
    order: list[str] = []
    current: list[_Batch] = []

    def note(name: str, nonfinite: torch.Tensor) -> None:
        if name not in bad:
            order.append(name)
        bad[name] = bad[name] | nonfinite if name in bad else nonfinite

    def record(name: str, output) -> None:
        x = _first_tensor(output)
        if x is not None:
            note(name, ~torch.isfinite(_max_abs(x, current[0])))

    handles = _hook_every_module(model, record)
    try:
        with torch.no_grad():
            for batch in batches:
                current[:] = [batch]
                rows, project, _ = _scored_rows(model, batch)
                for start in range(0, len(rows), chunk_size):
                    note(LOGITS, ~torch.isfinite(_max_abs_all(project(rows[start : start + chunk_size]))))
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


def _micro_batches(prompt_ids: list[list[int]], size: int, tokens: int, pad_id: int, device: torch.device):
    """Consecutive rows, right-padded, at most ``size`` of them and ``tokens`` padded tokens (a longer row alone)."""
    groups: list[list[list[int]]] = []
    for ids in prompt_ids:
        group = groups[-1] if groups else None
        if group is None or len(group) == size or (len(group) + 1) * max(len(ids), *map(len, group)) > tokens:
            groups.append([ids])
        else:
            group.append(ids)
    for group in groups:
        width = max(len(ids) for ids in group)
        ids = torch.full((len(group), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(group), width), dtype=torch.long)
        for i, row in enumerate(group):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        yield _Batch(ids.to(device), mask.to(device))


def _hook_every_module(model, record) -> list:
    """A forward hook on every module but the root and the output projection: the logits are recorded on their own,
    a chunk at a time."""
    head = model.get_output_embeddings()
    handles = []
    for name, module in model.named_modules():
        if name and module is not head:
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
    if x.numel() and x.dim() >= 2 and tuple(x.shape[:2]) == tuple(batch.attention_mask.shape):
        dims = tuple(range(2, x.dim()))
        hi, lo = (x.amax(dims), x.amin(dims)) if dims else (x, x)
        return torch.maximum(hi, -lo)[batch.real].amax().float()
    return _max_abs_all(x)


def _max_abs_all(x: torch.Tensor) -> torch.Tensor:
    """max |x| over every element (inf or nan when x holds one), from amax and amin."""
    x = x.detach()
    return torch.maximum(x.amax(), -x.amin()).float() if x.numel() else x.new_zeros((), dtype=torch.float32)


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
