"""The names a caller of `sweeper.Sweep` passes, receives or catches, from the stages that own
them, in one place: what a command line (`sweeper/cli/`) or a script imports beside `Sweep`
(as Ray Tune's `TuneConfig` and `RunConfig` beside its `Tuner`). Importing this imports
neither pandas, torch nor Ray."""

from __future__ import annotations

from sweeper.ingest.log_reader import DEFAULT_MAX_ROWS
from sweeper.plan.spec import CertifySpec, EmpiricalSpec, Resources, SearchSpec
from sweeper.plan.sweep_plan import Plan, PlanError, is_finished
from sweeper.results.credentials import data_credentials_problem, redact_args
from sweeper.results.status import ATTENTION, Status, TrialRow
from sweeper.results.storage import DEFAULT_STORAGE, Experiment
from sweeper.results.summary import Summary
from sweeper.run.driving import RayLost, Watchers
from sweeper.run.launch_options import LaunchOptions

__all__ = [
    "ATTENTION",  # the states `sweeper status` lists first, in this order
    "DEFAULT_MAX_ROWS",  # of a log `sweeper import` reads
    "DEFAULT_STORAGE",
    "CertifySpec",
    "EmpiricalSpec",
    "Experiment",
    "LaunchOptions",
    "Plan",
    "PlanError",
    "RayLost",
    "Resources",
    "SearchSpec",
    "Status",
    "Summary",
    "TrialRow",
    "Watchers",
    "data_credentials_problem",
    "is_finished",
    "redact_args",
]
