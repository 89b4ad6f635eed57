"""Log-likelihoods of continuations given contexts, for the lm-eval adapter and the soft MMLU
score (Steerling App. J) below.

AR models: the exact sum of next-token log-probabilities.  Diffusion models: a Monte Carlo
ELBO on log p(continuation | context) (Eq. 38 restricted to the continuation): mask l ~ U{1..L}
of the L continuation tokens and weight their log-probabilities by L / l.  The draws come from
a generator keyed by the context, so every choice of a question is scored under the same
masks, which cancels most of the Monte Carlo noise in their differences.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Sequence, Union

import torch
from torch import nn

from interpscale._jsonl import iter_jsonl
from interpscale.metrics._common import block_size, eval_mode, is_diffusion, logits_of, model_device, special_id
from interpscale.errors import UserError

Request = tuple[list[int], list[int]]  # (context ids, continuation ids)


def encode_pair(tokenizer, context: str, continuation: str) -> Request:
    """Token ids of ``context`` and ``continuation`` as they tokenize together (trailing
    spaces of the context move to the continuation; the context prefix is kept exact)."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = tokenizer.encode(context + continuation, add_special_tokens=False).ids
    ctx = tokenizer.encode(context, add_special_tokens=False).ids if context else []
    if whole[: len(ctx)] != ctx:  # a merge crossed the boundary: encode the parts apart
        return ctx, tokenizer.encode(continuation, add_special_tokens=False).ids
    return ctx, whole[len(ctx):]


def max_length(model: nn.Module, default: int = 2048) -> int:
    cfg = getattr(model, "config", None)
    return int(getattr(cfg, "max_seq_len", None) or default)


def loglikelihood(model: nn.Module, requests: Sequence[Request], *, n_samples: int = 32, seed: int = 0,
                  batch_size: int = 32, prefix_id: int | None = None,
                  share_masks: bool = True) -> list[tuple[float, bool]]:
    """``(log p(cont | ctx), is_greedy)`` per request; exact for AR, MC ELBO for diffusion
    (``n_samples`` mask draws per request, shared by requests with the same context unless
    ``share_masks=False``). An empty context is ``prefix_id`` (default: the model's EOS)."""
    if prefix_id is None:
        prefix_id = special_id(model, "eos_id")
    for i, (ctx, cont) in enumerate(requests):
        if not cont:
            raise UserError(f"request {i}: empty continuation")
    if is_diffusion(model):
        return _diffusion(model, requests, n_samples=n_samples, seed=seed, batch_size=batch_size,
                          prefix_id=prefix_id, share_masks=share_masks)
    return _ar(model, requests, batch_size=batch_size, prefix_id=prefix_id)


def _ar(model, requests, *, batch_size, prefix_id):
    limit, device = max_length(model), model_device(model)
    rows = [((([prefix_id] if not ctx else list(ctx)) + list(cont)[:-1])[-limit:], len(cont))
            for ctx, cont in requests]
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))
    out: list = [None] * len(rows)
    with eval_mode(model):
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            x = torch.nn.utils.rnn.pad_sequence([torch.tensor(rows[i][0], dtype=torch.long) for i in idx],
                                                batch_first=True, padding_value=special_id(model, "pad_id"))
            logp = torch.log_softmax(logits_of(model(x.to(device))).float(), -1)
            for r, i in enumerate(idx):
                inp, L = rows[i]
                cont = torch.tensor(requests[i][1], device=device)
                lp = logp[r, len(inp) - L : len(inp)]  # position j predicts token j+1
                out[i] = (float(lp.gather(-1, cont[:, None]).sum()), bool((lp.argmax(-1) == cont).all()))
    return out


