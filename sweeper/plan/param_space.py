"""A search space given as a Python mapping, as Ray Tune users write `param_space`
(`Sweep(param_space={...})`): the schema of a space file, read by the same
`spaces.parse_spec` with the same messages (each prefixed `param_space: ` where a file's is
`<file>.yaml: `). `load` reads either kind; everything after it (the plan, sweep.json, resume)
sees a `SweepSpec` and cannot tell them apart.

A mapping may carry one key a file does not: `name`, the space's name (a file's is its file
name), which names the experiment by default. Without it the name is `space-<8 hex digits>`,
a hash of the sweep's trial ids (`hashed_name`): the same grid is the same experiment (run
again, it resumes; other `certify` settings certify the same models), another grid is
another experiment. A named mapping changed to other trials is the conflict a changed file
is (`sweep_plan.sweep_conflict`)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweeper.plan.grid import MAX_TRIALS, expand
from sweeper.plan.spaces import SpecError, load_space, parse_spec
from sweeper.plan.spec import SweepSpec

WHERE = "param_space"  # how messages name a mapping, where a file is named by its file name


@dataclass(frozen=True)
class ParamSpace:
    """A space as a mapping of a space file's keys (`fixed`, `grids`, `certify`, ...) and
    optionally `name`; `raw` is the caller's copy (`api.space_arg` makes one, its keys
    strings). What a request names instead of a shipped space's name or a file's path."""

    raw: Mapping[str, Any]

    def __str__(self) -> str:  # how a message names it ("... and the param_space certifies")
        name = self.raw.get("name")
        return f"param_space {name!r}" if isinstance(name, str) else f"the {WHERE}"


def load(space: str | ParamSpace, max_trials: int = MAX_TRIALS) -> SweepSpec:
    """The validated spec of a shipped space's name, a YAML file or a `ParamSpace`; SpecError
    listing every problem. Grids of more than `max_trials` trials are refused unexpanded."""
    if not isinstance(space, ParamSpace):
        return load_space(space, max_trials)
    raw = dict(space.raw)
    name = raw.pop("name", None)
    named = isinstance(name, str) and name != ""
    problems = [] if name is None or named else [_name_problem(name)]
    spec, found = parse_spec(name if named else "", raw, max_trials)
    problems += found
    if problems or spec is None:
        raise SpecError([f"{WHERE}: {p}" for p in problems])
    return spec if named else dataclasses.replace(spec, name=hashed_name(spec))


def _name_problem(name: Any) -> str:
    return (
        f"name must be a non-empty string, the experiment's default name (got {name!r}); "
        "or leave it out for space-<hash of the trials>"
    )


def hashed_name(spec: SweepSpec) -> str:
    """`space-<8 hex digits>`: a hash of the trial ids of `spec` (without its smoke overrides:
    `--smoke` adds `-smoke` to the name, as to a file's), the name of an unnamed mapping."""
    ids = "\n".join(sorted(t.trial_id for t in expand(spec)))
    return f"space-{hashlib.sha256(ids.encode()).hexdigest()[:8]}"


def run_command(space: str | ParamSpace) -> str:
    """What a message tells to run to train `space`'s trials."""
    if isinstance(space, ParamSpace):
        return "`Sweep(param_space=...).run()`"
    return f"`sweeper run grid {space}`"
