"""`sweeper compact`: fold every complete model's shards into one file and refresh the caches."""

from __future__ import annotations

from sweeper.api.sweep import DEFAULT_STORAGE, Sweep
from sweeper.cli.common import LatestExperiment, Storage, app, resolve_experiment
from sweeper.cli.display import echo


@app.command()
def compact(storage: Storage = DEFAULT_STORAGE, experiment: LatestExperiment = None) -> None:
    """Fold each complete model's shards into one file and refresh the results cache.

    Reads then open few files. `run grid`, `certify` and `empirical` do this as they go;
    this is for experiments written before (or interrupted before they could). Holds the
    experiment like a run does; refuses to start while a symlink is inside it (it would read
    and write through it)."""
    exp = resolve_experiment(storage, experiment)
    for line in Sweep(storage=exp.storage, experiment=exp.name).compact():
        echo(line)
