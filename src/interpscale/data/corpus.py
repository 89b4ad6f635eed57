"""Bundled synthetic concept corpus: seeded documents of concept-labelled chunks, each concept
with a semantic card (label, description, characteristic words; paper §3.1).  The text has
learnable structure at several scales, so small models show real scaling and IsoFLOP sweeps
have interior optima: syllable-built entity names (sub-words), a grammar over a concept's
words (sentences), chunks about their 1-2 concepts (the exact ground-truth labels), entity ->
attribute facts repeated across the corpus (memorisation rewards parameters), and a sparse
Markov chain over the concepts of consecutive chunks with entities recurring (documents).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from interpscale._atomic import atomic_write_text
from interpscale.errors import ConfigError, UserError

# label, description, nouns, verbs, adjectives (real words so lexical judges can score them)
_THEMES: tuple[tuple[str, str, str, str, str], ...] = (
    ("astronomy", "Stars, planets and the objects of the night sky.",
     "star planet orbit comet telescope galaxy moon nebula", "orbits shines eclipses", "distant bright celestial"),
    ("cooking", "Preparing food in a kitchen.",
     "oven recipe flour garlic soup pan butter spice", "bakes stirs seasons", "savory crispy tender"),
    ("music", "Playing and composing music.",
     "melody guitar rhythm chord drum song violin choir", "plays hums tunes", "loud harmonic gentle"),
    ("ocean", "The sea, its tides and marine life.",
     "wave tide coral whale reef harbor current shell", "drifts crashes floods", "salty deep calm"),
    ("medicine", "Illness, treatment and clinical care.",
     "doctor patient vaccine fever clinic dose nurse symptom", "heals treats diagnoses", "sterile chronic acute"),
    ("finance", "Money, banking and markets.",
     "bank loan stock market budget profit interest coin", "invests lends trades", "fiscal wealthy volatile"),
    ("sports", "Competitive games and athletes.",
     "team goal ball coach match stadium player trophy", "scores defends wins", "athletic swift competitive"),
    ("weather", "Rain, wind, storms and forecasts.",
     "storm rain cloud thunder snow wind forecast fog", "pours blows freezes", "humid cold stormy"),
    ("gardening", "Growing plants in soil.",
     "seed soil flower root garden leaf shovel compost", "grows waters prunes", "green fertile blooming"),
    ("computing", "Computers, programs and networks.",
     "code server chip memory program network bug keyboard", "compiles runs reboots", "digital binary rapid"),
    ("law", "Courts, trials and legal contracts.",
     "judge court verdict lawyer contract witness trial statute", "rules sues testifies", "legal binding guilty"),
    ("travel", "Journeys, transport and tourism.",
     "train airport ticket luggage hotel passport map journey", "departs boards explores", "foreign scenic long"),
    ("architecture", "Buildings and their structures.",
     "bridge tower column arch roof beam facade brick", "supports spans rises", "stone tall ornate"),
    ("biology", "Living cells, genes and organisms.",
     "cell gene protein enzyme organism tissue virus neuron", "divides mutates evolves", "cellular genetic living"),
    ("history", "Past empires, rulers and wars.",
     "empire king battle castle treaty dynasty ruin scroll", "conquers reigns falls", "ancient royal medieval"),
    ("painting", "Visual art made with paint.",
     "canvas brush color portrait easel sketch palette fresco", "paints blends frames", "vivid abstract pastel"),
)
_SYLLABLES = ("ka", "lo", "mi", "ru", "te", "zan", "vor", "el", "qui", "sha", "dro", "pel", "tin", "gor", "wy", "nu")
_FILLER = ("the", "a", "and", "of", "with", "near", "while", "then", "so", "again")


@dataclass(frozen=True)
class Concept:
    """A concept's semantic card (``card()``) plus the vocabulary the generator draws from."""

    label: str
    description: str
    nouns: tuple[str, ...]
    verbs: tuple[str, ...]
    adjectives: tuple[str, ...]
    entities: tuple[str, ...]
    attributes: tuple[str, ...]  # attributes[i] is the fact about entities[i]

    @property
    def words(self) -> tuple[str, ...]:
        return self.nouns + self.verbs + self.adjectives

    def card(self) -> dict:
        return {"label": self.label, "description": self.description, "words": list(self.words)}


@dataclass(frozen=True)
class CorpusConfig:
    """Knobs of the generator; the corpus is a pure function of these fields."""

    n_concepts: int = 16
    n_docs: int = 4000
    chunks_per_doc: tuple[int, int] = (2, 5)
    sentences_per_chunk: tuple[int, int] = (2, 4)
    entities_per_concept: int = 24
    multi_label_prob: float = 0.25
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.n_concepts:
            raise ConfigError(f"n_concepts must be >= 1, got {self.n_concepts}")
        if self.n_docs < 2:
            raise ConfigError(f"n_docs must be >= 2 (one is held out), got {self.n_docs}")
        for name in ("chunks_per_doc", "sentences_per_chunk"):
            lo, hi = getattr(self, name)
            if not 1 <= lo <= hi:
                raise ConfigError(f"{name} must satisfy 1 <= lo <= hi, got {(lo, hi)}")


