"""Planning a run before Ray starts: load and validate the space, expand and slice the grid,
check the data, the address and the experiment, and read how far each trial got.

Every problem found is collected and raised together as one `PlanError`; nothing is written.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from pathlib import Path
from typing import Any

from sweeper.plan.grid import MAX_TRIALS, expand, parse_only, select
from sweeper.plan.param_space import ParamSpace, load
from sweeper.plan.spaces import SpecError
from sweeper.plan.spec import SweepSpec
from sweeper.results.credentials import (
    credentials_problem,
    data_credentials_problem,
    redact,
    without_credentials,
)
from sweeper.results.storage import (
    STAGES,
    Experiment,
    StorageError,
    outside_problem,
    plain_name_problem,
)
from sweeper.results.sweep_file import read_sweep, sweep_trials
from trainables.kernel import fileio
from trainables.kernel.config import ENVIRONMENT_FIELDS, TrialConfig
from trainables.kernel.errors import ConfigError, ProblemsError
from trainables.kernel.final_points import final_value
from trainables.kernel.trial_status import read_status


class PlanError(ProblemsError):
    """Everything wrong with a command's input."""


@dataclasses.dataclass(frozen=True)
class Plan:
    spec: SweepSpec
    exp: Experiment
    trials: list[TrialConfig]  # the selected slice
    all_trials: list[TrialConfig]  # the whole sweep


@dataclasses.dataclass(frozen=True)
class PlanRequest:
    """What the user asked for on the command line (or of `sweeper.Sweep`). `space`: a
    shipped space's name or a YAML file's path, or a mapping (`Sweep(param_space=...)`)."""

    space: str | ParamSpace
    storage: str
    experiment: str | None = None
    smoke: bool = False
    only: str | None = None
    data_dir: str | None = None
    download: bool = False
    certify_overrides: dict | None = None
    search_overrides: dict | None = None  # fields of `SearchSpec` (--search, --tolerance, ...)
    address: str | None = None
    restarting: bool = False
    dry_run: bool = False  # no data set is read, unless --data-dir is given (then checked)
    max_trials: int = MAX_TRIALS  # --max-trials: more trials than this are refused unexpanded


