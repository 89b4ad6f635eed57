"""Log-likelihoods of continuations given contexts, for soft MMLU and the lm-eval adapter.

AR models: the exact sum of next-token log-probabilities.  Diffusion models: a Monte Carlo
ELBO on log p(continuation | context) (Eq. 38 restricted to the continuation): mask l ~ U{1..L}
of the L continuation tokens and weight their log-probabilities by L / l.  The draws come from
a generator keyed by the context, so every choice of a question is scored under the same
masks, which cancels most of the Monte Carlo noise in their differences.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Sequence

import torch
from torch import nn

from interpscale.metrics._common import block_size, eval_mode, is_diffusion, logits_of, mask_token_id, model_device, special_id

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
            raise ValueError(f"request {i}: empty continuation")
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
    limit, mask_id, device = max_length(model), mask_token_id(model), model_device(model)
    block = block_size(model, default=1)
    # Per request: n_samples masked copies plus one fully masked copy for is_greedy, grouped by length:
    by_len = defaultdict(list)  # length -> [(request index, sample index or -1, masked positions, weight)]
    seqs, draws = [], {}  # draws: the context key -> its (fractions, priorities)
    for i, (ctx, cont) in enumerate(requests):
        L = len(cont)
        if L >= limit:
            raise ValueError(f"request {i}: continuation of {L} tokens does not fit the model's {limit}-token context")
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
