"""Concept annotation of a corpus (Steerling §4.2): chunks → tags → concept library →
annotator → the concept-labelled JSONL and ``concepts.json`` that ``data prepare
--concepts`` reads, every stage validated by the relevance judge (App. C). The directory
layout is in ``interpscale.concepts.store``; offline by default, an ``Endpoint`` puts the
LLM calls on an OpenAI-compatible server through ``interpscale.judges``.

>>> from interpscale.concepts import build, check
>>> build(["corpus/*.jsonl"], "concepts-out")                      # doctest: +SKIP
>>> check("concepts-out", ["truth.jsonl"])["mean_best_f1"]        # doctest: +SKIP
"""

from interpscale.concepts.annotate import Annotator, AnnotatorOptions, annotate_corpus, train_annotator
from interpscale.concepts.build import BuildOptions, Endpoint, annotator_stage, build, library_stage, make_judge
from interpscale.concepts.chunk import ChunkStats, chunk_corpus, chunk_text
from interpscale.concepts.library import Library, LibraryOptions, build_library
from interpscale.concepts.tag import offline_tags, tag_corpus
from interpscale.concepts.validate import best_match_f1, check, stage_headlines, validate, write_synthetic

__all__ = [
    "Annotator", "AnnotatorOptions", "annotate_corpus", "train_annotator", "BuildOptions", "Endpoint", "build",
    "library_stage", "annotator_stage", "make_judge", "best_match_f1", "check", "write_synthetic", "ChunkStats", "chunk_corpus", "chunk_text",
    "Library", "LibraryOptions", "build_library", "offline_tags", "stage_headlines", "tag_corpus", "validate",
]
