"""Search spaces: YAML files validated into a typed, frozen `SweepSpec`.

A space declares `fixed` hyperparameters, one or more `grids` (each a product of axes, the
sweep being their union), per-trial `resources`, the `certify` settings, the `empirical`
robustness settings (for `sweeper empirical`) and `smoke` overrides for a quick look. An axis
value may be a mapping, to set several fields together (e.g. `{attack: pgd, steps: 1}` vs
`{attack: ddn, steps: 2}`). Every problem in a file is reported at once, each with its place
in the file.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from sweeper.plan.run_settings import PRECISIONS, precision_problem
from trainables.config import TrialConfig
from trainables.config_parts import DDRSSettings
from trainables.errors import ProblemsError
from trainables.field_types import type_problems

SPACES_DIR = Path(__file__).resolve().parents[2] / "search_spaces"
TOP_KEYS = ("description", "fixed", "grids", "resources", "certify", "empirical", "smoke")
TRIAL_KEYS = frozenset(f.name for f in fields(TrialConfig))
GRID_KEYS = frozenset({"name", "fixed", "axes", "parent", "inherit"})




class SpecError(ProblemsError):
    """Problems with a search space."""


@dataclass(frozen=True)
class Resources:
    """Per-trial (and per-certification-task) resources. Fractions pack trials on a GPU."""

    cpu: float = 1.0
    gpu: float = 0.0

    def problems(self) -> list[str]:
        p = type_problems(self)
        if not p and (self.cpu < 0 or self.gpu < 0 or self.cpu + self.gpu == 0):
            p.append(
                f"cpu and gpu must be >= 0 and not both zero (got cpu={self.cpu}, gpu={self.gpu})"
            )
        return p


@dataclass(frozen=True)
class CertifySpec:
    """CERTIFY settings. The paper's: n0=100, n=100,000, α=0.001 on every 20th test image."""

    n0: int = 100
    n: int = 100_000
    alpha: float = 0.001
    skip: int = 20  # certify test points 0, skip, 2·skip, ...
    max_points: int | None = 500  # at most this many points (None: the whole subset)
    sigma: float | None = None  # σ_cert; None: each model's training σ
    batch_size: int = 1000  # noisy samples per forward pass (lower it if a GPU runs out)
    points_per_batch: int | None = None  # None: enough points to fill a batch at n0 samples each
    shard_size: int = 50  # test points per certification task (and Parquet file)
    # Data-dependent smoothing (DDRS): in a space, certify every model a second time with σ_x
    # per point ({} or true: the paper's OptimizeSigma settings); `sweeper certify --ddrs`.
    ddrs: DDRSSettings | None = None
    # How the base classifier is run (trainables.runtime). Each is declared with its type,
    # default, allowed values and help (the CLI reads the help from here); all three can change
    # the votes, so any non-default value is part of cert_id (see there).
    precision: str = field(default="fp32", metadata={
        "choices": PRECISIONS,
        "help": "Numeric precision of the base classifier's forward passes: fp32, bf16 or fp16 "
                "(autocast; fp16 needs CUDA, bf16 a GPU or CPU with bf16 support). The "
                "certificate is of the classifier as run: deploy it (PREDICT) at the same one.",
    })  # fmt: skip
    channels_last: bool = field(default=False, metadata={
        "help": "Run the base classifier in channels-last (NHWC) memory layout.",
    })  # fmt: skip
    compile: bool = field(default=False, metadata={
        "help": "torch.compile the base classifier (runs eagerly, with a warning, where it "
                "cannot compile).",
    })  # fmt: skip

    def problems(self) -> list[str]:
        p = type_problems(self)
        if p:
            return p
        p += stage_problems(self)
        for name in ("n0", "points_per_batch"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                p.append(f"{name} must be an integer >= 1 (got {getattr(self, name)})")
        if self.sigma is not None and not self.sigma > 0:
            p.append(f"sigma must be > 0 (got {self.sigma})")
        if self.ddrs is not None:
            p += [f"ddrs.{q}" for q in self.ddrs.problems()]
        if self.precision not in PRECISIONS:
            p.append(f"unknown precision {self.precision!r} (valid: {', '.join(PRECISIONS)})")
        return p

    @property
    def cert_id(self) -> str:
        """Names the settings in file paths; new settings give new files, old rows stay.

        The defaults (fp32, NCHW, eager) add nothing, so every id written before these settings
        existed still names its files. Otherwise `_prec-<p>`, `_cl` and `_compiled` are added,
        because each can change the votes: a certificate is of the base classifier as it was
        run, and rows of different runs must not pool. bf16/fp16 obviously; channels_last and
        compile too: measured on this project's AVX2 CPU (oneDNN), both give logits that differ
        from NCHW eager ones in the last bits, so a vote near a decision boundary can flip."""
        sigma = "train" if self.sigma is None else f"{self.sigma:g}"
        mp = "all" if self.max_points is None else self.max_points
        fixed = (
            f"sigma-{sigma}_n0-{self.n0}_n-{self.n}_alpha-{self.alpha:g}_skip-{self.skip}_max-{mp}"
        )
        fixed += "".join(f"_{t}" for t in self.run_tags)
        return fixed if self.ddrs is None else f"{fixed}_{self.ddrs.tag}"

    @property
    def run_tags(self) -> tuple[str, ...]:
        """The cert_id segments of the non-default run settings (none at the defaults)."""
        tags = () if self.precision == "fp32" else (f"prec-{self.precision}",)
        return tags + ("cl",) * self.channels_last + ("compiled",) * self.compile

    @property
    def setting_id(self) -> str:  # what the sharded-stage engine calls it
        return self.cert_id

    def variants(self) -> list[CertifySpec]:
        """The settings a run certifies with: fixed σ, and data-dependent σ too if `ddrs`."""
        fixed = dataclasses.replace(self, ddrs=None)
        return [fixed] if self.ddrs is None else [fixed, self]


ESTIMATORS = ("plugin", "stein")  # = trainables.empirical_robustness.ESTIMATORS (spec stays torch-free)


@dataclass(frozen=True)
class EmpiricalSpec:
    """Empirical robustness (`sweeper empirical`, SmoothAdv section 4.2): SmoothAdv-PGD with
    `steps` steps at each ℓ2 radius ε of `epsilons` and each m_test, then PREDICT (n, α).

    Defaults: ε ∈ {0, 0.25, 0.5, 1, 2} (ε = 0 is no attack, run once: the clean smoothed
    accuracy); m_test = 128 and 20 steps, the paper's Fig. 1 attack (its Fig. 3 sweeps m_test
    over 1, 4, 8, 16, 64, 128; every (ε, m_test) costs one PREDICT pass per point); the
    plug-in estimator (6) ("stein": the gradient-free (7), weaker, appendix C.6). n, alpha,
    skip, max_points, shard_size and batch_size left null follow the `certify` block, so the
    empirical and certified accuracies use the same points, n and α (paper: 1e5, 0.001);
    max_points "all" attacks the whole subset."""

    epsilons: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0)
    m_test: tuple[int, ...] = (128,)
    steps: int = 20
    estimator: str = "plugin"
    n: int | None = None
    alpha: float | None = None
    skip: int | None = None
    max_points: int | str | None = None
    shard_size: int | None = None
    batch_size: int | None = None  # noisy samples per forward pass, attack and PREDICT

    def __post_init__(self) -> None:  # YAML and the CLI give lists (or one number)
        for name in ("epsilons", "m_test"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                object.__setattr__(self, name, (value,))

    def problems(self) -> list[str]:
        p = _values_problems("epsilons", self.epsilons, float, 0, "a number >= 0")
        p += _values_problems("m_test", self.m_test, int, 1, "an integer >= 1")
        if not _int_at_least(self.steps, 1):
            p.append(f"steps must be an integer >= 1 (got {self.steps!r})")
        p += stage_problems(self)  # null: inherited from certify, checked there
        if self.estimator not in ESTIMATORS:
            p.append(f"unknown estimator {self.estimator!r} (valid: {', '.join(ESTIMATORS)})")
        return p


def stage_problems(settings: Any) -> list[str]:
    """The settings every sharded stage has (certification, the empirical attack), checked by
    one rule each: n, skip, shard_size, batch_size integers >= 1; max_points an integer >= 1
    (or "all"/null); alpha in (0, 0.5), a failure probability. A null value is not checked
    (the empirical block inherits it from certify)."""
    p = []
    for name in ("n", "skip", "shard_size", "batch_size"):
        value = getattr(settings, name)
        if value is not None and not _int_at_least(value, 1):
            p.append(f"{name} must be an integer >= 1 (got {value!r})")
    mp = settings.max_points
    if not (mp is None or mp == "all" or _int_at_least(mp, 1)):
        p.append(f"max_points must be an integer >= 1, all or null (got {mp!r})")
    a = settings.alpha
    if a is not None and (isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 < a < 0.5):
        p.append(f"alpha must be a number in (0, 0.5) (got {a!r})")
    return p


def _int_at_least(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _values_problems(name: str, values: Any, kind: type, low: float, what: str) -> list[str]:
    if not isinstance(values, tuple) or not values:
        return [f"{name} must be a non-empty list (got {values!r})"]
    kinds = (int, float) if kind is float else (int,)
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, kinds) or not v >= low]
    return [f"{name}: every value must be {what} (got {v!r})" for v in bad]