def corpus_config(source: dict) -> CorpusConfig:
    """The ``CorpusConfig`` of a synthetic data source; an unknown option is a ``UserError``."""
    fields = {k: (tuple(v) if isinstance(v, list) else v) for k, v in source.items() if k != "kind"}
    try:
        return CorpusConfig(**fields)
    except TypeError as exc:
        raise UserError(f"bad synthetic corpus option: {exc}") from None


# A document is a list of chunks; a chunk is (text, sorted concept indices).
Chunk = tuple[str, tuple[int, ...]]
Document = list[Chunk]


def make_concepts(n_concepts: int, *, entities_per_concept: int = 24, seed: int = 0) -> list[Concept]:
    """The first ``n_concepts`` concepts: real themes first, then numbered synthetic ones."""
    rng = np.random.default_rng([seed, 1])
    used: set[str] = set()

    def entity() -> str:
        while True:
            w = "".join(rng.choice(_SYLLABLES, size=int(rng.integers(2, 4))))
            if w not in used:
                used.add(w)
                return w

    concepts = []
    for c in range(n_concepts):
        if c < len(_THEMES):
            label, desc, nouns, verbs, adjs = _THEMES[c]
            nouns, verbs, adjs = tuple(nouns.split()), tuple(verbs.split()), tuple(adjs.split())
        else:  # beyond the themed set: invented vocabulary, still a complete card
            label, desc = f"concept_{c:03d}", f"Synthetic concept number {c}."
            nouns = tuple(entity() for _ in range(8))
            verbs = tuple(entity() + "s" for _ in range(3))
            adjs = tuple(entity() + "ic" for _ in range(3))
        ents = tuple(entity() for _ in range(entities_per_concept))
        attrs = tuple(str(rng.choice(adjs + nouns)) for _ in ents)
        concepts.append(Concept(label, desc, nouns, verbs, adjs, ents, attrs))
    return concepts


def _successors(n: int, rng: np.random.Generator) -> np.ndarray:
    """Sparse document-level Markov chain: each concept has two preferred successors."""
    return np.stack([rng.permutation(n)[:2] if n > 1 else np.zeros(2, int) for _ in range(n)])


def _sentence(c: Concept, rng: np.random.Generator, seen: list[str]) -> str:
    kind = rng.random()
    if kind < 0.4:  # grammar sentence
        n1, n2 = rng.choice(c.nouns, 2)
        return f"the {rng.choice(c.adjectives)} {n1} {rng.choice(c.verbs)} the {n2} ."
    if kind < 0.8:  # fact sentence: entity -> its attribute (memorisation)
        i = int(rng.integers(len(c.entities)))
        seen.append(c.entities[i])
        return f"{c.entities[i]} is {c.attributes[i]} ."
    if seen:  # in-context copy of an entity met earlier in this chunk
        e = seen[int(rng.integers(len(seen)))]
        return f"{rng.choice(_FILLER)} {e} {rng.choice(c.verbs)} {rng.choice(_FILLER)} {rng.choice(c.nouns)} ."
    return f"{rng.choice(_FILLER)} {rng.choice(c.nouns)} {rng.choice(c.verbs)} ."


def generate_documents(cfg: CorpusConfig) -> tuple[list[Concept], list[Document]]:
    """Deterministic in ``cfg``: same config, same concepts and documents."""
    concepts = make_concepts(cfg.n_concepts, entities_per_concept=cfg.entities_per_concept, seed=cfg.seed)
    rng = np.random.default_rng([cfg.seed, 2])
    succ = _successors(cfg.n_concepts, rng)
    docs: list[Document] = []
    for _ in range(cfg.n_docs):
        cur = int(rng.integers(cfg.n_concepts))
        doc: Document = []
        for _ in range(int(rng.integers(cfg.chunks_per_doc[0], cfg.chunks_per_doc[1] + 1))):
            labels = {cur}
            if cfg.n_concepts > 1 and rng.random() < cfg.multi_label_prob:
                labels.add(int(succ[cur, 1]))
            seen: list[str] = []
            n_sents = int(rng.integers(cfg.sentences_per_chunk[0], cfg.sentences_per_chunk[1] + 1))
            sents = [_sentence(concepts[int(rng.choice(sorted(labels)))], rng, seen) for _ in range(n_sents)]
            doc.append((" ".join(sents), tuple(sorted(labels))))
            cur = int(succ[cur, 0] if rng.random() < 0.7 else rng.integers(cfg.n_concepts))
        docs.append(doc)
    return concepts, docs


def write_concepts(concepts: list[Concept] | list[dict], path: str | os.PathLike) -> Path:
    """RUN_DIR/concepts.json: the list of ``{label, description, words}`` cards (atomic)."""
    cards = [c.card() if isinstance(c, Concept) else dict(c) for c in concepts]
    return atomic_write_text(Path(path), json.dumps(cards, indent=1))


def read_concepts(path: str | os.PathLike) -> list[dict]:
    """concepts.json read back and checked: a list of cards with label, description and words."""
    try:
        cards = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(cards, list):
        raise UserError(f"{path}: expected a JSON list of concept cards, got {type(cards).__name__}")
    for i, card in enumerate(cards):
        missing = {"label", "description", "words"} - set(card if isinstance(card, dict) else {})
        if missing:
            raise UserError(f"{path}: concept card {i} lacks {sorted(missing)}")
    return cards
