"""How a run is launched on Ray: the cluster, how many trials at once, retries (after errors
and after node losses, counted apart: `sweeper.run.retries`), GPUs, how long to wait for an
autoscaler, which trackers besides TensorBoard get the curves, and how many trials a space
may describe. Declared once (`setting`): the commands' options and their
--help are read from here; the loggers they give Tune, `trackers`. No Ray imported at the
module's level: the command line reads this at start-up.

Credentials in --address or --mlflow are refused as the options are made (`CredentialsError`,
before anything is written): Ray takes none in an address, Tune would keep the tracking URI
in its state (`tuner.pkl`), and the environment carries them instead."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sweeper.plan.grid import MAX_TRIALS
from sweeper.plan.sweep_plan import address_credentials_problem
from sweeper.results.credentials import credentials_problem, without_credentials
from trainables.kernel.errors import ProblemsError
from trainables.kernel.settings import AtLeast, NotBelow, setting

if TYPE_CHECKING:
    from sweeper.results.storage import Experiment


class CredentialsError(ProblemsError):
    """Credentials given in an option that would store or echo them; one line each."""


@dataclass(frozen=True)
class LaunchOptions:
    address: str | None = setting(
        None, "Ray cluster: auto, host:port or ray://host:port (default: a local Ray)."
    )
    max_concurrent: int | None = setting(None, "At most this many trials at once.", AtLeast(1))
    max_failures: int = setting(
        2,
        "Retries per trial after its errors (each resumes from its checkpoint); the loss of "
        "its node is counted apart (--node-losses).",
        AtLeast(0),
    )
    node_losses: int = setting(
        5,
        "Losses of its node (a preempted spot instance, a dead machine) a trial or a "
        "certification task survives, a trial resuming from its checkpoint on another node, a "
        "task running again; counted apart from the retries after errors, which take any "
        "further loss.",
        AtLeast(0),
    )
    task_retries: int = setting(
        2,
        "Retries of a certification task whose worker process died on a live node (an "
        "exception raised by its code is not retried).",
        AtLeast(0),
    )
    cpu_only: bool = setting(False, "Ask for no GPU (train and certify on CPUs).")
    wait_for_nodes: float = setting(
        30.0,
        "Minutes to wait for an autoscaling cluster to add nodes that can host a trial.",
        NotBelow(0),
    )
    mlflow: str | None = setting(
        None,
        "Also log every trial's per-epoch metrics to MLflow at this tracking URI "
        "(file:/path or http://host:5000; needs the mlflow package; a user and password go in "
        "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, never in the URI).",
    )
    max_trials: int = setting(
        MAX_TRIALS,
        "Refuse a space whose grids describe more trials than this (counted from "
        "its axes, before expanding them).",
        AtLeast(1),
    )
    wandb: str | None = setting(
        None,
        "Also log every trial's per-epoch metrics to this Weights & Biases project "
        "(needs the wandb package and a login, or WANDB_MODE=offline).",
    )

    def __post_init__(self) -> None:
        problems = [address_credentials_problem(self.address), mlflow_problem(self.mlflow)]
        if any(problems):
            raise CredentialsError([p for p in problems if p])


def mlflow_problem(uri: str | None) -> str | None:
    """Credentials in the --mlflow tracking URI (`http://user:pass@host:5000`, a secret
    parameter): Ray Tune pickles the URI into `tuner.pkl`. MLflow reads them from the
    environment of the process that logs, the driver (Tune's callbacks run there)."""
    if not uri:
        return None
    fix = (
        f"give {without_credentials(uri)} and set MLFLOW_TRACKING_USERNAME and "
        "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) in the environment of the "
        "sweeper command, which logs to MLflow"
    )
    return credentials_problem("--mlflow", uri, "they would be stored in Ray Tune's state", fix)


def trackers(exp: Experiment, options: LaunchOptions) -> list:
    """Ray Tune's own loggers of the per-epoch curves: TensorBoard always (event files beside
    each trial's progress.csv under `tune/`; tensorboardX imports torch into the driver, which
    a training run loads anyway to size its test sets), MLflow and W&B when asked."""
    from ray.tune.logger import TBXLoggerCallback

    out: list = [TBXLoggerCallback()]
    if options.mlflow:
        from ray.air.integrations.mlflow import MLflowLoggerCallback

        if options.mlflow.startswith("file:"):  # asked for by name: MLflow 3 wants an opt-in
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")

        out.append(
            MLflowLoggerCallback(
                tracking_uri=options.mlflow, experiment_name=exp.name, save_artifact=False
            )
        )
    if options.wandb:
        from ray.air.integrations.wandb import WandbLoggerCallback

        out.append(WandbLoggerCallback(project=options.wandb, group=exp.name))
    return out