@dataclass(frozen=True)
class Grid:
    name: str
    fixed: Mapping[str, Any]
    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    # A stage that fine-tunes every trial of grid `parent` (which must come earlier): each of
    # its axis combinations is crossed with the parent's trials, copies their `inherit`
    # hyperparameters, and sets init_from to the parent's trial_id.
    parent: str | None = None
    inherit: tuple[str, ...] = ()


@dataclass(frozen=True)
class SweepSpec:
    name: str
    description: str
    fixed: Mapping[str, Any]
    grids: tuple[Grid, ...]
    resources: Resources = field(default_factory=Resources)
    certify: CertifySpec = field(default_factory=CertifySpec)
    smoke_fixed: Mapping[str, Any] = field(default_factory=dict)
    smoke_certify: Mapping[str, Any] = field(default_factory=dict)
    empirical: EmpiricalSpec = field(default_factory=EmpiricalSpec)

    def smoked(self) -> SweepSpec:
        """The same sweep with the `smoke` overrides: tiny epochs and n for a quick look."""
        return dataclasses.replace(
            self,
            name=f"{self.name}-smoke",
            fixed={**self.fixed, **self.smoke_fixed},
            certify=dataclasses.replace(self.certify, **self.smoke_certify),
            smoke_fixed={},
            smoke_certify={},
        )

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True, default=list)


