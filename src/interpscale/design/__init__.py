"""Design a sweep before spending its compute (issue 44; docs/design.md): the chance that a planned
IsoFLOP grid answers its question, by simulation, and the cheapest grid that would.

A design is three things and one loop:

- a **noise model** (``NoiseModel``): per-run log-loss noise about each slice's curve and a shared
  shock per (family, slice), both with intervals, read off a pilot results table
  (``noise_from_pilot``) or stated;
- a **truth** to plant (``Truth``): the base family's joint law (Eq. 27, fitted to the pilot or
  stated) and, for the multiplier question, the variant made from it with a planted k(C) =
  k0 (C / pivot)^g as ``scaling.multiplier.simulate_pair`` does (constant k: g = 0; growing: g > 0);
- a **grid** (``Grid``): the runs ``plan`` would train for a preset (its sizes, slices, pricing,
  plugin and ``hf:`` families included) — the design never places a point ``plan`` would not;
- ``simulate``: tables of that grid drawn from the truth with that noise, each analysed by the
  same fit functions the sweep's own analysis runs (``fit_multiplier`` with its method choice,
  ``fit_isoflop``, ``fit_chinchilla``), tallied into verdict probabilities and interval widths.

``search`` probes candidate grids (number, spacing and range of slices, sizes per slice) in order of
compute, bisects to the cheapest that meets a target and ``write_preset`` writes it as a TOML preset
that ``plan`` and ``sweep launch`` accept unchanged; when no grid the preset sizes meets it, the larger
grid with sizes about the planted optimum that would (``larger_grid``) is named. Simulations run in
worker processes.
"""

from interpscale.design.achieved import (AchievedPower, PowerTest, achieved_power, extended_grid,
                                         grid_from_results, larger_grid, reaches, with_powers)
from interpscale.design.recommend import (Design, candidate_grids, render, search, slices_of, write_outputs,
                                       write_preset)
from interpscale.design.simulation import (DEFAULT_LAW, DEFAULT_SIMS, DEMO_WORLD, DESIGN_BOOT, QUESTIONS, Grid,
                                           GridPower, NoiseModel, SimJob, Truth, analyse_once, assess,
                                           grid_from_plan, joint_starts, meets, nested, noise_from_pilot, run_many,
                                           scenario_jobs, scenario_seeds, simulate, truth_for_grid,
                                           truth_from_pilot)

__all__ = ["AchievedPower", "DEFAULT_LAW", "DEFAULT_SIMS", "DEMO_WORLD", "DESIGN_BOOT", "Design", "Grid", "GridPower",
           "NoiseModel", "PowerTest", "QUESTIONS", "SimJob", "Truth", "achieved_power", "analyse_once", "assess",
           "candidate_grids", "extended_grid", "grid_from_plan", "grid_from_results", "joint_starts", "larger_grid",
           "meets", "nested", "noise_from_pilot", "reaches", "render", "run_many", "scenario_jobs", "scenario_seeds",
           "search", "simulate", "slices_of", "truth_for_grid", "truth_from_pilot", "with_powers", "write_outputs",
           "write_preset"]
