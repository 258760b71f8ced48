"""`sweeper empirical`: SmoothAdv-PGD + PREDICT on every finished model, as Ray tasks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import typer

from sweeper.api.surface import DEFAULT_STORAGE, EmpiricalSpec, LaunchOptions
from sweeper.api.sweep import Sweep
from sweeper.cli.common import (
    DataDir,
    ExperimentOpt,
    Only,
    Storage,
    app,
    console,
    sweeper_command,
)
from sweeper.cli.driver import TASKS, finish, launch_options, watchers
from sweeper.cli.options import SpaceSmoke, given, settings_options, with_options


def _report(outcome, trials: int, settings: Sequence[str]) -> None:
    finish(outcome.interrupted, outcome.failures)
    console.print(
        f"done: {trials} models x {len(settings)} settings. "
        f"Next: {sweeper_command()} envelope --empirical --plot envelope.png",
        soft_wrap=True,  # a command to copy: one line, whatever the width
    )


@app.command()
@with_options(
    settings_options(EmpiricalSpec), settings_options(LaunchOptions, only=TASKS, override=False)
)
def empirical(
    space: Annotated[str, typer.Argument(help="The space the experiment was run with.")],
    storage: Storage = DEFAULT_STORAGE,
    experiment: ExperimentOpt = None,
    data_dir: DataDir = None,
    only: Only = None,
    smoke: SpaceSmoke = False,
    **options: Any,
) -> None:
    """Empirical robustness of the finished models: SmoothAdv-PGD at each ε and m_test, then
    PREDICT (Salman et al. section 4.2), as Ray tasks writing Parquet under empirical/.

    Settings come from the space's `empirical` block (defaults: ε 0,0.25,0.5,1,2, m_test 128,
    20 steps; n, α and the test points of `certify`), overridden by the options. Re-running
    skips the shards already written; new settings add files beside the old ones."""
    launch = launch_options(options)
    overrides, problems = given(EmpiricalSpec, options)
    sweep = Sweep(
        space, storage=storage, experiment=experiment, only=only, smoke=smoke, data_dir=data_dir
    )
    ran = sweep.attack(options=launch, overrides=overrides, watchers=watchers(), problems=problems)
    if ran.outcome is not None:
        _report(ran.outcome, len(ran.trials), ran.settings)
