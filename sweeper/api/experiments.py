"""Which experiment a read takes: the one named (`existing_experiment`, listing those there when
it is missing) or the most recently written one under a storage (`latest_experiment`)."""

from __future__ import annotations

from sweeper.results.storage import Experiment, check_storage, experiments, plain_name_problem
from trainables.kernel import fileio
from trainables.kernel.errors import ProblemsError


def _experiment_names(storage: str) -> list[str]:
    check_storage(storage)
    return [n for n in experiments(storage) if plain_name_problem(n, "") is None]


def latest_experiment(storage: str) -> Experiment:
    """The most recently written experiment under `storage`; ProblemsError if there is none
    (saying so when `storage` is itself an experiment's folder)."""
    names = _experiment_names(storage)
    if names:
        return Experiment(storage, names[-1])
    if fileio.exists(fileio.join(storage, "sweep.json")):
        parent, _, name = storage.rstrip("/").rpartition("/")
        raise ProblemsError(
            [
                f"--storage {storage} is an experiment, not a storage of experiments: pass "
                f"--storage {parent or '.'} --experiment {name}"
            ]
        )
    raise ProblemsError(
        [f"no experiments under --storage {storage}: run `sweeper run grid <space>` first"]
    )


def existing_experiment(storage: str, name: str) -> Experiment:
    """Experiment `name` under `storage` for reading it; ProblemsError listing the experiments
    there if it does not exist."""
    exp = Experiment(storage, name)
    if fileio.exists(exp.root):
        return exp
    names = _experiment_names(storage)
    there = f"the experiments there: {', '.join(names[-12:])}" if names else "there are none"
    raise ProblemsError([f"no experiment {name!r} under --storage {storage} ({there})"])
