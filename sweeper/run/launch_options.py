"""How a run is launched on Ray: the cluster, how many trials at once, retries, GPUs, how
long to wait for an autoscaler, which trackers besides TensorBoard get the curves, and how
many trials a space may describe. Declared once (`setting`): the commands' options and their
--help are read from here. No Ray imported: the command line reads this at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from sweeper.plan.grid import MAX_TRIALS
from sweeper.plan.setting_fields import AtLeast, NotBelow, setting


@dataclass(frozen=True)
class LaunchOptions:
    address: str | None = setting(
        None, "Ray cluster: auto, host:port or ray://host:port (default: a local Ray).")
    max_concurrent: int | None = setting(None, "At most this many trials at once.", AtLeast(1))
    max_failures: int = setting(
        2, "Retries per trial (each resumes from its checkpoint).", AtLeast(0))
    cpu_only: bool = setting(False, "Ask for no GPU (train and certify on CPUs).")
    wait_for_nodes: float = setting(
        30.0, "Minutes to wait for an autoscaling cluster to add nodes that can host a trial.",
        NotBelow(0))
    mlflow: str | None = setting(
        None, "Also log every trial's per-epoch metrics to MLflow at this tracking URI "
        "(file:/path or http://host:5000; needs the mlflow package).")
    max_trials: int = setting(
        MAX_TRIALS, "Refuse a space whose grids describe more trials than this (counted from "
        "its axes, before expanding them).", AtLeast(1))
    wandb: str | None = setting(
        None, "Also log every trial's per-epoch metrics to this Weights & Biases project "
        "(needs the wandb package and a login, or WANDB_MODE=offline).")
