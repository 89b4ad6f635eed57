"""IsoFLOP planning, training, launching, results (data preparation is ``interpscale.data``).

>>> from interpscale.orchestration import plan, Sweep
>>> p = plan("demo-quick")
>>> Sweep(p.runs, "runs/demo-quick").launch()
"""

from interpscale.orchestration.evaluate import evaluate_run
from interpscale.orchestration.launch import Sweep, TrainJob
from interpscale.orchestration.planner import Plan, list_presets, load_preset, plan
from interpscale.orchestration.results import RESULT_COLUMNS, collect, merge_results, read_results, write_results
from interpscale.orchestration.spec import RunSpec
from interpscale.orchestration.trainer import Trainer, train_run

__all__ = [
    "evaluate_run", "Sweep", "TrainJob", "Plan", "list_presets", "load_preset", "plan", "RESULT_COLUMNS", "collect",
    "merge_results", "read_results", "write_results", "RunSpec", "Trainer", "train_run",
]