def available_spaces() -> list[str]:
    return sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))


def resolve_space_path(space: str) -> Path:
    """A shipped space by name, or a path to the user's own YAML file."""
    path = Path(space).expanduser()
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise SpecError([f"search space file not found: {path}"])
        return path
    shipped = SPACES_DIR / f"{space}.yaml"
    if not shipped.is_file():
        names = ", ".join(available_spaces())
        raise SpecError(
            [f"unknown space {space!r} (available: {names}; or pass a path to a YAML file)"]
        )
    return shipped


def load_space(space: str) -> SweepSpec:
    """Read and validate a search space; raises SpecError listing every problem."""
    path = resolve_space_path(space)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError([f"{path}: malformed YAML{where}: {problem}"]) from None
    except OSError as e:
        raise SpecError([f"cannot read {path}: {e.strerror}"]) from None
    spec, problems = parse_spec(path.stem, raw)
    if problems or spec is None:  # parse_spec returns a spec exactly when it finds no problem
        raise SpecError([f"{path.name}: {p}" for p in problems])
    return spec


def parse_spec(name: str, raw: Any) -> tuple[SweepSpec | None, list[str]]:
    """(spec, []) or (None, every problem)."""
    if not isinstance(raw, dict):
        return None, ["a search space must be a mapping with keys: " + ", ".join(TOP_KEYS)]
    problems = [
        f"unknown key {k!r} (valid: {', '.join(TOP_KEYS)})" for k in raw if k not in TOP_KEYS
    ]
    fixed = _trial_mapping(raw.get("fixed"), "fixed", problems)
    grids = _grids(raw.get("grids"), problems)
    resources = _dataclass(Resources, raw.get("resources"), "resources", problems)
    certify = _dataclass(CertifySpec, raw.get("certify"), "certify", problems)
    empirical = _dataclass(EmpiricalSpec, raw.get("empirical"), "empirical", problems)
    smoke = raw.get("smoke") or {}
    if not isinstance(smoke, dict) or set(smoke) - {"fixed", "certify"}:
        problems.append("smoke must be a mapping with keys fixed, certify")
        smoke = {}
    smoke_fixed = _trial_mapping(smoke.get("fixed"), "smoke.fixed", problems)
    smoke_certify = smoke.get("certify") or {}
    if isinstance(smoke_certify, dict):
        merged: list[str] = []  # the certify block's own problems are reported once
        _dataclass(
            CertifySpec, {**dataclasses.asdict(certify), **smoke_certify}, "smoke.certify", merged
        )
        problems += [p for p in merged if p.replace("smoke.", "", 1) not in problems]
        names = {f.name for f in fields(CertifySpec)}
        smoke_certify = {k: v for k, v in smoke_certify.items() if k in names}
        if "ddrs" in smoke_certify:
            smoke_certify["ddrs"] = _ddrs(smoke_certify["ddrs"], "smoke.certify.ddrs", [])
    else:
        problems.append("smoke.certify must be a mapping")
        smoke_certify = {}
    description = str(raw.get("description", ""))
    spec = SweepSpec(
        name, description, fixed, grids, resources, certify, smoke_fixed, smoke_certify,
        empirical=empirical,
    )  # fmt: skip
    from sweeper.plan.grid import expansion_problems

    # The trials' own problems (types, sigma <= 0, ...) are reported alongside the structural
    # ones above: unknown keys were dropped, so what is left can still be checked.
    prefix = "with smoke overrides: "
    base = expansion_problems(spec)
    smoked = [p for p in expansion_problems(spec.smoked(), prefix) if p[len(prefix) :] not in base]
    problems = list(dict.fromkeys(problems + base + smoked))
    if (problem := precision_problem(certify, resources)) is not None:
        problems.append(problem)
    return (None, problems) if problems else (spec, [])


