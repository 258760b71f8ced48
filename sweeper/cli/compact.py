"""`sweeper compact`: fold every complete model's shards into one file and refresh the caches."""

from __future__ import annotations

from sweeper.cli.common import LatestExperiment, Storage, app, fail, resolve_experiment
from sweeper.cli.display import echo
from sweeper.results.storage import DEFAULT_STORAGE
from trainables.kernel.errors import ProblemsError


@app.command()
def compact(storage: Storage = DEFAULT_STORAGE, experiment: LatestExperiment = None) -> None:
    """Fold each complete model's shards into one file and refresh the results cache.

    Reads then open few files. `run grid`, `certify` and `empirical` do this as they go;
    this is for experiments written before (or interrupted before they could). Holds the
    experiment like a run does; refuses to start while a symlink is inside it (it would read
    and write through it)."""
    from sweeper.results.inventory import sign_if_keyed
    from sweeper.results.lease import Lease
    from sweeper.run.certify_stage import CERTIFY
    from sweeper.run.compaction import compact_all
    from sweeper.run.empirical_stage import EMPIRICAL

    exp = resolve_experiment(storage, experiment)
    try:
        with Lease(exp, "sweeper compact"):
            if links := exp.link_problems():  # never read nor written through: nothing done
                raise ProblemsError(links)
            lines = compact_all(exp, [CERTIFY, EMPIRICAL])
            sign_if_keyed(exp)
    except ProblemsError as e:
        fail(e.problems)
    except RuntimeError as e:  # a model that cannot be compacted: its shards are kept
        fail([f"{e}: its shards are kept; re-run `sweeper certify` or `sweeper empirical`"])
    for line in lines:
        echo(line)
