"""Sampling: AR decoding with a KV cache; CDLM block-by-block denoising (§5.2) with
confidence-based unmasking inside a block and the KV cache across blocks."""

from __future__ import annotations

import math
from typing import Optional

import torch

from interpscale.models.steering import SteerState, Steering, steer_state
from interpscale.models.types import evaluating


def _sample(logits: torch.Tensor, temperature: float, top_k: Optional[int], gen: torch.Generator):
    """(token ids, probability of the chosen id) for logits [..., V]; temperature 0 is greedy."""
    z = logits.float()
    if top_k is not None and top_k < z.size(-1):
        z = z.masked_fill(z < z.topk(top_k, dim=-1).values[..., -1:], float("-inf"))
    probs = (z if temperature == 0 else z / temperature).softmax(-1)
    if temperature == 0:
        p, idx = probs.max(-1)
        return idx, p
    idx = torch.multinomial(probs.reshape(-1, probs.size(-1)).cpu(), 1, generator=gen)
    idx = idx.view(probs.shape[:-1]).to(logits.device)
    return idx, probs.gather(-1, idx.unsqueeze(-1)).squeeze(-1)


def _logits(model, tokens, st: Optional[SteerState], steer_mask, cache=None, commit=False):
    out = model.run(tokens, cache=cache, commit=commit,
                    steer_vec=None if st is None else st.vec, steer_mask=steer_mask,
                    steer_layer=0 if st is None else st.layer)
    logits = out.logits
    if st is not None and st.logit_penalty is not None:
        logits = logits - st.logit_penalty * steer_mask.unsqueeze(-1).to(logits.dtype)  # Eq. 21
    logits[..., model.config.mask_id] = float("-inf")  # [MASK] is never an output token
    return logits


@torch.no_grad()
def generate(model, prompt_ids: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
             top_k: Optional[int] = None, steer: Optional[Steering] = None, use_cache: bool = True,
             steps_per_block: Optional[int] = None, seed: Optional[int] = None,
             generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """[B, P + max_new_tokens] ids: AR sampling with a KV cache, or CDLM block-by-block
    confidence-based denoising with the cache across blocks; ``steer`` amplifies or suppresses
    a concept (Eqs. 18–21)."""
    prompt = model.check_tokens(prompt_ids, need_blocks=False)
    if int(max_new_tokens) < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if generator is None:
        generator = torch.Generator().manual_seed(0 if seed is None else int(seed))
    st = steer_state(model, steer) if steer is not None else None
    with evaluating(model):
        fn = _generate_cdlm if model.is_diffusion else _generate_ar
        return fn(model, prompt, int(max_new_tokens), temperature, top_k, st, use_cache, steps_per_block, generator)


def _generate_ar(model, prompt, n_new, temperature, top_k, st, use_cache, _steps, gen):
    B, P = prompt.shape
    cache = model.new_cache(B, P + n_new) if use_cache else None
    seq = inp = prompt  # with a cache, each step feeds only the newest token
    for _ in range(n_new):
        pos = torch.arange(seq.size(1) - inp.size(1), seq.size(1), device=seq.device)
        mask = (pos >= P - 1).expand(B, -1)  # steering acts on the positions that produce new tokens
        nxt, _ = _sample(_logits(model, inp, st, mask, cache, commit=use_cache)[:, -1], temperature, top_k, gen)
        seq = torch.cat([seq, nxt[:, None]], dim=1)
        inp = nxt[:, None] if use_cache else seq
    return seq


def _generate_cdlm(model, prompt, n_new, temperature, top_k, st, use_cache, steps_per_block, gen):
    cfg = model.config
    b, mask_id = cfg.block_size, cfg.mask_id
    B, P = prompt.shape
    n_full = P // b
    total = math.ceil((P + n_new) / b) * b  # whole blocks; the tail is cut at the end
    cache = model.new_cache(B, total) if use_cache else None
    if use_cache and n_full:
        model.run(prompt[:, : n_full * b], cache=cache, commit=True)  # prefill whole prompt blocks
    done = prompt[:, : n_full * b]
    carry = prompt[:, n_full * b:]  # prompt tokens in the first generated block
    while done.size(1) < total:
        block = torch.full((B, b), mask_id, dtype=prompt.dtype, device=prompt.device)
        block[:, : carry.size(1)] = carry
        masked = (torch.arange(b, device=prompt.device) >= carry.size(1)).expand(B, b)
        carry = carry[:, :0]
        n_masked = int(masked[0].sum())
        steps = min(steps_per_block or n_masked, n_masked)
        for s in range(steps):
            ctx = block if use_cache else torch.cat([done, block], dim=1)  # without a cache, the whole context
            at = masked if use_cache else torch.cat([torch.zeros_like(done, dtype=torch.bool), masked], dim=1)
            logits = _logits(model, ctx, st, at, cache)[:, -b:]
            cand, conf = _sample(logits, temperature, top_k, gen)
            conf = conf.masked_fill(~masked, float("-inf"))
            k = math.ceil(int(masked[0].sum()) / (steps - s))  # spread the remaining masks evenly
            pick = conf.topk(k, dim=-1).indices
            sel = torch.zeros_like(masked).scatter(1, pick, True) & masked
            block = torch.where(sel, cand, block)
            masked = masked & ~sel
        if use_cache:
            model.run(block, cache=cache, commit=True)  # clean K/V of the finished block
        done = torch.cat([done, block], dim=1)
    return done[:, : P + n_new]
