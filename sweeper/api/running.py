"""The steps of `Sweep.run`, `Sweep.certify` and `Sweep.attack` (each one command's work,
what it says through the `Watchers`), and reading an experiment's status with every way it
can fail one `ProblemsError`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sweeper.api.final_run import final_of_plan, final_plan, merged
from sweeper.plan.param_space import ParamSpace
from sweeper.plan.run_settings import precision_problem
from sweeper.plan.spec import EmpiricalSpec, Resources
from sweeper.plan.sweep_plan import (
    Plan,
    PlanError,
    PlanRequest,
    is_finished,
    make_plan,
    move_aside,
    trial_states,
)
from sweeper.results.search_records import SearchAccount, account
from sweeper.results.status import Status, StatusReader
from sweeper.results.storage import Experiment
from sweeper.run import sweep_run
from sweeper.run.driving import Watchers
from sweeper.run.launch_options import LaunchOptions
from trainables.kernel.config import TrialConfig
from trainables.kernel.errors import ProblemsError

if TYPE_CHECKING:
    from sweeper.run.outcome import Outcome


@dataclass(frozen=True)
class Ran:
    """What a run did: its `plan`, the trials it worked on (`trials`), what Ray left
    (`outcome`: failures per trial and stage, interrupted; None when there was nothing to do),
    for an attack, the setting_ids it attacked under (`settings`), and under the envelope
    search its account (`searched`: trained, skipped, audited)."""

    plan: Plan
    trials: list[TrialConfig]
    outcome: Any = None
    settings: tuple[str, ...] = ()
    searched: SearchAccount | None = None  # under the envelope search: what it trained
    final: bool = False  # whether the final step ran (its failures are in `outcome`)


def resources_of(plan: Plan, options: LaunchOptions) -> Resources:
    """A trial's resources under `options` (`cpu_only`: no GPU); PlanError if the plan
    certifies in fp16 and they hold no GPU."""
    from sweeper.run.capacity import effective_resources

    resources = effective_resources(plan.spec.resources, options.cpu_only)
    if (problem := precision_problem(plan.spec.certify, resources)) is not None:
        raise PlanError([problem])
    return resources


def restart(exp: Experiment, holder: str) -> str | None:
    """Move the experiment aside (`--restart`), unless another driver is using it; where it
    went (None: there was none)."""
    from sweeper.results.lease import Lease

    with Lease(exp, holder):
        pass
    moved = move_aside(exp)
    return None if moved is None else str(moved)


def run_grid(
    request: PlanRequest, options: LaunchOptions, retrain: bool, watchers: Watchers
) -> Ran:
    """`sweeper run grid` past its dry run: the trials not yet trained and certified, on Ray
    (`request.restarting`: the experiment moved aside first)."""
    plan = make_plan(request)
    resources = resources_of(plan, options)
    if plan.spec.certify.strategy == "envelope":
        watchers.note(ENVELOPE_SOUNDNESS.format(delta=plan.spec.certify.delta))
    if plan.spec.certify.final is not None:
        watchers.note(FINAL_LATER)
    if request.restarting and (moved := restart(plan.exp, watchers.holder)) is not None:
        watchers.note(f"previous experiment moved to {moved}")
    states = trial_states(plan.exp, plan.trials)
    watchers.planned(plan, resources, states)
    trained = all(is_finished(states[t.trial_id], t) for t in plan.trials)
    if not retrain and trained and _nothing_to_certify(plan, plan.trials, watchers):
        return Ran(plan, plan.trials)
    if retrain:
        moved = sweep_run.retire(plan, watchers.holder)
        states = trial_states(plan.exp, plan.trials)
        watchers.note(f"retraining {len(plan.trials)} trials; their old files are in {moved}")
    outcome = sweep_run.train_and_certify(plan, resources, options, watchers, states)
    return Ran(plan, plan.trials, outcome, searched=_searched(plan))


def _searched(plan: Plan) -> SearchAccount | None:
    """The envelope search's account of the run (None without the search)."""
    if not plan.spec.search.active:
        return None
    states = trial_states(plan.exp, plan.trials)
    return account(
        plan.exp, {t.trial_id for t in plan.trials if is_finished(states[t.trial_id], t)}
    )


def _nothing_to_certify(plan: Plan, trials: list, watchers: Watchers) -> bool:
    """Every trial certified under every setting of the plan (nothing to do: no Ray); says so."""
    done = sweep_run.all_certified(plan, trials)
    if done:
        watchers.note(
            f"nothing to do: all {len(trials)} trials are trained and certified with "
            f"{', '.join(sweep_run.certify_settings(plan))}"
        )
    return done