def _trial_mapping(value: Any, where: str, problems: list[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"{where} must be a mapping of hyperparameters")
        return {}
    for key in value:
        if key not in TRIAL_KEYS:
            problems.append(f"{where}: unknown hyperparameter {key!r}")
    return {k: v for k, v in value.items() if k in TRIAL_KEYS}


def _grids(value: Any, problems: list[str]) -> tuple[Grid, ...]:
    if not isinstance(value, list) or not value:
        problems.append("grids must be a non-empty list of {name, fixed, axes}")
        return ()
    grids: list[Grid] = []
    for i, g in enumerate(value):
        where = f"grids[{i}]"
        if not isinstance(g, dict) or set(g) - GRID_KEYS:
            problems.append(f"{where} must be a mapping with keys {', '.join(sorted(GRID_KEYS))}")
            continue
        fixed = _trial_mapping(g.get("fixed", {}), f"{where}.fixed", problems)
        axes = _axes(g.get("axes", {}) or {}, where, problems)
        parent, inherit = _stage(g, where, [grid.name for grid in grids], problems)
        grids.append(Grid(str(g.get("name", f"grid{i}")), fixed, axes, parent, inherit))
    return tuple(grids)


def _stage(
    g: dict[str, Any], where: str, earlier: list[str], problems: list[str]
) -> tuple[str | None, tuple[str, ...]]:
    """(parent, inherit) of a fine-tuning stage, checked against the grids before it."""
    parent, inherit = g.get("parent"), g.get("inherit", [])
    if parent is not None and parent not in earlier:
        problems.append(
            f"{where}.parent {parent!r} must name an earlier grid ({', '.join(earlier) or 'none'})"
        )
    if not isinstance(inherit, list) or any(k not in TRIAL_KEYS for k in inherit):
        problems.append(f"{where}.inherit must be a list of hyperparameters (got {inherit!r})")
        inherit = []
    if inherit and parent is None:
        problems.append(f"{where}.inherit needs a parent grid")
    if "init_from" in g.get("fixed", {}) or "init_from" in inherit:
        problems.append(f"{where}: init_from is set by `parent`, not by hand")
    return (str(parent) if parent is not None else None), tuple(inherit)


def _axes(value: Any, where: str, problems: list[str]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    if not isinstance(value, dict):
        problems.append(f"{where}.axes must be a mapping of axis name -> list of values")
        return ()
    axes = []
    for name, values in value.items():
        if not isinstance(values, list):
            problems.append(f"{where}.axes.{name} must be a list (got {values!r})")
        elif not values:
            problems.append(f"{where}.axes.{name} is empty")
        else:
            for v in values:
                keys = v.keys() if isinstance(v, dict) else [name]
                problems.extend(
                    f"{where}.axes.{name}: unknown hyperparameter {k!r}"
                    for k in keys
                    if k not in TRIAL_KEYS
                )
            # Keep what is known, so the values' own problems can be reported too.
            values = [
                {k: x for k, x in v.items() if k in TRIAL_KEYS} if isinstance(v, dict) else v
                for v in values
                if isinstance(v, dict) or name in TRIAL_KEYS
            ]
            if values:
                axes.append((str(name), tuple(values)))
    return tuple(axes)


def _dataclass(cls: Any, value: Any, where: str, problems: list[str]) -> Any:
    """Build settings dataclass `cls` from a mapping, collecting its problems."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        problems.append(f"{where} must be a mapping")
        return cls()
    names = {f.name for f in fields(cls)}
    problems.extend(
        f"{where}: unknown key {k!r} (valid: {', '.join(sorted(names))})"
        for k in value
        if k not in names
    )
    kwargs = {k: v for k, v in value.items() if k in names}
    if cls is CertifySpec and "ddrs" in kwargs:
        kwargs["ddrs"] = _ddrs(kwargs["ddrs"], f"{where}.ddrs", problems)
    obj = cls(**kwargs)
    problems.extend(f"{where}.{p}" for p in obj.problems())
    return obj


def _ddrs(value: Any, where: str, problems: list[str]) -> DDRSSettings | None:
    """`ddrs:` in a certify block: null/false (off), true or {} (defaults), or settings."""
    if value is None or value is False:
        return None
    if value is True:
        return DDRSSettings()
    if isinstance(value, DDRSSettings):
        return value
    if not isinstance(value, dict):
        problems.append(f"{where} must be true, false or a mapping of settings")
        return None
    names = {f.name for f in fields(DDRSSettings)}
    problems.extend(
        f"{where}: unknown key {k!r} (valid: {', '.join(sorted(names))})"
        for k in value
        if k not in names
    )
    return DDRSSettings(**{k: v for k, v in value.items() if k in names})
