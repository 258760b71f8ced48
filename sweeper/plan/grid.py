"""Grid expansion: a `SweepSpec` becomes the ordered list of `TrialConfig`s it describes.

Order is deterministic (grids in file order, then the product of axes in file order, the last
axis varying fastest; a fine-tuning stage crosses each of its parent grid's trials, in order,
with its own axes). Configs that resolve to the same trial (e.g. an ε axis crossed with
the Gaussian baseline, which has no ε) are kept once. `trial_id` is a hash of the resolved
config, so it is stable across runs, machines and Ray's own trial names.
"""

from __future__ import annotations

import difflib
import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, fields
from typing import Any

import yaml

from sweeper.plan.spec import TRIAL_KEYS, Grid, SweepSpec
from trainables.kernel.config import TrialConfig
from trainables.kernel.errors import ConfigError
from trainables.kernel.stage_settings import STRATEGIES


def _grid_dicts(spec: SweepSpec, grid: Grid, parents: list[TrialConfig | None]) -> Iterator[dict]:
    for parent in parents:
        for combo in itertools.product(*(values for _, values in grid.axes)):
            d = {**spec.fixed, **grid.fixed}
            if parent is not None:
                d.update({k: getattr(parent, k) for k in grid.inherit}, init_from=parent.trial_id)
            for (axis, _), value in zip(grid.axes, combo, strict=True):
                d.update(value if isinstance(value, dict) else {axis: value})
            yield d


# A space is expanded more than once per command (validated with and without the smoke
# overrides, then planned, `sweeper spaces` lists every shipped one): each distinct config dict
# is resolved once per process. A resolved TrialConfig is frozen, so sharing it is safe.
_BUILT: dict[str, tuple[TrialConfig | None, tuple[str, ...], str]] = {}
_BUILT_MAX = 100_000


_DEFAULTS = {f.name: f.default for f in fields(TrialConfig) if f.default is not MISSING}


def _is_default(key: str, value: Any) -> bool:
    default = _DEFAULTS.get(key, MISSING)
    return default is not MISSING and type(value) is type(default) and value == default


def _build(d: dict) -> tuple[TrialConfig | None, tuple[str, ...], str]:
    """(the config, (), its trial_id) or (None, its problems, "") for one config dict."""
    # A setting given its default builds the same config as one left out (a planned run
    # passes data_dir=None); repr tells 1, 1.0 and True apart, as validation does.
    key = repr(sorted((k, v) for k, v in d.items() if not _is_default(k, v)))
    built = _BUILT.get(key)
    if built is None:
        try:
            cfg = TrialConfig.from_dict(d)
            built = (cfg, (), cfg.trial_id)
        except ConfigError as e:
            built = (None, tuple(e.problems), "")
        if len(_BUILT) >= _BUILT_MAX:
            _BUILT.clear()
        _BUILT[key] = built
    return built


def _raw_trials(
    spec: SweepSpec, overrides: Mapping[str, Any]
) -> Iterator[tuple[str, TrialConfig | None, tuple[str, ...], str]]:
    """(grid name, config or None, its problems, trial_id) of every trial; a stage's trials
    follow its parent grid's (the children of a config with problems are not built)."""
    built: dict[str, list[TrialConfig]] = {}
    for grid in spec.grids:
        parents: list[TrialConfig | None] = (
            list(built.get(grid.parent, [])) if grid.parent else [None]
        )
        configs: dict[str, TrialConfig] = {}
        for d in _grid_dicts(spec, grid, parents):
            cfg, problems, trial_id = _build({**d, **overrides})
            yield grid.name, cfg, problems, trial_id
            if cfg is not None:
                configs.setdefault(trial_id, cfg)
        built[grid.name] = list(configs.values())


# The most trials a space may describe unless `--max-trials` says more: 31 times the largest
# shipped space (cifar10, 644). Loading a space expands it twice (with and without the smoke
# overrides): 100,000 trials took 14 s and 225 MB here, 10^7 would take hours and gigabytes.
MAX_TRIALS = 20_000


def trial_count(spec: SweepSpec) -> int:
    """How many trials the grids describe, from their axes' lengths alone (nothing expanded;
    configs that resolve to the same trial counted each time: at least `len(expand(spec))`)."""
    counts: dict[str, int] = {}
    for grid in spec.grids:
        parents = counts.get(grid.parent, 0) if grid.parent else 1
        counts[grid.name] = parents * math.prod(len(values) for _, values in grid.axes)
    return sum(counts.values())


def expand(spec: SweepSpec, overrides: Mapping[str, Any] | None = None) -> list[TrialConfig]:
    """Every distinct trial of the sweep, in order. `overrides` (e.g. data_dir) apply to all;
    ConfigError with the first problem's messages if any config is invalid."""
    trials: dict[str, TrialConfig] = {}
    for _, cfg, problems, trial_id in _raw_trials(spec, overrides or {}):
        if cfg is None:
            raise ConfigError(list(problems))
        trials.setdefault(trial_id, cfg)
    return list(trials.values())


def expansion_problems(spec: SweepSpec, prefix: str = "") -> list[str]:
    """Every distinct problem of every trial the spec would produce, naming the grid."""
    found: dict[str, None] = {}
    for name, _, problems, _ in _raw_trials(spec, {}):
        found.update({f"{prefix}grid {name!r}: {p}": None for p in problems})
    return list(found)


