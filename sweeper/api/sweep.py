"""`sweeper.Sweep`: a sweep from Python, as the command line runs it.

    from sweeper import Sweep

    sweep = Sweep("digits", storage="results", smoke=True)
    sweep.plan().cost.hours          # what `sweeper run grid digits --smoke --dry-run` prices
    sweep.run()                      # train and certify every trial (a local Ray)
    sweep.envelope([0, 0.25, 0.5])   # the certified-accuracy envelope, a DataFrame
    Sweep(param_space={"fixed": {...}, "grids": [...]})  # a space file's keys, as a dict

Each method is one command's work (`plan`: `run grid --dry-run`, `run`: `run grid`,
`certify`, `attack`: `empirical`, `status`, `envelope`, `table`) and returns its data; bad
input is a `ProblemsError` (`PlanError` for a plan) listing every problem, progress is
logged (`logging`, logger `sweeper`) unless `Watchers` say otherwise. Torch and Ray are
imported only by the methods that run work."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sweeper.api import running, selection
from sweeper.api.envelope_view import envelope_read
from sweeper.api.pricing import CertifyPreview, PricedPlan, preview_certify, price_plan
from sweeper.api.running import Ran
from sweeper.api.space_arg import space_of, space_spec
from sweeper.plan.grid import MAX_TRIALS
from sweeper.plan.param_space import ParamSpace
from sweeper.plan.spec import EmpiricalSpec, SearchSpec
from sweeper.plan.sweep_plan import Plan, PlanError, PlanRequest, make_plan
from sweeper.results.storage import (
    DEFAULT_STORAGE,
    Experiment,
    check_storage,
    experiments,
    plain_name_problem,
)
from sweeper.run.driving import Watchers
from sweeper.run.launch_options import LaunchOptions
from sweeper.run.sweep_run import finished_trials
from trainables.kernel import fileio
from trainables.kernel.errors import ProblemsError

if TYPE_CHECKING:
    import pandas as pd

    from sweeper.results.certify_rows import Results
    from sweeper.results.status import Status
    from sweeper.results.summary import Summary
    from sweeper.results.verification import Verification

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Selected:
    """An experiment's rows as the read commands take them: `results` (every validated row,
    `invalid` files named), `frame` (the `--only` slice, sound models only), `unsound` (the
    data-dependent models left out awaiting their memory pass)."""

    exp: Experiment
    results: Results
    frame: pd.DataFrame
    unsound: int


@dataclass(frozen=True)
class StatusReport:
    """`sweeper status`: each trial's state (`status`, its `left_out` result files read) and
    the summary (throughput, ETAs, resource-hours)."""

    status: Status
    summary: Summary


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


def attack_plan(
    request: PlanRequest, overrides: dict[str, Any], problems: Sequence[str] = ()
) -> tuple[Plan, EmpiricalSpec]:
    """The plan and its `empirical` block with `overrides`; PlanError listing every problem
    (`problems` the caller found already, the space's, the options', the experiment's)."""
    try:
        plan = make_plan(request)
    except PlanError as e:
        raise PlanError([*problems, *e.problems]) from None
    spec = dataclasses.replace(plan.spec.empirical, **overrides)
    found = [*problems, *(f"empirical option: {p}" for p in spec.problems())]
    if found:
        raise PlanError(found)
    return plan, spec


class Sweep:
    """A space planned on a storage: `Sweep(space, storage=..., experiment=..., only=...,
    smoke=..., data_dir=...)`. `space`: a shipped space's name, a YAML file's path, or the
    space as a dict (or `param_space={...}`, as Ray Tune's: a space file's keys, optionally
    `name`; `plan.param_space`), read and checked as a file is; None to read an experiment
    only (then `experiment`, by default the latest one). Another type, or both a space and a
    param_space, is a `SpaceTypeError` (a `PlanError` and a `TypeError`)."""

    def __init__(
        self,
        space: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        *,
        param_space: Mapping[str, Any] | None = None,
        storage: str = DEFAULT_STORAGE,
        experiment: str | None = None,
        only: str | None = None,
        smoke: bool = False,
        data_dir: str | None = None,
        download: bool = False,
    ) -> None:
        self.space: str | ParamSpace | None = space_of(space, param_space)
        self.storage = storage
        self.experiment = experiment
        self.only = only
        self.smoke = smoke
        self.data_dir = data_dir
        self.download = download

    def request(self, **changes: Any) -> PlanRequest:
        """The `PlanRequest` of this sweep (`changes`: address, dry_run, certify_overrides, ...)."""
        if self.space is None:
            raise PlanError(["this Sweep names no space: Sweep(space) or Sweep(param_space={...})"])
        base = {"max_trials": MAX_TRIALS, **changes}
        return PlanRequest(
            space=self.space,
            storage=self.storage,
            experiment=self.experiment,
            smoke=self.smoke,
            only=self.only,
            data_dir=self.data_dir,
            download=self.download,
            **base,
        )

    # ------------------------------------------------------------------ planning
    def plan(
        self,
        options: LaunchOptions | None = None,
        *,
        restarting: bool = False,
        overrides: dict[str, Any] | None = None,
        search: str | dict[str, Any] | SearchSpec | None = None,
    ) -> PricedPlan:
        """The dry run: the plan with its trials, how far each got, and its cost (the numbers
        `sweeper run grid --dry-run` prints; under the envelope search also its expected
        cost). Reads no data set and starts no Ray. `overrides`: fields of `CertifySpec`
        changed (e.g. the strategy); `search`: as for `run`."""
        options = options or LaunchOptions()
        request = self._dry_request(options, overrides, restarting, search_overrides(search))
        return price_plan(make_plan(request), options.cpu_only)

    def certify_plan(
        self, options: LaunchOptions | None = None, *, overrides: dict[str, Any] | None = None
    ) -> CertifyPreview:
        """The dry run of `certify` (`sweeper certify --dry-run`): the finished trials, how far
        each is certified under the settings (with `overrides`), and the device-hours left.
        Reads no data set and starts no Ray."""
        options = options or LaunchOptions()
        request = self._dry_request(options, overrides)
        plan = make_plan(request)
        ready = finished_trials(plan, request.space)  # none: the real run's own message
        return preview_certify(plan, ready, options.cpu_only)

    def _dry_request(
        self,
        options: LaunchOptions,
        overrides: dict[str, Any] | None,
        restarting: bool = False,
        search: dict[str, Any] | None = None,
    ) -> PlanRequest:
        """The request of a dry run: no data read unless a data dir is given, no Ray."""
        return self.request(
            address=options.address,
            max_trials=options.max_trials,
            dry_run=True,
            restarting=restarting,
            certify_overrides=overrides,
            search_overrides=search,
        )

    # ------------------------------------------------------------------ running
    def run(
        self,
        address: str | None = None,
        *,
        options: LaunchOptions | None = None,
        retrain: bool = False,
        restart: bool = False,
        overrides: dict[str, Any] | None = None,
        search: str | dict[str, Any] | SearchSpec | None = None,
        watchers: Watchers | None = None,
    ) -> Ran:
        """Train every selected trial not yet trained on Ray Tune and certify each as it
        finishes (`sweeper run grid`); resumes what an earlier run left. `retrain`: the
        selected trials' files moved aside and trained again; `restart`: the experiment;
        `overrides`: fields of `CertifySpec` changed (e.g. `{"strategy": "envelope"}`);
        `search`: which grid points to train, "full" or "envelope" (or a `SearchSpec`, or a
        dict of its fields: `{"mode": "envelope", "tolerance": 0.005}`); default: the
        space's."""
        launch = _options(options, address)
        request = self.request(
            address=launch.address,
            max_trials=launch.max_trials,
            restarting=restart,
            certify_overrides=overrides,
            search_overrides=search_overrides(search),
        )
        return running.run_grid(request, launch, retrain, watchers or self._watchers())

    def certify(
        self,
        address: str | None = None,
        *,
        options: LaunchOptions | None = None,
        overrides: dict[str, Any] | None = None,
        watchers: Watchers | None = None,
    ) -> Ran:
        """Certify the finished trials (`sweeper certify`), with the space's certification
        settings changed by `overrides` (fields of `CertifySpec`)."""
        launch = _options(options, address)
        request = self.request(
            address=launch.address, max_trials=launch.max_trials, certify_overrides=overrides
        )
        return running.certify_finished(request, launch, watchers or self._watchers())

    def attack(
        self,
        address: str | None = None,
        *,
        options: LaunchOptions | None = None,
        overrides: dict[str, Any] | None = None,
        watchers: Watchers | None = None,
    ) -> Ran:
        """SmoothAdv-PGD, then PREDICT, on every finished model (`sweeper empirical`), with
        the space's `empirical` block changed by `overrides` (fields of `EmpiricalSpec`)."""
        launch = _options(options, address)
        request = self.request(address=launch.address, max_trials=launch.max_trials)
        plan, spec = attack_plan(request, overrides or {})
        return running.attack_finished(
            request.space, plan, spec, launch, watchers or self._watchers()
        )

    def _watchers(self) -> Watchers:
        """Nobody watching; the lease names this Sweep with its `--only` slice (so `sweeper
        status` from elsewhere counts the slice while it runs, as for the command line)."""
        only = f" --only {self.only}" if self.only else ""
        return Watchers(holder=f"sweeper.Sweep (Python){only}")

    # ------------------------------------------------------------------ reading
    def exp(self) -> Experiment:
        """The experiment read: `experiment`, else the space's (its smoke variant's with
        `smoke`), else the latest one under `storage`."""
        if self.experiment is not None:
            return existing_experiment(self.storage, self.experiment)
        if self.space is not None:
            spec = space_spec(self.space)
            return Experiment(self.storage, (spec.smoked() if self.smoke else spec).name)
        exp = latest_experiment(self.storage)
        log.info("experiment: %s", exp.name)
        return exp

    def read(
        self, columns: list[str] | None = None, pruned_ok: bool = False, attested_only: bool = False
    ) -> Selected:
        """The experiment's certification rows, the `--only` slice of the sound models
        (`pruned_ok`: a slice of pruned models only is no row, not an error; `attested_only`:
        of the models resting on attested files only, `selection.attested_rows`)."""
        chosen = selection.only_selection(self.only)
        exp = self.exp()
        results = selection.load(exp, chosen, columns)
        attested = selection.attested_rows(results, results.frame, attested_only)
        rows = selection.only_rows(exp, attested, chosen, pruned_ok)
        frame, unsound = selection.sound_rows(rows)
        return Selected(exp, results, frame, unsound)

    def status(self) -> StatusReport:
        """Where the sweep stands (`sweeper status`): states, shards, throughput, ETAs; under
        the envelope strategy the models certified and pruned (`Status.envelope`)."""
        from sweeper.results.status import StatusReader, envelope_verdicts
        from sweeper.results.summary import summarize

        reader = StatusReader(self.exp())
        st = running.experiment_status(reader)
        st.left_out = list(dict.fromkeys([*(st.left_out or []), *left_out(reader.exp)]))
        st.envelope = envelope_verdicts(reader.exp)
        return StatusReport(st, summarize(st))

    def envelope(
        self, radii: Sequence[float], by: str | None = None, attested_only: bool = False
    ) -> pd.DataFrame:
        """The upper envelope of certified accuracy over the models, and who got it, at each
        radius (per `by` group): `sweeper envelope`'s numbers; under the envelope strategy its
        soundness logged (`envelope_records.soundness_lines`), after an envelope search what it
        trained, skipped and audited, and that it has no guarantee. With a key to check
        attestations, an `attested` column says whether each winner rests on attested files
        (`attested_only`: only such models compete)."""
        from sweeper.results import envelope as env
        from sweeper.results.envelope_records import soundness_lines

        selected = self.read(env.read_columns(by, "smoothing"), attested_only=attested_only)
        cert_ids = selected.frame["cert_id"].unique().tolist() if len(selected.frame) else []
        for line in soundness_lines(selected.exp, cert_ids, list(radii)):
            log.info("envelope strategy: %s", line)
        searched = selection.search_account(selected.exp, selected.results.frame)
        for line in searched.lines() if searched is not None else []:
            log.info("envelope search: %s", line)
        chosen = selection.only_selection(self.only)
        return envelope_read(selected.exp, selected.results, selected.frame, radii, by, chosen)

    def table(self, radii: Sequence[float], attested_only: bool = False) -> pd.DataFrame:
        """One row per model: certified accuracy per radius, ACR, points (`sweeper table`);
        under the envelope strategy also its pruned models (`status` `pruned`, their upper
        bounds in the `r=..._upper` columns, their accuracies null); with a key, `attested`
        (`attested_only`: attested models only, as `envelope`)."""
        chosen = selection.only_selection(self.only)
        selected = self.read(pruned_ok=True, attested_only=attested_only)
        rows = selection.model_table(selected.exp, selected.frame, chosen, list(radii))
        return selection.mark_attested(rows, selected.results)

    def verify(self, public_key: str | None = None) -> Verification:
        """What in the experiment is attested, unattested and failed (`sweeper verify`),
        checked with the public key in file `public_key` (as published with results), else
        this machine's signing key's; ProblemsError when there is neither or it cannot be read."""
        from sweeper.results.verification import public_key_from, verify_experiment

        return verify_experiment(self.exp(), public_key_from(public_key))


def left_out(exp: Experiment) -> list[str]:
    """The result files left out, "path: why"; one line naming why if they cannot be read."""
    from sweeper.results.certify_rows import ResultsError
    from sweeper.results.status import left_out as files_left_out

    try:
        return files_left_out(exp)
    except ResultsError as e:
        return [str(e)]


def search_overrides(search: str | dict[str, Any] | SearchSpec | None) -> dict[str, Any] | None:
    """`Sweep.run(search=...)` as fields of `SearchSpec` (None: the space's search)."""
    if search is None or isinstance(search, dict):
        return search
    if isinstance(search, SearchSpec):
        return dataclasses.asdict(search)
    return {"mode": search}


def _options(options: LaunchOptions | None, address: str | None) -> LaunchOptions:
    options = options or LaunchOptions()
    return options if address is None else dataclasses.replace(options, address=address)
