"""Data (bundled concept corpus, loaders, tokenizer), IsoFLOP planning, training, launching, results.

>>> from interpscale.orchestration import plan, Sweep
>>> p = plan("demo-quick")
>>> Sweep(p.runs, "runs/demo-quick").launch()
"""

from interpscale.orchestration.corpus import Concept, CorpusConfig, generate_documents, make_concepts
from interpscale.orchestration.evaluate import evaluate_run
from interpscale.orchestration.launch import Sweep, TrainJob
from interpscale.orchestration.loaders import PreparedData, open_data, prepare_data
from interpscale.orchestration.prepare import prepare
from interpscale.orchestration.planner import Plan, list_presets, load_preset, plan
from interpscale.orchestration.results import RESULT_COLUMNS, collect, merge_results, read_results, write_results
from interpscale.orchestration.spec import RunSpec
from interpscale.orchestration.trainer import Trainer, train_run

__all__ = [
    "Concept", "CorpusConfig", "generate_documents", "make_concepts", "evaluate_run", "Sweep", "TrainJob",
    "PreparedData", "open_data", "prepare", "prepare_data", "Plan", "list_presets", "load_preset", "plan", "RESULT_COLUMNS", "collect",
    "merge_results", "read_results", "write_results", "RunSpec", "Trainer", "train_run",
]
