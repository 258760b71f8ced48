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
from typing import TYPE_CHECKING, Any

from sweeper.api import reading, running
from sweeper.api.experiments import existing_experiment, latest_experiment
from sweeper.api.pricing import CertifyPreview, PricedPlan, preview_certify, price_plan
from sweeper.api.reading import Reading
from sweeper.api.running import Ran
from sweeper.api.space_arg import space_of, space_spec
from sweeper.api.status_report import StatusReport, status_report
from sweeper.plan.grid import MAX_TRIALS
from sweeper.plan.param_space import ParamSpace
from sweeper.plan.spec import EmpiricalSpec, SearchSpec
from sweeper.plan.sweep_plan import Plan, PlanError, PlanRequest, make_plan
from sweeper.results.storage import DEFAULT_STORAGE, Experiment
from sweeper.run.driving import Watchers
from sweeper.run.launch_options import LaunchOptions
from sweeper.run.sweep_run import finished_trials
from trainables.kernel.errors import ProblemsError

if TYPE_CHECKING:
    import pandas as pd

    from sweeper.ingest.importer import ImportReport
    from sweeper.results.verification import Verification

log = logging.getLogger(__name__)


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
        return running.run_grid(request, launch, retrain, self._watchers(watchers))

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
        return running.certify_finished(request, launch, self._watchers(watchers))

    def attack(
        self,
        address: str | None = None,
        *,
        options: LaunchOptions | None = None,
        overrides: dict[str, Any] | None = None,
        watchers: Watchers | None = None,
        problems: Sequence[str] = (),
    ) -> Ran:
        """SmoothAdv-PGD, then PREDICT, on every finished model (`sweeper empirical`), with
        the space's `empirical` block changed by `overrides` (fields of `EmpiricalSpec`);
        `problems`: those the caller found in its overrides already, listed with the plan's
        in one PlanError."""
        launch = _options(options, address)
        request = self.request(address=launch.address, max_trials=launch.max_trials)
        plan, spec = attack_plan(request, overrides or {}, problems)
        return running.attack_finished(request.space, plan, spec, launch, self._watchers(watchers))

    def _watchers(self, watchers: Watchers | None = None) -> Watchers:
        """`watchers` (default: nobody watching, the lease naming this Sweep), with this
        Sweep's `only` recorded in the lease: `sweeper status` and `Sweep.status()` from
        elsewhere count the slice while it runs, as for the command line."""
        only = f" --only {self.only}" if self.only else ""
        watchers = watchers or Watchers(holder=f"sweeper.Sweep (Python){only}")
        return dataclasses.replace(watchers, only=self.only)

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
    ) -> Reading:
        """The experiment's results, read once, as a `Reading` (Tune's `ResultGrid`): the
        validated rows, the `only` slice of the sound models, the files left out and why, and
        every view of them (`envelope`, `table`, `coverage`, the per-trial results).
        `columns`: read only these (and the slice's); `pruned_ok`: a slice of pruned models
        only is no row, not an error; `attested_only`: the models resting on attested files
        only (`selection.attested_rows`). `ProblemsError` if it cannot be read."""
        return reading.read(self.exp(), self.only, columns, pruned_ok, attested_only)

    def status(self) -> StatusReport:
        """Where the sweep stands (`sweeper status`): states, shards, throughput, ETAs; while
        a driver runs a slice (its lease's `only`), that slice's; under the envelope strategy
        the models certified and pruned (`Status.envelope`)."""
        return status_report(self.exp())

    def envelope(
        self, radii: Sequence[float], by: str | None = None, attested_only: bool = False
    ) -> pd.DataFrame:
        """The upper envelope of certified accuracy over the models, and who got it, at each
        radius (per `by` group): `sweeper envelope`'s numbers (`Reading.envelope`); under the
        envelope strategy its soundness logged (`Reading.guarantee_notes`), after an envelope
        search what it trained, skipped and audited, and that it has no guarantee. With a key
        to check attestations, an `attested` column says whether each winner rests on
        attested files (`attested_only`: only such models compete)."""
        read = self.read(read_columns(by), attested_only=attested_only)
        for line in read.guarantee_notes(radii):
            log.info("envelope strategy: %s", line)
        searched = read.search()
        for line in searched.lines() if searched is not None else []:
            log.info("envelope search: %s", line)
        return read.envelope(radii, by)

    def table(self, radii: Sequence[float], attested_only: bool = False) -> pd.DataFrame:
        """One row per model: certified accuracy per radius, ACR, points (`sweeper table`,
        `Reading.table`); under the envelope strategy also its pruned models (`status`
        `pruned`, their upper bounds in the `r=..._upper` columns, their accuracies null);
        with a key, `attested` (`attested_only`: attested models only, as `envelope`)."""
        return self.read(pruned_ok=True, attested_only=attested_only).table(radii)

    def report(
        self,
        radii: Sequence[float],
        figure_formats: Sequence[str] = ("png", "pdf"),
        linf_255: Sequence[float] = (1.0, 2.0, 4.0, 8.0),
        attested_only: bool = False,
    ) -> list[str]:
        """Write the paper-style tables and figures (`sweeper report`, `Reading.report`)
        under the experiment's reports/; the locations written."""
        read = self.read(attested_only=attested_only)
        return read.write_report(read.report(radii, figure_formats, linf_255, attested_only))

    def compact(self) -> list[str]:
        """Fold each complete model's shards into one file and refresh the caches (`sweeper
        compact`), holding the experiment as a run does; a line per stage of what was done.
        `ProblemsError` if a symlink is inside the experiment (nothing done) or a model cannot
        be compacted (its shards are kept)."""
        from sweeper.results.inventory import sign_if_keyed
        from sweeper.results.lease import Lease
        from sweeper.run.certify_stage import CERTIFY
        from sweeper.run.compaction import compact_all
        from sweeper.run.empirical_stage import EMPIRICAL

        exp = self.exp()
        try:
            with Lease(exp, "sweeper compact"):
                if links := exp.link_problems():  # never read nor written through
                    raise ProblemsError(links)
                lines = compact_all(exp, [CERTIFY, EMPIRICAL])
                sign_if_keyed(exp)
        except RuntimeError as e:  # a model that cannot be compacted: its shards are kept
            raise ProblemsError(
                [f"{e}: its shards are kept; re-run `sweeper certify` or `sweeper empirical`"]
            ) from None
        return lines

    def import_logs(
        self, directory: str, sets: Sequence[str] = (), max_rows: int | None = None
    ) -> ImportReport:
        """Import the reference code's certification logs under `directory` as models of this
        Sweep's `experiment` (`sweeper import`; `sets`: key=value the directory names do not
        give; `max_rows`: per log). `IngestError` (a ProblemsError) when nothing can be."""
        from sweeper.ingest.importer import import_logs
        from sweeper.ingest.log_reader import DEFAULT_MAX_ROWS

        if self.experiment is None:
            raise ProblemsError(["import_logs needs an experiment: Sweep(experiment=...)"])
        exp = Experiment(self.storage, self.experiment)
        return import_logs(directory, exp, list(sets), max_rows or DEFAULT_MAX_ROWS)

    def verify(self, public_key: str | None = None) -> Verification:
        """What in the experiment is attested, unattested and failed (`sweeper verify`),
        checked with the public key in file `public_key` (as published with results), else
        this machine's signing key's; ProblemsError when there is neither or it cannot be read."""
        from sweeper.results.verification import public_key_from, verify_experiment

        return verify_experiment(self.exp(), public_key_from(public_key))


def read_columns(by: str | None = None) -> list[str]:
    """The results columns the envelope reads (with `by`'s): `Sweep.read(columns)`'s
    projection of the 80-odd columns for `envelope`."""
    from sweeper.results import envelope as env

    return env.read_columns(by, "smoothing")


def parse_radii(text: str) -> list[float]:
    """`--radii`'s syntax: `0:2.25:0.25` (start:stop:step, stop included) or `0,0.5,1`, each
    radius >= 0; ProblemsError saying what is expected."""
    from sweeper.results import envelope as env

    try:
        return env.parse_radii(text)
    except env.EnvelopeError as e:
        raise ProblemsError([str(e)]) from None


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
