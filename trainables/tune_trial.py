"""The Ray Tune function trainable: one trial = `train.fit` of one `TrialConfig`.

Checkpoints live at `<experiment>/trials/<trial_id>/checkpoint.pt` (a local path or a URI),
keyed by the config hash rather than by Ray's trial name, and are written atomically after
every epoch. Whatever started the trial (a first run, Tune's retry after a crash, or a later
`sweeper run` of the same sweep), it resumes from the newest epoch on storage and never
redoes a finished trial. A small `trial.json` next to it says how far the trial got.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from trainables import checkpoint
from trainables.attestations import attest_training
from trainables.data_cache import data_inputs
from trainables.distributed_fit import fit_data_parallel
from trainables.kernel import fileio
from trainables.kernel.config import TrialConfig
from trainables.kernel.trial_hooks import FAULT_ENV
from trainables.kernel.trial_status import experiment_relative, trial_dir, write_status
from trainables.train import fit
from trainables.train_state import TrainState

# The column of Tune's progress.csv and result.json naming sweeper's trial (Tune fills its
# own `trial_id` column with Ray's id).
SWEEPER_TRIAL_ID = "sweeper_trial_id"


def _maybe_fail(fault: str, cfg: TrialConfig, epoch: int) -> None:
    if fault and fault == f"{cfg.trial_id}:{epoch}":
        raise RuntimeError(f"injected failure after epoch {epoch} ({FAULT_ENV})")


def run_trial(config: dict[str, Any], experiment_root: str) -> None:
    """Tune entry point. `config["trial"]` is the resolved TrialConfig as a dict."""
    import ray
    from ray import tune

    cfg = TrialConfig.from_dict(config["trial"])
    if not fileio.is_uri(experiment_root):  # as the driver: no write follows a planted link
        fileio.confine(os.path.dirname(os.path.abspath(fileio.local_path(experiment_root))))
    directory = trial_dir(experiment_root, cfg.trial_id)
    ckpt = fileio.join(directory, checkpoint.CHECKPOINT_NAME)
    cpus = int(config.get("cpus_per_trial") or 1)
    torch.set_num_threads(max(1, cpus))
    resume = checkpoint.load(ckpt) if fileio.exists(ckpt) else None

    node = ray.get_runtime_context().get_node_id()

    def on_epoch(metrics: dict[str, Any], state: TrainState) -> None:
        write_status(directory, cfg, "running", state.epoch, metrics, node=node)
        tune.report({**metrics, SWEEPER_TRIAL_ID: cfg.trial_id})
        _maybe_fail(config.get("fault", ""), cfg, state.epoch)

    init, parent = None, None
    if cfg.init_from is not None:
        parent = fileio.join(trial_dir(experiment_root, cfg.init_from), checkpoint.CHECKPOINT_NAME)
    if resume is None and parent is not None:  # a fine-tune trial's first start
        init = checkpoint.load(parent)["model"]
    if cfg.data_parallel:
        state = fit_data_parallel(cfg, cfg.data_parallel, ckpt, on_epoch, resume, init)
    else:
        state = fit(
            cfg, checkpoint_path=ckpt, on_epoch=on_epoch, resume_from=resume, init_weights=init
        )
    last = state.history[-1] if state.history else {}
    # relative to the experiment: a copied or synced experiment's trial.json stays true
    where = experiment_relative(ckpt, experiment_root)
    data = data_inputs(cfg.dataset, cfg.data_dir)
    attest_training(directory, cfg, ckpt, parent, data=data)  # before "finished", always
    write_status(directory, cfg, "finished", state.epoch, last, checkpoint=where, node=node)
    if resume is not None and int(resume["epoch"]) >= cfg.epochs:
        tune.report({**last, SWEEPER_TRIAL_ID: cfg.trial_id})  # Tune wants at least one result
