"""Judging checkpoints: where the zoo meets ``interpscale.judges`` (which never imports torch),
for ``interpscale judge --checkpoint`` and the pipeline's alignment stage: a concept's top
promoted tokens T_k(c) = TopK(W K_c) (§7), steering-benchmark continuations from a model's own
``generate`` (unsteered / prompting / steered with calibrated τ, Eq. 19), predicted concepts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from interpscale.data.corpus import read_concepts
from interpscale.data.tokenizer import load_tokenizer
from interpscale.judges import (AlignmentResult, ConceptCard, SteeringResult, build_judge,
                                run_steering_benchmark, score_alignment, score_relevance)
from interpscale.judges.steering import DEFAULT_PROMPTS
from interpscale.metrics._common import block_size, generate_text, is_diffusion, model_device, special_ids
from interpscale.metrics.interp import concept_top_tokens as _top_ids
from interpscale.models import load_checkpoint
from interpscale.models.steering import Steering
from interpscale.errors import UserError


class ZooGenerator:
    """A zoo model's continuations for ``run_steering_benchmark``. ``cards`` in concept-id order (a
    card's position is the known concept injected); ``strength`` is the target peak logit shift τ,
    γ = τ / peak(e_c) calibrated per concept by the model (Eq. 19)."""

    def __init__(self, model: Any, tokenizer: Any, cards: Sequence[ConceptCard], *, temperature: float = 1.0,
                 top_k: Optional[int] = None, layer: Optional[int] = None, steps_per_block: Optional[int] = None):
        n = getattr(model.config, "n_concepts", 0) or 0
        if len(cards) > n:
            raise UserError(f"{len(cards)} concept cards but the model has {n} known concepts")
        self.model, self.tokenizer = model, tokenizer
        self.index = {c.label: i for i, c in enumerate(cards)}
        if len(self.index) != len(cards):
            raise UserError("concept labels must be unique to map cards to concept ids")
        self.temperature, self.top_k, self.layer, self.steps = temperature, top_k, layer, steps_per_block

    def __call__(self, prompt: str, *, card: Optional[ConceptCard], strength: Optional[float],
                 max_new_tokens: int, seed: int) -> str:
        ids = self.tokenizer.encode(prompt).ids
        if not ids:
            raise UserError(f"prompt {prompt!r} encodes to no tokens")
        max_len = int(self.model.config.max_seq_len)
        if max_len - int(max_new_tokens) < 1:
            raise UserError(f"max_new_tokens={max_new_tokens} leaves no room in max_seq_len={max_len}")
        steer = None
        if card is not None:
            if card.label not in self.index:
                raise UserError(f"concept {card.label!r} is not in this model's concept library")
            steer = Steering(concepts=(self.index[card.label],), tau=float(strength if strength is not None else 1.0),
                             layer=self.layer)
        return generate_text(self.model, self.tokenizer, ids, int(max_new_tokens), max_len,
                             temperature=self.temperature, top_k=self.top_k, steer=steer,
                             steps_per_block=self.steps, seed=int(seed))


def concept_top_tokens(model: Any, tokenizer: Any, k: int = 20, concepts: Optional[Sequence[int]] = None) -> list[list[str]]:
    """T_k(c) = TopK(W K_c) for each known concept (§7), decoded, special tokens excluded
    (they are not words a judge can read); ids come from metrics.interp."""
    special = special_ids(model)
    ids = _top_ids(model, k + len(special), concepts)
    return [[tokenizer.decode([i], skip_special_tokens=True) or tokenizer.id_to_token(i) or str(i)
             for i in row if i not in special][:k] for row in ids.tolist()]


def _open(checkpoint: str | Path, run_dir: str | Path | None) -> tuple[Any, Any, list[ConceptCard], Path]:
    """A checkpoint's model (eval mode), its run's tokenizer, concept cards and run directory."""
    rd = Path(run_dir) if run_dir else Path(checkpoint).parent.parent  # RUN_DIR/checkpoints/x.pt
    for name in ("tokenizer.json", "concepts.json"):
        if not (rd / name).is_file():
            raise UserError(f"run directory {rd} has no {name} (pass run_dir=...)")
    model, _ = load_checkpoint(Path(checkpoint))
    cards = [ConceptCard.from_dict(c) for c in read_concepts(rd / "concepts.json")]  # list order = concept id
    return model.eval(), load_tokenizer(rd / "tokenizer.json"), cards, rd


def judge_checkpoint_alignment(checkpoint: str | Path, *, run_dir: str | Path | None = None, k: int = 20,
                               judge: Any = None, n_sample: Optional[int] = None, seed: int = 0) -> AlignmentResult:
    """Known concept alignment of a checkpoint: its concepts' top-k tokens judged 1–5."""
    model, tok, cards, _ = _open(checkpoint, run_dir)
    tokens = concept_top_tokens(model, tok, k, concepts=range(len(cards)))
    return score_alignment(cards, tokens, judge=build_judge(judge), n_sample=n_sample, seed=seed)