# The names the tables print, accepted by --only as the hyperparameters they head.
ONLY_ALIASES = {"T": "steps", "m": "m_train", "σ": "sigma", "ε": "epsilon", "λ": "lam", "η": "eta"}
# Offered when a key is unknown (the grids' usual axes; any trial setting is valid).
ONLY_KEYS = ("method", "sigma", "epsilon", "steps (T)", "m_train (m)", "attack", "lam", "eta")


# Keys of a certification, not of a trial: the reads take them (`envelope`, `table`, `report`).
RESULT_KEYS = ("cert_id", "strategy")


def parse_only(text: str | None) -> tuple[dict[str, Any], list[str]]:
    """`--only sigma=0.25,attack=pgd` -> ({"sigma": 0.25, "attack": "pgd"}, problems); the
    key `trial_id` selects one trial by its id, `cert_id` one certification setting and
    `strategy` (envelope or full) the settings of one strategy; the tables' headings (T, m,
    σ, ...) name the hyperparameters they head (`ONLY_ALIASES`)."""
    if not text:
        return {}, []
    selection: dict[str, Any] = {}
    problems: list[str] = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = ONLY_ALIASES.get(key.strip(), key.strip())
        if not sep or not key:
            problems.append(f"--only: expected key=value, got {part!r}")
        elif key in ("trial_id", "cert_id"):  # names, never numbers: kept as written
            selection[key] = value.strip()
        elif key == "strategy":
            if value.strip() not in STRATEGIES:
                problems.append(f"--only strategy={value.strip()}: expected envelope or full")
            selection[key] = value.strip()
        elif key not in TRIAL_KEYS:
            problems.append(_unknown_key(key))
        else:
            try:
                parsed = yaml.safe_load(value.strip()) if value.strip() else None
            except yaml.YAMLError:
                parsed = []  # reported below
            if parsed is not None and not isinstance(parsed, (bool, int, float, str)):
                problems.append(f"--only {key}: expected one number, word or null, got {value!r}")
            else:
                selection[key] = parsed
    return selection, problems


def value_matches(key: str, have: Any, wanted: Any) -> bool:
    """Whether a value `have` of hyperparameter `key` is the `wanted` one of `--only`: numbers
    within a relative 1e-9, `amp=off`/`amp=true` as YAML reads them. The one matcher of
    `--only`, for trials (`select`) and for results rows (`sweeper.api.selection`)."""
    if key == "amp" and isinstance(wanted, bool):  # --only amp=off (YAML: false), amp=true
        wanted = "fp16" if wanted else "off"
    if wanted is None or (isinstance(wanted, str) and wanted.lower() == NONE):
        # `attack=none` (or null): a trial without one; the tables label it `none`
        return have is None or (isinstance(have, float) and math.isnan(have))
    if (
        isinstance(have, float)
        and isinstance(wanted, (int, float))
        and not isinstance(wanted, bool)
    ):
        return math.isclose(have, wanted, rel_tol=1e-9)
    return bool(have == wanted)


NONE = "none"  # how --only and the tables name a setting a trial does not have (attack)


def only_value(value: Any) -> str:
    """A value as `--only` takes it back: `none` for a missing one, 0.25, pgd."""
    return NONE if value is None else str(value)


def _matches(cfg: TrialConfig, key: str, wanted: Any) -> bool:
    return value_matches(key, getattr(cfg, key), wanted)


def select(
    trials: list[TrialConfig], only: Mapping[str, Any]
) -> tuple[list[TrialConfig], list[str]]:
    """The trials matching every key=value of `only`; a value no trial has is a problem, and
    so is a key of the results (`RESULT_KEYS`): trials have none."""
    problems = [
        f"--only {key}= selects certified results (envelope, table, report), not the trials "
        "to run: leave it out here"
        for key in only
        if key in RESULT_KEYS
    ]
    only = {k: v for k, v in only.items() if k not in RESULT_KEYS}
    for key, wanted in only.items():
        if not any(_matches(t, key, wanted) for t in trials):
            values = sorted({only_value(getattr(t, key)) for t in trials})
            problems.append(
                f"--only {key}={wanted} matches no trial ({key} values: {', '.join(values)})"
            )
    chosen = [t for t in trials if all(_matches(t, k, v) for k, v in only.items())]
    return chosen, problems


def _unknown_key(key: str) -> str:
    close = difflib.get_close_matches(key, sorted(TRIAL_KEYS), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (
        f"--only: unknown hyperparameter {key!r} ({hint}e.g. {', '.join(ONLY_KEYS)}, "
        "or any trial setting)"
    )


def space_trials(space: Any) -> set[str] | None:
    """The trial_ids a sweep.json's `space` (a `SweepSpec.to_json` document) declares, its
    grids expanded again: what the sweep planned even where its `trials` list was cut. None
    if it is no space's document (hand-written, imported, or a config no trial has)."""
    if not isinstance(space, dict) or not isinstance(space.get("grids"), list):
        return None
    try:
        grids = tuple(
            Grid(
                str(g["name"]),
                dict(g.get("fixed") or {}),
                tuple((str(axis), tuple(values)) for axis, values in g["axes"]),
                g.get("parent"),
                tuple(g.get("inherit") or ()),
            )
            for g in space["grids"]
        )
        spec = SweepSpec(str(space.get("name")), "", dict(space.get("fixed") or {}), grids)
        if trial_count(spec) > MAX_TRIALS:
            return None
        return {t.trial_id for t in expand(spec)}
    except (ConfigError, KeyError, TypeError, ValueError, AttributeError):
        return None
