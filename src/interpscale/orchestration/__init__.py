"""IsoFLOP planning, training, launching, results (data preparation is ``interpscale.data``).

>>> from interpscale.orchestration import plan, Sweep
>>> p = plan("demo-quick")
>>> Sweep(p.runs, "runs/demo-quick").launch()
"""

from interpscale.orchestration import adaptive, planner
from interpscale.orchestration.evaluate import (RESULT_COLUMNS, collect, evaluate_run, merge_results,
                                               read_results, write_results)
from interpscale.orchestration.launch import Sweep, TrainJob
from interpscale.orchestration.planner import Plan, list_presets, load_config, load_preset
from interpscale.orchestration.spec import RunSpec
from interpscale.orchestration.trainer import Trainer, train_run


def plan(preset=None, **options) -> Plan:
    """Plan a preset (:func:`interpscale.orchestration.planner.plan`, same arguments); a preset
    without ``[plan] sizes`` (and no ``sizes=``) plans the adaptive sweep's first grid
    (:func:`interpscale.orchestration.adaptive.first_grid`), which the planner itself does
    not know about (the planner sits below the adaptive sweep)."""
    tree = load_config(preset) if preset is not None else None
    if tree is not None and options.get("sizes") is None and not tree.plan.sizes:
        return adaptive.first_grid(tree, families=options.get("families"))
    return planner.plan(tree, **options)


__all__ = [
    "evaluate_run", "Sweep", "TrainJob", "Plan", "list_presets", "load_config", "load_preset", "plan", "RESULT_COLUMNS", "collect",
    "merge_results", "read_results", "write_results", "RunSpec", "Trainer", "train_run",
]