def _draws(ctx: Sequence[int], n_samples: int, seed: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Shared draws for one context: stratified fractions [S] and position priorities
    [S, width]; a choice of length L masks its L positions with the lowest priorities."""
    h = hashlib.blake2b(repr((seed, list(ctx))).encode(), digest_size=8).digest()
    g = torch.Generator().manual_seed(int.from_bytes(h, "little") % (2**63))
    frac = (torch.randperm(n_samples, generator=g) + torch.rand(n_samples, generator=g)) / n_samples
    return frac, torch.rand(n_samples, width, generator=g)  # then the priorities


def _diffusion(model, requests, *, n_samples, seed, batch_size, prefix_id, share_masks):
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    limit, mask_id, device = max_length(model), special_id(model, "mask_id"), model_device(model)
    block = block_size(model, default=1)
    # Per request: n_samples masked copies plus one fully masked copy for is_greedy, grouped by length:
    by_len = defaultdict(list)  # length -> [(request index, sample index or -1, masked positions, weight)]
    seqs, draws = [], {}  # draws: the context key -> its (fractions, priorities)
    for i, (ctx, cont) in enumerate(requests):
        L = len(cont)
        if L >= limit:
            raise UserError(f"request {i}: continuation of {L} tokens does not fit the model's {limit}-token context")
        ctx = ([prefix_id] if not ctx else list(ctx))[-(limit - L):]
        # block-causal models take whole blocks: the rest of the last block stays [MASK],
        # exactly as when that block is being generated (never scored)
        seqs.append(torch.tensor(ctx + list(cont) + [mask_id] * (-(len(ctx) + L) % block)))
        start, jobs = len(ctx), by_len[len(seqs[-1])]
        key = tuple(requests[i][0]) if share_masks else (tuple(requests[i][0]), tuple(cont), i)
        if key not in draws:
            draws[key] = _draws(key, n_samples, seed, limit)
        frac, prio = draws[key]
        for k in range(n_samples):
            l = int(frac[k] * L) + 1  # uniform on 1..L
            jobs.append((i, k, start + torch.argsort(prio[k, :L])[:l], L / l))
        jobs.append((i, -1, torch.arange(start, start + L), 0.0))
    est = torch.zeros(len(requests), dtype=torch.float64)
    greedy = [False] * len(requests)
    with eval_mode(model):
        for group in by_len.values():
            for s in range(0, len(group), batch_size):
                chunk = group[s : s + batch_size]
                x = torch.stack([seqs[i] for i, _, _, _ in chunk])
                mask = torch.zeros_like(x, dtype=torch.bool)
                for r, (_, _, pos, _) in enumerate(chunk):
                    mask[r, pos] = True
                x, mask = x.to(device), mask.to(device)
                logp = torch.log_softmax(logits_of(model(x.masked_fill(mask, mask_id))).float(), -1)
                tok_lp = logp.gather(-1, x[..., None]).squeeze(-1)  # [R, T]
                for r, (i, k, pos, w) in enumerate(chunk):
                    if k < 0:
                        greedy[i] = bool((logp[r, pos].argmax(-1) == x[r, pos]).all())
                    else:
                        est[i] += w * float(tok_lp[r, pos].sum()) / n_samples  # L/l * sum over masked
    return [(float(est[i]), greedy[i]) for i in range(len(requests))]


# ---- MMLU soft score (App. J) -------------------------------------------------------------
# log P(correct) - log sum_{A..D} P(choice) on any multiple-choice JSONL of {"question",
# "choices": [..], "answer"} (an index or a letter); the choice probabilities are those of the
# answer letters after an MMLU-style prompt (exact for AR models, an MC ELBO with masks shared
# across a question's letters for diffusion ones).
LETTERS = "ABCDEFGHIJ"


def soft_score(choice_logliks: Sequence[float], correct: int) -> float:
    """log P(correct) - log sum_c P(c); bounded above by 0 (App. J)."""
    ll = torch.tensor([float(x) for x in choice_logliks], dtype=torch.float64)
    if not 0 <= correct < len(ll):
        raise ValueError(f"correct index {correct} outside the {len(ll)} choices")
    return float(ll[correct] - torch.logsumexp(ll, 0))


def mc_prompt(question: str, choices: Sequence[str]) -> str:
    lines = [question.strip()] + [f"{LETTERS[i]}. {c}" for i, c in enumerate(choices)]
    return "\n".join(lines) + "\nAnswer:"


@dataclass(frozen=True)
class SoftScoreResult:
    """Mean soft score with its standard error over questions, and hard accuracy."""

    soft_score: float
    se: float
    accuracy: float
    n: int
    per_item: tuple[float, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "per_item"}


def load_mc_jsonl(path: Union[str, Path]) -> list[dict]:
    """Rows of a multiple-choice JSONL, validated; ``answer`` normalised to an int index."""
    rows = [_normalise(r, f"{path}:{ln}") for ln, r in iter_jsonl(path)]
    if not rows:
        raise UserError(f"{path}: no questions")
    return rows


def _normalise(r: dict, where: str) -> dict:
    for key in ("question", "choices", "answer"):
        if key not in r:
            raise UserError(f"{where}: missing field {key!r}")
    choices = list(r["choices"])
    if not 2 <= len(choices) <= len(LETTERS):
        raise UserError(f"{where}: need 2..{len(LETTERS)} choices, got {len(choices)}")
    ans = r["answer"]
    idx = LETTERS.index(ans.strip().upper()) if isinstance(ans, str) and ans.strip().upper() in LETTERS else ans
    if not isinstance(idx, int) or not 0 <= idx < len(choices):
        raise UserError(f"{where}: answer {ans!r} is not a valid choice index or letter")
    return {"question": str(r["question"]), "choices": choices, "answer": idx}


def mmlu_soft_score(model: nn.Module, tokenizer, questions: Union[str, Path, Iterable[dict]], *,
                    n_samples: int = 32, seed: int = 0, batch_size: int = 32) -> SoftScoreResult:
    """Soft score of ``model`` on multiple-choice ``questions`` (JSONL path or rows); ``tokenizer``
    has ``encode(text, add_special_tokens=False).ids``; ``n_samples``: diffusion MC samples."""
    rows = (load_mc_jsonl(questions) if isinstance(questions, (str, Path))
            else [_normalise(r, f"row {i}") for i, r in enumerate(questions)])
    if not rows:
        raise ValueError("no questions given")
    reqs, spans = [], []
    for r in rows:
        prompt = mc_prompt(r["question"], r["choices"])
        start = len(reqs)
        reqs += [encode_pair(tokenizer, prompt, f" {LETTERS[j]}") for j in range(len(r["choices"]))]
        spans.append((start, len(reqs)))
    ll = [x for x, _ in loglikelihood(model, reqs, n_samples=n_samples, seed=seed, batch_size=batch_size)]
    scores = [soft_score(ll[a:b], r["answer"]) for r, (a, b) in zip(rows, spans)]
    hits = [float(max(range(b - a), key=lambda j: ll[a + j]) == r["answer"]) for r, (a, b) in zip(rows, spans)]
    n = len(scores)
    mean = sum(scores) / n
    se = math.sqrt(sum((s - mean) ** 2 for s in scores) / (n - 1) / n) if n > 1 else float("nan")
    return SoftScoreResult(mean, se, sum(hits) / n, n, tuple(scores))