def _final_override(overrides: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """`overrides` with `final` as a space says it (Python's `{"final": "all"}` or a dict)
    made FinalPoints; what is wrong with it added to `problems`."""
    if "final" in overrides:
        final = final_value(overrides["final"])
        problems += [f"certify option: final {final}"] if isinstance(final, str) else []
        overrides["final"] = None if isinstance(final, str) else final
    return overrides


def make_plan(req: PlanRequest) -> Plan:
    """Validate everything that can be checked without Ray; raise PlanError with every problem.
    Credentials in --data-dir are refused first, alone with the address's problems: no later
    check may echo the value."""
    problems = address_problems(req.address)
    if secret := data_credentials_problem("--data-dir", req.data_dir):
        raise PlanError([secret, *problems])
    try:
        spec = load(req.space, req.max_trials)
    except SpecError as e:
        raise PlanError(e.problems + problems) from None
    spec = spec.smoked() if req.smoke else spec
    if req.certify_overrides:
        overrides = _final_override(dict(req.certify_overrides), problems)
        certify = dataclasses.replace(spec.certify, **overrides)
        problems += [f"certify option: {p}" for p in certify.problems()]
        problems += [_idle_flag(k, req.space) for k in certify.idle(req.certify_overrides)]
        spec = dataclasses.replace(spec, certify=certify)
    if req.search_overrides:
        spec, found = _searched(spec, req.search_overrides, req.space)
        problems += found
    data_dir = _data_dir(req.data_dir)
    try:
        all_trials = expand(spec, {"data_dir": data_dir, "download": req.download})
    except ConfigError as e:
        raise PlanError(e.problems + problems) from None
    selection, only_problems = parse_only(req.only)
    trials, select_problems = select(all_trials, selection) if not only_problems else ([], [])
    problems += only_problems + select_problems
    # A dry run reads no data unless it is given a data dir: then it checks it as a run would.
    if not req.dry_run or data_dir is not None:
        problems += data_problems(all_trials, data_dir, req.download)
    try:
        exp = experiment_of(req, spec)
    except StorageError as e:  # nothing past this point may touch a path outside the storage
        raise PlanError(problems + e.problems) from None
    if links := exp.link_problems():  # no read below follows one (trial.json): all named at once
        raise PlanError(problems + links)
    problems += [] if req.restarting else sweep_conflict(exp, all_trials, spec.name)
    problems += stage_problems(exp, trials) + parallel_problems(spec, all_trials)
    if problems:
        raise PlanError(problems)
    return Plan(spec, exp, trials, all_trials)


def _searched(
    spec: SweepSpec, overrides: dict, space: str | ParamSpace
) -> tuple[SweepSpec, list[str]]:
    """The spec with the command line's search settings, and their problems (an envelope
    search's setting given where the search is full; fine-tune stages under the search)."""
    from sweeper.plan.spaces import SEARCH_STAGES

    names = {f.name for f in dataclasses.fields(spec.search)}
    problems = [
        f"search: unknown setting {k!r} (valid: {', '.join(sorted(names))})"
        for k in overrides
        if k not in names
    ]
    search = dataclasses.replace(spec.search, **{k: v for k, v in overrides.items() if k in names})
    problems += [f"search option: {p}" for p in search.problems()]
    problems += [
        f"--{k} is a setting of --search envelope, and {space} trains every grid point "
        f"(search full): add --search envelope, or drop --{k}"
        for k in search.idle(overrides)
    ]
    if search.active and not spec.search.active and any(g.parent for g in spec.grids):
        problems.append(SEARCH_STAGES.replace("search: envelope", "--search envelope"))
    return dataclasses.replace(spec, search=search), problems


def _idle_flag(name: str, space: str | ParamSpace) -> str:
    """--pilots (or --radii, --delta) given where strategy full certifies: it would do nothing."""
    return (
        f"--{name} is a setting of --strategy envelope, and {space} certifies with strategy "
        f"full: add --strategy envelope, or drop --{name}"
    )


def _data_dir(given: str | None) -> str | None:
    """The data directory every node reads: an absolute local path, or a data URI as given
    (s3://, gs://: each node fetches it into its cache, `trainables.data_cache`)."""
    if not given:
        return None
    return given if fileio.is_uri(given) else str(Path(given).expanduser().absolute())


def experiment_of(req: PlanRequest, spec: SweepSpec) -> Experiment:
    """The experiment the request names (by default the space's name); StorageError if that
    name would not stay one plain directory inside the storage."""
    if req.experiment is None:
        problem = plain_name_problem(spec.name, "the space name (the default --experiment)")
        if problem:
            raise StorageError([f"{problem}: pass --experiment NAME"])
    return Experiment(req.storage, spec.name if req.experiment is None else req.experiment)


def parallel_problems(spec: SweepSpec, trials: list[TrialConfig]) -> list[str]:
    """A data-parallel trial runs one process per GPU: it must ask for that many GPUs."""
    k = max((t.data_parallel or 1 for t in trials), default=1)
    if k > 1 and 0 < spec.resources.gpu < k:
        return [
            f"trials with data_parallel={k} need resources.gpu >= {k} (got {spec.resources.gpu:g})"
        ]
    return []


def stage_problems(exp: Experiment, trials: list[TrialConfig]) -> list[str]:
    """A selected fine-tune trial needs its parent selected too, or finished already."""
    selected = {t.trial_id for t in trials}
    orphans = sorted(
        {t.init_from for t in trials if t.init_from and t.init_from not in selected}
        - {
            p
            for p in {t.init_from for t in trials}
            if p and is_finished(read_status(exp.trial_dir(p)), None)
        }
    )
    return [
        f"--only selects fine-tune trials of {p}, which is neither selected nor finished: "
        "widen --only to include it"
        for p in orphans
    ]


def needed_data(trials: list[TrialConfig]) -> tuple[list[str], list[TrialConfig]]:
    """(data sets to read from a data directory, trials with pseudo-labelled data files)."""
    datasets = sorted({t.dataset for t in trials} - {"digits"})  # digits ships with scikit-learn
    return datasets, [t for t in trials if t.pseudo_data is not None]


def data_problems(trials: list[TrialConfig], data_dir: str | None, download: bool) -> list[str]:
    datasets, pseudo = needed_data(trials)
    if not datasets and not pseudo:
        return []
    from trainables.datasets import data_problem  # imports torch: only when a data dir matters
    from trainables.pseudo import pseudo_problems

    problems = [p for d in datasets if (p := data_problem(d, data_dir, download))]
    return problems + pseudo_problems(pseudo)


def address_problems(address: str | None) -> list[str]:
    """Credentials in `address` (refused, shown redacted), else reachability of a
    `host:port` or `ray://host:port` address (checked before ray.init)."""
    if address in (None, "auto", "local"):
        return []
    if problem := address_credentials_problem(address):
        return [problem]
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return [f"--address {redact(address)!r} is not host:port, ray://host:port or auto"]
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
    except OSError as e:
        return [
            f"cannot reach the Ray cluster at --address {redact(address)} ({e.strerror or e}): "
            "start it (`ray up cluster.yaml` or `ray start --head`) or omit --address for a "
            "local Ray"
        ]
    return []


def address_credentials_problem(address: str | None, flag: str = "--address") -> str | None:
    """`ray://user:pass@host:10001` (or a secret query parameter) given as `flag`: Ray takes
    no credentials in an address; refused, the address redacted."""
    if not address:
        return None
    fix = (
        f"give {without_credentials(address)}; a cluster with token authentication reads its "
        "token from the environment (RAY_AUTH_MODE=token and RAY_AUTH_TOKEN or "
        "RAY_AUTH_TOKEN_PATH)"
    )
    return credentials_problem(flag, address, "Ray takes none there", fix, "address")


def sweep_conflict(exp: Experiment, trials: list[TrialConfig], name: str = "") -> list[str]:
    """An existing experiment of the same name must hold the same sweep; if not, the message
    names what differs and the likely fix first (`--restart` last). `name`: the space's."""
    try:
        existing = read_sweep(exp)
        old = [] if existing is None else sweep_trials(existing)
    except (OSError, ValueError, KeyError, TypeError) as e:  # ValueError: bad JSON or ConfigError
        return [
            f"cannot read {exp.sweep_json} ({type(e).__name__}: {e}): "
            "pass --experiment NEW, or --restart"
        ]
    if not old or {t.trial_id for t in old} == {t.trial_id for t in trials}:
        return []  # none yet, or only imported results
    was = str(((existing or {}).get("space") or {}).get("name") or "")
    fixes = [f"{fix} to continue it" for fix in _smoke_fix(was, name)]
    fixes += [
        "pass --experiment NEW for a new experiment",
        "--restart to start this one over (the old one is kept aside)",
    ]
    return [
        f"experiment {exp.name!r} at {exp.root} holds a different sweep "
        f"({sweep_difference(old, trials)}): " + "; or ".join(fixes)
    ]


def _smoke_fix(was: str, name: str) -> list[str]:
    """`--smoke` when the experiment's sweep was the smoke version of this space (or the
    reverse): the usual cause of a conflict."""
    if name and was == f"{name}-smoke":
        return ["it was run with --smoke: add --smoke"]
    if was and name == f"{was}-smoke":
        return ["it was run without --smoke: drop --smoke"]
    return []


def sweep_difference(old: list[TrialConfig], new: list[TrialConfig]) -> str:
    """What differs between two sweeps' trials: settings whose values differ (e.g. "epochs 1
    there, 30 here"), else how many trials only one of them has."""
    there, here = ([t.to_dict() for t in ts] for ts in (old, new))
    parts = []
    for key in sorted(set().union(*there, *here) - set(ENVIRONMENT_FIELDS)):
        a, b = (sorted({str(d.get(key)) for d in ds}) for ds in (there, here))
        if a != b:
            parts.append(f"{key} {', '.join(a[:4])} there, {', '.join(b[:4])} here")
    if parts:
        return "; ".join(parts[:5]) + (
            f"; and {len(parts) - 5} more settings" if len(parts) > 5 else ""
        )
    ids_old, ids_new = {t.trial_id for t in old}, {t.trial_id for t in new}
    return (
        f"{len(ids_old - ids_new)} of its {len(ids_old)} trials are not in this sweep, "
        f"{len(ids_new - ids_old)} of this sweep's {len(ids_new)} not in it"
    )


def move_aside(exp: Experiment) -> Path | None:
    """Move an experiment out of the way (never delete it): <name>.old-<time>."""
    if not fileio.exists(exp.root):
        return None
    if fileio.is_uri(exp.root):
        raise PlanError(
            [f"--restart cannot move {exp.root} on remote storage: pass a new --experiment instead"]
        )
    src = fileio.local_path(exp.root)
    outside = outside_problem(exp.base, exp.root)  # never the storage root, nor past it
    if outside:
        raise PlanError([f"--restart moved nothing: {outside}"])
    dst = src.with_name(f"{src.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
    src.rename(dst)
    return dst


def retire_trials(exp: Experiment, trials: list[TrialConfig]) -> str | None:
    """`--retrain`: move each trial's directory (checkpoint, trial.json) and its results of
    every stage, and the stages' caches (they hold those results), to
    `<experiment>/retired/<time>/` with the same layout; nothing is deleted. Returns where
    they went (None: nothing to move). Local storage only."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dst = exp.retired_dir(stamp)
    moves = [(exp.trial_dir(t.trial_id), ("trials", t.trial_id)) for t in trials]
    moves += [
        (fileio.join(exp.stage_dir(stage), t.trial_id), (stage, t.trial_id))
        for stage in STAGES
        for t in trials
    ]
    moves += [(exp.cache_path(stage), ("cache", f"{stage}.parquet")) for stage in STAGES]
    if fileio.is_uri(exp.root):
        raise PlanError(
            [
                f"--retrain cannot move files on remote storage ({exp.root}): move "
                "trials/<trial_id>/ and certify/<trial_id>/ aside yourself"
            ]
        )
    present = [(src, rel) for src, rel in moves if fileio.local_path(src).exists()]
    for src, rel in present:  # refuses a link planted below the storage (`retired -> /x`)
        fileio.move_confined(src, fileio.join(dst, *rel))
    return dst if present else None


def trial_states(exp: Experiment, trials: list[TrialConfig]) -> dict[str, dict | None]:
    """trial_id -> the trial's `trial.json` (None if it never started)."""
    return {t.trial_id: read_status(exp.trial_dir(t.trial_id)) for t in trials}


def is_finished(status: dict | None, cfg: TrialConfig | None) -> bool:
    """Finished training (all of cfg's epochs, when cfg is given)."""
    if not status or status["state"] != "finished":
        return False
    return cfg is None or status["epoch"] >= cfg.epochs
