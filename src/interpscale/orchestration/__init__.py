"""IsoFLOP planning, training, launching, results (data preparation is ``interpscale.data``).

>>> from interpscale.orchestration import Preset, Sweep, plan
>>> p = plan(Preset.load("demo-quick", families=["ar"]))
>>> Sweep.from_plan(p, "runs/demo-quick").launch()
"""

from interpscale.orchestration import adaptive, planner
from interpscale.orchestration.config import Preset, list_presets, load_config, load_preset
from interpscale.orchestration.evaluate import (RESULT_COLUMNS, collect, evaluate_run, merge_results,
                                               read_results, write_results)
from interpscale.orchestration.launch import Sweep, TrainJob
from interpscale.orchestration.planner import Plan, PlanOptions
from interpscale.orchestration.spec import RunSpec
from interpscale.orchestration.trainer import Trainer, train_run


def plan(preset=None, options: PlanOptions | None = None, **keywords) -> Plan:
    """Plan a preset (:func:`interpscale.orchestration.planner.plan`, same arguments); a preset
    without ``[plan] sizes`` plans the adaptive sweep's first grid
    (:func:`interpscale.orchestration.adaptive.first_grid`), which the planner itself does
    not know about (the planner sits below the adaptive sweep)."""
    tree, options = planner.split_keywords(preset, options, keywords)
    if preset is not None and not tree.plan.sizes:
        return adaptive.first_grid(tree)
    return planner.plan(tree, options)


__all__ = [
    "evaluate_run", "Sweep", "TrainJob", "Plan", "PlanOptions", "Preset", "list_presets", "load_config",
    "load_preset", "plan", "RESULT_COLUMNS", "collect", "merge_results", "read_results", "write_results", "RunSpec",
    "Trainer", "train_run",
]
