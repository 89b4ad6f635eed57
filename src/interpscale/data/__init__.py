"""One data path: sources -> tokenizer -> prepare -> memory-mapped shards -> ``open_data``, plus
the bundled synthetic concept corpus (``docs/data.md``).  A layer below ``orchestration``: it
imports only ``models.types`` and the bottom modules.
"""

from interpscale.data.corpus import (Concept, CorpusConfig, corpus_config, generate_documents, make_concepts,
                                     read_concepts, write_concepts)
from interpscale.data.loaders import (DATA_KINDS, DataSummary, PreparedData, Split, describe, open_data,
                                      prepare_data, resolve_data_paths)
from interpscale.data.prepare import MODES, is_validation, make_request, prepare
from interpscale.data.sources import iter_documents
from interpscale.data.tokenizer import load_tokenizer, special_ids, train_tokenizer

__all__ = [
    "Concept", "CorpusConfig", "corpus_config", "generate_documents", "make_concepts", "read_concepts",
    "write_concepts", "DATA_KINDS", "DataSummary", "PreparedData", "describe", "open_data", "prepare_data",
    "resolve_data_paths", "MODES", "prepare", "make_request", "Split", "iter_documents", "is_validation",
    "load_tokenizer", "special_ids", "train_tokenizer",
]