def judge_checkpoint_steering(checkpoint: str | Path, *, run_dir: str | Path | None = None,
                              prompts: Sequence[str] = DEFAULT_PROMPTS, judge: Any = None,
                              temperature: float = 1.0, top_k: Optional[int] = None, layer: Optional[int] = None,
                              **bench_kwargs: Any) -> SteeringResult:
    """The steering benchmark on a checkpoint (``bench_kwargs`` go to run_steering_benchmark)."""
    model, tok, cards, _ = _open(checkpoint, run_dir)
    gen = ZooGenerator(model, tok, cards, temperature=temperature, top_k=top_k, layer=layer)
    st = Path(checkpoint).stat()  # saved generations belong to this file and these sampling settings
    gid = json.dumps([str(Path(checkpoint).resolve()), st.st_size, st.st_mtime_ns, temperature, top_k, layer])
    return run_steering_benchmark(gen, cards, prompts, judge=build_judge(judge), generator_id=gid, **bench_kwargs)


def predicted_concepts(model: Any, tokenizer: Any, texts: Sequence[str], *, top: int = 3) -> list[list[int]]:
    """The ``top`` known concepts a model predicts for each text chunk: the sigmoid
    activations k (Eq. 6) OR-aggregated over the chunk's tokens by a max (§4.5.2)."""
    if top < 1:
        raise ValueError(f"top must be >= 1, got {top}")
    out = []
    block = block_size(model) if is_diffusion(model) else 1
    for i, text in enumerate(texts):
        ids = tokenizer.encode(text).ids[: int(model.config.max_seq_len)]
        if not ids:
            raise ValueError(f"chunk {i} encodes to no tokens")
        n, ids = len(ids), ids + [0] * (-len(ids) % block)  # PAD to whole diffusion blocks (ignored)
        with torch.no_grad():
            act = model(torch.tensor([ids], device=model_device(model))).known_act
        if act is None:
            raise ValueError(f"family {model.config.family!r} predicts no known concepts")
        out.append(act[0, :n].max(0).values.topk(min(top, act.size(-1))).indices.tolist())
    return out


def judge_checkpoint_relevance(checkpoint: str | Path, texts: Sequence[str], *, run_dir: str | Path | None = None,
                               top: int = 3, judge: Any = None):
    """Predicted-concept relevance (App. C): each chunk against its top predicted concepts, 1–5 each."""
    model, tok, cards, rd = _open(checkpoint, run_dir)
    preds = predicted_concepts(model, tok, texts, top=top)
    bad = sorted({c for row in preds for c in row if c >= len(cards)})
    if bad:
        raise UserError(f"concepts {bad[:5]} are predicted but {rd / 'concepts.json'} has only {len(cards)} cards")
    return score_relevance(list(texts), [[cards[c] for c in row] for row in preds], judge=build_judge(judge))
