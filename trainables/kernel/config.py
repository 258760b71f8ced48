"""`TrialConfig`: one training trial, completely described, validated, hashable.

The fields are declared, documented and checked by concern in `trainables.kernel.config_parts`
(what is trained, the attack, the other methods' hyperparameters, DDRS training,
self-training, optimisation, how the trial runs); each method's settings and their defaults
are named once in `trainables.methods.REGISTRY`. This module composes them and owns the
resolution of a config (defaults filled in, unused settings nulled) and its identity: the
trial_id, a hash of the resolved flat config. Pure Python (no torch) so the control plane can
validate a whole grid before Ray starts.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from trainables.kernel.catalog import DEFAULT_ARCH
from trainables.kernel.config_parts import (
    DEVICE_PIPELINE_DATASETS,
    AttackPart,
    MethodPart,
    ModelPart,
    OptimisationPart,
    RunPart,
    SelfTrainingPart,
)
from trainables.kernel.ddrs_settings import DDRSPart
from trainables.kernel.errors import ConfigError
from trainables.kernel.field_types import float_fields, type_problems
from trainables.methods import (
    METHOD_SETTINGS,
    PROTOCOL,
    REGISTRY,
    FromScratch,
    SigmaTimes,
)

# Fields added after trials were stored, each with the value its behaviour had before it
# existed. At that value a field is no part of the trial_id (a config that trains as before
# keeps its id), and a stored resolved config (every other field present, as `to_dict` wrote
# it) that lacks the field reads it with that value (it was trained that way).
ADDED_FIELDS: dict[str, Any] = {
    "normalize_input": True,
    "stability_loss": "kl",
    "macer_deferred": False,
    "lr_step_offset": 0,
    "scale_input": True,
    "train_multi_noise": True,
    "ddrs_macer_loss": "macer",
    "ddrs_noise_pairing": "own",
    "lr_end_drop": True,
}


# The parts are listed last to first: a dataclass takes its bases' fields from the last base
# on, so the fields (and the results' columns) keep the order of config_parts.
@dataclass(frozen=True)
class TrialConfig(
    RunPart, OptimisationPart, SelfTrainingPart, DDRSPart, MethodPart, AttackPart, ModelPart
):
    """One trial. Defaults are the SmoothAdv paper's CIFAR-10 protocol (appendix D), but where
    the method's row (`trainables.methods.REGISTRY`) gives its code's (MACER: main.py's)."""

    def __post_init__(self) -> None:
        if isinstance(self.amp, bool):  # the field's former type
            object.__setattr__(self, "amp", "fp16" if self.amp else "off")
        self._update(self._protocol())  # before the type checks: epochs, lr, ... typed as set
        problems = type_problems(self)
        if problems:
            raise ConfigError(problems)
        self._update(self._defaults())
        problems = self.problems()
        if problems:
            raise ConfigError(problems)
        self._update(float_fields(self))  # 1 and 1.0 must hash to the same trial_id
        self._update(self._unused())

    def _update(self, changes: dict[str, Any]) -> None:
        for name, value in changes.items():
            object.__setattr__(self, name, value)

    def _protocol(self) -> dict[str, Any]:
        """Values for the shared fields left unset (None): the method's protocol
        (`Method.protocol` over `PROTOCOL`; under DDRS training `PROTOCOL`, whatever the
        method). Before the type checks, so it reads only the method's name, and whether DDRS
        and self-training are on and where the model starts (`FromScratch`)."""
        method = REGISTRY.get(self.method) if isinstance(self.method, str) else None
        ddrs = self.ddrs_start_epoch is not None
        protocol = {**PROTOCOL, **(method.protocol if method and not ddrs else {})}
        return {
            name: self._default_value(value)
            for name, value in protocol.items()
            if getattr(self, name) is None
        }

    def _defaults(self) -> dict[str, Any]:
        """Values for the settings left unset (None) that the method or DDRS or self-training
        fill in; before validation (a method's required settings then count as set)."""
        method = REGISTRY.get(self.method)
        changes: dict[str, Any] = {}
        for name, value in (method.defaults if method else {}).items():
            if getattr(self, name) is None:
                changes[name] = self._default_value(value)
        if self.ddrs_start_epoch is not None:
            changes.update(self.ddrs_resolved(self.method, self.dataset))
        if self.self_training:
            changes.update(self.self_training_resolved())
        return changes

    def _default_value(self, value: Any) -> Any:
        """A default of the method's row as this trial takes it (`SigmaTimes`: scaled by σ;
        `FromScratch`: by where the model starts)."""
        if isinstance(value, SigmaTimes):
            return value.factor * self.sigma if self.sigma > 0 else None
        if isinstance(value, FromScratch):
            scratch = self.init_from is None and not self.self_training
            return value.scratch if scratch and self.dataset in value.datasets else value.other
        return value

    def _unused(self) -> dict[str, Any]:
        """After validation: the default arch, and None for every setting the trial does not
        use (the method's other settings, scale_input without an input layer,
        train_multi_noise at m_train 1, lr_end_drop where it moves no drop, DDRS or
        self-training when off, DDRS's σ ascent at K = 0 (and its start 0:
        `DDRSPart.ddrs_unused`), one process)."""
        changes: dict[str, Any] = {}
        if self.arch is None:
            changes["arch"] = DEFAULT_ARCH[self.dataset]
        changes.update(dict.fromkeys(METHOD_SETTINGS - REGISTRY[self.method].used(self.attack)))
        if not self.normalize_input:  # no input layer: nothing to scale
            changes["scale_input"] = None
        if self.m_train == 1:  # one noise per input either way
            changes["train_multi_noise"] = None
        if self.lr_end_drop_unused():  # the same drops either way
            changes["lr_end_drop"] = None
        if self.data_parallel == 1:  # one process is the ordinary trial (and its trial_id)
            changes["data_parallel"] = None
        if self.ddrs_start_epoch is None:
            changes.update(self.ddrs_resolved())
        changes.update(self.ddrs_unused())
        if not self.self_training:
            changes.update(self.self_training_resolved())
        return changes

    def problems(self) -> list[str]:
        """All problems with this configuration, each naming its field."""
        p = type_problems(self)
        if p:
            return p
        method = REGISTRY.get(self.method)  # None: unknown, which must not hide the others
        ddrs = self.ddrs_start_epoch is not None
        return [
            *self.model_problems(method),
            *self.attack_problems(method),
            *self.method_problems(method),
            *(method.problems(self) if method else ()),
            *self.ddrs_problems(self.epochs, self.method),
            *self.self_training_problems(self.dataset, ddrs),
            *self.optimisation_problems(),
            *self.run_problems(self.dataset, self.batch_size, ddrs or self.pseudo_data is not None),
        ]

    # ------------------------------------------------------------------ identity
    def to_dict(self) -> dict[str, Any]:
        # Every field holds a scalar (str, int, float, bool, None): a shallow dict is the
        # same as dataclasses.asdict, without its deep copy of each value.
        return {name: getattr(self, name) for name in _FIELD_NAMES}

    def identity(self) -> dict[str, Any]:
        """The resolved hyperparameters that determine the trained model.

        Fields a method does not use (None) are left out, so adding a new method's
        hyperparameters later keeps every existing trial_id (and its results) valid; so are
        fields added later at the value their behaviour had before (`ADDED_FIELDS`). `amp`
        off/fp16 take the form they were hashed in when it was a bool (false/true)."""
        identity = {
            k: v
            for k, v in self.to_dict().items()
            if k not in ENVIRONMENT_FIELDS and v is not None and not _as_before(k, v)
        }
        identity["amp"] = _AMP_IDENTITY.get(self.amp, self.amp)
        return identity

    @functools.cached_property  # frozen, so computed once (the driver asks it thousands of times)
    def trial_id(self) -> str:
        """Stable id: a hash of the resolved config (not of Ray's trial name)."""
        blob = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrialConfig:
        """Build from a plain mapping; unknown keys are reported with the other problems. A
        stored resolved config written before some fields existed (it holds every other field)
        reads those with the value their behaviour had then (`ADDED_FIELDS`), so it keeps its
        trial_id rather than taking today's defaults."""
        names = {f.name for f in fields(cls)}
        if d.keys() >= _STORED_BEFORE:
            d = {**ADDED_FIELDS, **d}
        unknown = sorted(set(d) - names)
        problems = [f"unknown key {k!r} (valid: {', '.join(sorted(names))})" for k in unknown]
        try:
            cfg = cls(**{k: v for k, v in d.items() if k in names})
        except ConfigError as e:
            raise ConfigError(problems + e.problems) from None
        if problems:
            raise ConfigError(problems)
        return cfg

    def replace(self, **changes: Any) -> TrialConfig:
        return dataclasses.replace(self, **changes)


T = TypeVar("T")


def required(value: T | None, name: str) -> T:
    """A setting this trial uses, so resolution and validation have made sure it is set: a
    method's (named by its row in `trainables.methods.REGISTRY`), DDRS training's or
    self-training's when on, `arch` (resolved from the data set)."""
    if value is None:
        raise ConfigError([f"{name} is unset but the trial uses it"])
    return value


_FIELD_NAMES = tuple(f.name for f in fields(TrialConfig))
# The fields marked as environment in config_parts: no part of the trial_id.
ENVIRONMENT_FIELDS = frozenset(f.name for f in fields(TrialConfig) if f.metadata.get("environment"))
_AMP_IDENTITY = {"off": False, "fp16": True}
# The fields every stored resolved config has held (those of the first stored trials).
_STORED_BEFORE = frozenset(_FIELD_NAMES) - set(ADDED_FIELDS)


def _as_before(name: str, value: Any) -> bool:
    """Whether `value` of field `name` is the behaviour from before that field existed."""
    return (
        name in ADDED_FIELDS
        and value == ADDED_FIELDS[name]
        and type(value) is type(ADDED_FIELDS[name])
    )


def pipeline_for(cfg: TrialConfig) -> str:
    """The data pipeline a trial uses: "device" or "loader" (resolving "auto")."""
    if cfg.data_pipeline != "auto":
        return cfg.data_pipeline
    return "device" if cfg.dataset in DEVICE_PIPELINE_DATASETS else "loader"