FINAL_LATER = (
    "certify.final: the final step needs every model's selection: once the sweep is trained, "
    "`sweeper certify SPACE` certifies it (run grid certifies the selection only)"
)
ENVELOPE_SOUNDNESS = (
    "strategy envelope: every model on the envelope is certified with exact CERTIFY(n0, n, "
    "alpha); the chance that a pruned model would have won at some radius is at most "
    "delta = {delta:g}"
)


def certify_finished(request: PlanRequest, options: LaunchOptions, watchers: Watchers) -> Ran:
    """`sweeper certify`: the finished trials certified under the plan's settings (with the
    request's `certify_overrides`)."""
    plan = make_plan(request)
    ready = sweep_run.finished_trials(plan, request.space)
    resources = resources_of(plan, options)
    waiting = len(plan.trials) - len(ready)
    watchers.note(
        f"certifying {len(ready)} finished trials ({waiting} not finished) with "
        f"{plan.spec.certify.cert_id}"
    )
    if plan.spec.certify.strategy == "envelope":
        watchers.note(ENVELOPE_SOUNDNESS.format(delta=plan.spec.certify.delta))
    sweep_run.declare_settings(plan, watchers.holder)  # before: rows certified earlier count
    outcome = None
    if not _nothing_to_certify(plan, ready, watchers):
        outcome = sweep_run.certify(plan, ready, resources, options, watchers)
    if outcome is not None and (outcome.failures or outcome.interrupted):
        if plan.spec.certify.final is not None:
            watchers.note("final step: not begun, the selection did not finish (see above)")
        return Ran(plan, ready, outcome)
    final = certify_final(plan, ready, resources, options, watchers)
    return Ran(plan, ready, merged(outcome, final), final=final is not None)


def certify_final(
    plan: Plan,
    ready: list[TrialConfig],
    resources: Resources,
    options: LaunchOptions,
    watchers: Watchers,
) -> Outcome | None:
    """The final step after the selection (`final_run`): each envelope winner and the models
    within its interval re-certified on the report points; None when the plan has no final
    step or nothing is left to do (said so)."""
    chosen = final_plan(plan, ready)
    if chosen is None:
        return None
    for line in chosen.lines():
        watchers.note(line)
    if not chosen.todo:
        return None
    final = final_of_plan(plan, chosen.step)
    return sweep_run.certify(final, chosen.todo, resources, options, watchers)


def attack_finished(
    space: str | ParamSpace,
    plan: Plan,
    spec: EmpiricalSpec,
    options: LaunchOptions,
    watchers: Watchers,
) -> Ran:
    """`sweeper empirical`: the finished trials of `plan` attacked under every setting of
    `spec` (its `empirical` block, overrides applied)."""
    from sweeper.run.capacity import effective_resources
    from sweeper.run.empirical_stage import settings

    ready = sweep_run.finished_trials(plan, space)
    chosen = settings(spec, plan.spec.certify)
    resources = effective_resources(plan.spec.resources, options.cpu_only)
    watchers.note(
        f"attacking {len(ready)} finished models ({len(plan.trials) - len(ready)} not finished) "
        f"under {len(chosen)} settings: " + ", ".join(s.emp_id for s in chosen)
    )
    ids = tuple(s.setting_id for s in chosen)
    if sweep_run.all_attacked(plan, ready, chosen):
        watchers.note("nothing to do: every model is attacked under every setting")
        return Ran(plan, ready, None, ids)
    outcome = sweep_run.attack(plan, ready, chosen, resources, options, watchers)
    return Ran(plan, ready, outcome, ids)


def experiment_status(reader: StatusReader) -> Status:
    """The experiment's status; `ProblemsError` with one line if it cannot be read."""
    try:
        return reader.read()
    except FileNotFoundError as e:
        raise ProblemsError([str(e)]) from None
    except ProblemsError:  # a lease.json that is no lease: it says which and the fix
        raise
    except (ValueError, KeyError, TypeError) as e:  # ValueError: bad JSON or ConfigError
        raise ProblemsError(
            [f"cannot read the experiment at {reader.exp.root} ({type(e).__name__}: {e})"]
        ) from None


def failures_log(exp: Experiment) -> str | None:
    """Where a run's failures' full texts are (`failures.json`'s log; None: no failure)."""
    from sweeper.results.failures import read_failures

    return read_failures(exp)[1]
