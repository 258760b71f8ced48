"""`TrialConfig`: one training trial, completely described, validated, hashable.

Pure Python (no torch) so the control plane can validate a whole grid before Ray starts.
The name lists here are the single source of truth; the model, data and method registries
are keyed by them and a test checks they agree.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import types
import typing
from dataclasses import dataclass, fields
from typing import Any

DATASETS = ("cifar10", "imagenet", "mnist", "digits", "imagenet32")
# Classes per data set (= trainables.datasets.INFO, which imports torch; a test checks they agree).
NUM_CLASSES = {"cifar10": 10, "imagenet": 1000, "mnist": 10, "digits": 10, "imagenet32": 1000}
# Input dimension d = C·H·W of a model input (= INFO[...].dim; ℓ∞ radius implied by ℓ2: r/√d).
INPUT_DIM = {"cifar10": 3072, "imagenet": 150_528, "mnist": 784, "digits": 64, "imagenet32": 3072}
# Test (validation) split sizes of the standard files; digits: this project's split of sklearn's.
STANDARD_TEST_SIZE = {"cifar10": 10_000, "imagenet": 50_000, "mnist": 10_000, "digits": 450,
                      "imagenet32": 50_000}  # fmt: skip
ARCHS = ("cifar_resnet20", "cifar_resnet56", "cifar_resnet110", "resnet50", "lenet", "digits_cnn")
DEFAULT_ARCH = {
    "cifar10": "cifar_resnet110",
    "imagenet": "resnet50",
    "mnist": "lenet",
    "digits": "digits_cnn",
    "imagenet32": "cifar_resnet110",  # pre-training for CIFAR-10 (SmoothAdv NeurIPS appendix E.1)
}
METHODS = (
    "gaussian", "smoothadv", "vanilla_pgd", "pgd_noise", "smoothmix", "macer", "consistency", "stability",
)  # fmt: skip
ATTACKS = ("pgd", "ddn")
WARMUP_SCHEDULES = ("reference", "paper")  # `methods.base.warmup_factor`
# Mixed-precision training (`amp`): off (fp32), fp16 (autocast + GradScaler, CUDA only) or bf16
# (autocast, no scaler: CUDA with bf16, or a CPU with bf16 instructions). `amp` was a bool
# before: true/false (and YAML's on/off) still mean fp16/off.
AMP_MODES = ("off", "fp16", "bf16")
# How training batches are made (`data_pipeline`, `trainables.pipeline`): "device" holds the
# split on the trial's device and crops/flips there; "loader" is a torch DataLoader with
# `num_workers` worker processes; "auto" is device for CIFAR-10, MNIST and digits, loader for
# ImageNet (image files) and ImageNet32 (3.7 GiB: too big to copy onto every packed trial's GPU).
DATA_PIPELINES = ("auto", "device", "loader")
DEVICE_PIPELINE_DATASETS = ("cifar10", "mnist", "digits")  # auto -> device

# Hyperparameters only some methods use; for the others they resolve to None (a null column,
# and no part of the trial_id).
_ATTACK_FIELDS = ("attack", "epsilon", "steps", "warmup_epochs", "warmup_schedule")
_DDN_FIELDS = ("ddn_init_norm", "ddn_gamma")
_MIX_FIELDS = ("eta", "mix_alpha", "mix_step", "mix_maxnorm", "mix_detach")
METHOD_FIELDS: dict[str, tuple[str, ...]] = {
    "gaussian": ("m_train",),
    "smoothadv": ("m_train", *_ATTACK_FIELDS, *_DDN_FIELDS),
    "vanilla_pgd": _ATTACK_FIELDS,
    "pgd_noise": ("m_train", *_ATTACK_FIELDS),
    "smoothmix": ("m_train", "steps", "warmup_epochs", *_MIX_FIELDS),
    "macer": ("m_train", "lam", "macer_beta", "macer_gamma"),
    "consistency": ("m_train", "lam", "eta"),
    "stability": ("lam",),
}
OPTIONAL_FIELDS = frozenset(f for fs in METHOD_FIELDS.values() for f in fs)
# Values of a method's hyperparameters left unset (None): the papers' CIFAR-10 defaults.
# SmoothMix's step size mix_alpha defaults to 2σ (Jeong et al. 2021).
METHOD_DEFAULTS: dict[str, dict[str, Any]] = {
    "smoothmix": {"eta": 5.0, "mix_step": 0, "mix_detach": False},
    "macer": {"lam": 12.0, "macer_beta": 16.0, "macer_gamma": 8.0},  # Zhai et al. 2020
    "consistency": {"lam": 10.0, "eta": 0.5},  # Jeong & Shin 2020 (λ=20 at σ=0.25)
    "stability": {"lam": 2.0},  # Li et al. 2019, as the SmoothMix paper ran it
}

# DDRS training (Alfarra et al. 2022, Algorithm 2): from epoch `ddrs_start_epoch` on, every
# training input x is trained with its own σ_x, found by OptimizeSigma (K = ddrs_iterations
# ascent steps of rate ddrs_lr with ddrs_samples noise draws) started from σ_x of its previous
# visit (cfg.sigma before the first). ddrs_start_epoch None: off, and every ddrs_* field
# resolves to None (no part of the trial_id). Defaults: lr 1e-4 and n = 1 as in the paper; the
# paper's K = 100 is its certification setting: training repeats the ascent at every visit,
# carrying σ_x over, and the authors' training scripts use 10 (CIFAR-10 MACER) or 1 (ImageNet)
# steps per visit; 10 costs about 10 extra forward-backward passes per training chunk.
DDRS_FIELDS = ("ddrs_start_epoch", "ddrs_iterations", "ddrs_lr", "ddrs_samples")
DDRS_DEFAULTS: dict[str, Any] = {"ddrs_iterations": 10, "ddrs_lr": 1e-4, "ddrs_samples": 1}
DDRS_METHODS = ("gaussian", "smoothadv", "macer")  # the paper's three (Cohen, SmoothAdv, MACER)

# Self-training (SmoothAdv NeurIPS appendix E.2; `trainables.pseudo`): after every labelled
# batch, `pseudo_ratio` batches of the same size from the pseudo-labelled data, trained by the
# same method with the loss scaled by `pseudo_eta` (η ∈ {0.1, 0.5, 1.0} in the paper). On when
# `pseudo_data` (where the data is: an environment field) and `pseudo_fingerprint` (what it
# holds: identity) are set; off (both None) every pseudo_* field resolves to None.
PSEUDO_FIELDS = ("pseudo_fingerprint", "pseudo_eta", "pseudo_ratio")
PSEUDO_DEFAULTS: dict[str, Any] = {"pseudo_ratio": 1}
_FINGERPRINT = re.compile(r"[0-9a-f]{16}")

_TRIAL_ID = re.compile(r"[0-9a-f]{12}")

# Where the data lives, how it is loaded, and how the model's forward is laid out and compiled
# do not change the trained model's identity (a different data pipeline gives other random
# draws of the same distributions, as num_workers does).
ENVIRONMENT_FIELDS = frozenset(
    {"data_dir", "download", "num_workers", "pseudo_data", "channels_last", "compile",
     "data_pipeline"}
)  # fmt: skip


class ProblemsError(ValueError):
    """Several problems found together; `problems` has one line each, reported at once."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


class ConfigError(ProblemsError):
    """Problems with a trial configuration."""


@dataclass(frozen=True)
class DDRSSettings:
    """OptimizeSigma's settings; defaults from the paper (K = 100 steps of lr 1e-4, n = 1)."""

    iterations: int = 100
    lr: float = 1e-4
    samples: int = 1
    min_sigma: float = 1e-3

    def problems(self) -> list[str]:
        p = []
        if not (isinstance(self.iterations, int) and self.iterations >= 1):
            p.append(f"iterations must be an integer >= 1 (got {self.iterations!r})")
        if not (isinstance(self.samples, int) and self.samples >= 1):
            p.append(f"samples must be an integer >= 1 (got {self.samples!r})")
        for name in ("lr", "min_sigma"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                p.append(f"{name} must be a number > 0 (got {value!r})")
        return p

    @property
    def tag(self) -> str:
        return f"ddrs-K{self.iterations}-lr{self.lr:g}-n{self.samples}-min{self.min_sigma:g}"


@dataclass(frozen=True)
class TrialConfig:
    """One trial. Defaults are the SmoothAdv paper's CIFAR-10 protocol (appendix D)."""

    # -- what is trained
    dataset: str = "cifar10"
    arch: str | None = None  # None -> DEFAULT_ARCH[dataset]
    method: str = "smoothadv"  # gaussian | smoothadv | vanilla_pgd | pgd_noise
    sigma: float = 0.25  # training noise level, [0,1] pixel units; also σ for certification
    m_train: int | None = 1  # noise draws per input (attack estimate + augmentation); 1,2,4,8
    attack: str | None = "pgd"  # pgd | ddn (vanilla baselines: pgd only)
    epsilon: float | None = 1.0  # ℓ2 attack radius; the paper's floats 0.25, 0.5, 1.0, 2.0
    steps: int | None = 1  # attack steps T (2..10 in the paper's grid)
    warmup_epochs: int | None = 10  # W: ε ramps up over the first W epochs (W <= 1: no warm-up)
    warmup_schedule: str | None = "reference"  # min(ε,(e+1)ε/W) as train_pgd.py; "paper": 0 at e=0
    ddn_init_norm: float | None = None  # DDN's initial norm; None: the epoch's ε (reference)
    ddn_gamma: float | None = 0.05  # DDN norm update factor γ
    lam: float | None = None  # λ: regularizer weight (macer 12, consistency 10/20, stability 2)
    eta: float | None = None  # η: smoothmix mixup weight (5), consistency entropy weight (0.5)
    mix_alpha: float | None = None  # SmoothMix ascent step α (default 2σ)
    mix_step: int | None = None  # SmoothMix: 0 = mix with x; 1 = the one-step adversary
    mix_maxnorm: float | None = None  # SmoothMix: optional ℓ2 bound on the adversary (None: none)
    mix_detach: bool | None = None  # SmoothMix: stop gradients through the mixed target
    macer_beta: float | None = None  # MACER inverse temperature β (16)
    macer_gamma: float | None = None  # MACER hinge margin γ (8)
    # -- DDRS training: data-dependent σ per training input (None: off; see DDRS_FIELDS)
    ddrs_start_epoch: int | None = None  # 0-based epoch from which σ_x is optimized
    ddrs_iterations: int | None = None  # OptimizeSigma steps K per visit (10)
    ddrs_lr: float | None = None  # OptimizeSigma step size α (1e-4)
    ddrs_samples: int | None = None  # noise draws n per OptimizeSigma step (1)
    # -- self-training: pseudo-labelled batches interleaved (None: off; see PSEUDO_FIELDS)
    pseudo_data: str | None = None  # absolute path of an .npz or <label>/<image> directory
    pseudo_fingerprint: str | None = None  # its content (python -m trainables.pseudo PATH)
    pseudo_eta: float | None = None  # η: weight of the pseudo-labelled loss
    pseudo_ratio: int | None = None  # pseudo-labelled batches after each labelled batch (1)
    # -- optimisation: SGD, step schedule
    epochs: int = 150
    batch_size: int = 256  # inputs per loader batch; split into m_train chunks of batch/m
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4
    lr_step_size: int = 50  # epochs between lr drops
    lr_gamma: float = 0.1
    # -- data and runtime
    train_subset: int | None = None  # use only this many training inputs (smoke runs)
    eval_subset: int | None = None  # evaluate clean/noisy accuracy on this many test inputs
    data_dir: str | None = None
    download: bool = False
    num_workers: int = 0  # DataLoader worker processes (data_pipeline loader)
    amp: str = "off"  # off | fp16 | bf16 (see AMP_MODES); fp16 on a CPU trains in fp32
    seed: int = 0
    channels_last: bool = False  # environment: NHWC weights/activations (faster convolutions)
    compile: bool = False  # environment: torch.compile the model (eager where it cannot)
    data_pipeline: str = "auto"  # environment: auto | device | loader (see DATA_PIPELINES)
    # -- two-stage sweeps: fine-tune the model of another trial (its trial_id). Its weights are
    # loaded before the first epoch, except the input normalization (this data set's) and the
    # last (logit) layer, which is re-initialized (SmoothAdv NeurIPS appendix E.1).
    init_from: str | None = None
    # -- synchronous data-parallel SGD in one trial: this many processes (one per GPU, with
    # `resources: {gpu: k}`), batch_size split among them (`trainables.distributed`). None: 1.
    data_parallel: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.amp, bool):  # the field's former type
            object.__setattr__(self, "amp", "fp16" if self.amp else "off")
        problems = _type_problems(self)
        if problems:
            raise ConfigError(problems)
        for name, value in METHOD_DEFAULTS.get(self.method, {}).items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        if self.ddrs_start_epoch is not None:
            for name, value in DDRS_DEFAULTS.items():
                if getattr(self, name) is None:
                    object.__setattr__(self, name, value)
        if self.pseudo_data is not None or self.pseudo_fingerprint is not None:
            for name, value in PSEUDO_DEFAULTS.items():
                if getattr(self, name) is None:
                    object.__setattr__(self, name, value)
        if self.method == "smoothmix" and self.mix_alpha is None and self.sigma > 0:
            object.__setattr__(self, "mix_alpha", 2 * self.sigma)
        problems = self.problems()
        if problems:
            raise ConfigError(problems)
        hints = _hints(type(self))
        for f in fields(self):  # 1 and 1.0 must hash to the same trial_id
            value = getattr(self, f.name)
            if isinstance(value, int) and float in (*typing.get_args(hints[f.name]), hints[f.name]):
                object.__setattr__(self, f.name, float(value))
        if self.arch is None:
            object.__setattr__(self, "arch", DEFAULT_ARCH[self.dataset])
        if self.method in ("vanilla_pgd", "pgd_noise") and self.attack is None:
            object.__setattr__(self, "attack", "pgd")
        used = set(METHOD_FIELDS[self.method])
        if self.attack != "ddn":
            used -= set(_DDN_FIELDS)
        for name in OPTIONAL_FIELDS - used:
            object.__setattr__(self, name, None)
        if self.data_parallel == 1:  # one process is the ordinary trial (and its trial_id)
            object.__setattr__(self, "data_parallel", None)
        if self.ddrs_start_epoch is None:
            for name in DDRS_FIELDS:
                object.__setattr__(self, name, None)
        if self.pseudo_data is None and self.pseudo_fingerprint is None:
            for name in PSEUDO_FIELDS:
                object.__setattr__(self, name, None)

    # ------------------------------------------------------------------ validation
    def problems(self) -> list[str]:
        """All problems with this configuration, each naming its field."""
        p = _type_problems(self)
        if p:
            return p
        p += _choice("dataset", self.dataset, DATASETS)
        p += _choice("method", self.method, METHODS)
        if self.arch is not None:
            p += _choice("arch", self.arch, ARCHS)
        if not self.sigma > 0:
            p.append(f"sigma must be > 0 (got {self.sigma})")
        if self.method in METHOD_FIELDS:  # an unknown method must not hide the other problems
            p += _method_problems(self, METHOD_FIELDS[self.method])
        p += _ddrs_problems(self)
        p += _pseudo_problems(self)
        for name in ("epochs", "batch_size", "lr_step_size"):
            if getattr(self, name) < 1:
                p.append(f"{name} must be >= 1 (got {getattr(self, name)})")
        for name in ("train_subset", "eval_subset"):
            value = getattr(self, name)
            if value is not None and value < 1:
                p.append(f"{name} must be >= 1 or null (got {value})")
        for name in ("lr", "lr_gamma"):
            if not getattr(self, name) > 0:
                p.append(f"{name} must be > 0 (got {getattr(self, name)})")
        p += _data_parallel_problems(self)
        p += _choice("amp", self.amp, AMP_MODES)
        p += _choice("data_pipeline", self.data_pipeline, DATA_PIPELINES)
        if self.data_pipeline == "device" and self.dataset == "imagenet":
            p.append("data_pipeline device needs an in-memory data set (not imagenet's image "
                     "files): use auto or loader")  # fmt: skip
        if self.init_from is not None and not _TRIAL_ID.fullmatch(self.init_from):
            p.append(f"init_from must be a trial_id (12 hex digits, got {self.init_from!r})")
        if self.momentum < 0 or self.weight_decay < 0 or self.num_workers < 0:
            p.append("momentum, weight_decay and num_workers must be >= 0")
        return p

    # ------------------------------------------------------------------ identity
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def identity(self) -> dict[str, Any]:
        """The resolved hyperparameters that determine the trained model.

        Fields a method does not use (None) are left out, so adding a new method's
        hyperparameters later keeps every existing trial_id (and its results) valid. `amp`
        off/fp16 take the form they were hashed in when it was a bool (false/true)."""
        identity = {
            k: v for k, v in self.to_dict().items() if k not in ENVIRONMENT_FIELDS and v is not None
        }
        identity["amp"] = _AMP_IDENTITY.get(self.amp, self.amp)
        return identity

    @property
    def trial_id(self) -> str:
        """Stable id: a hash of the resolved config (not of Ray's trial name)."""
        blob = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrialConfig:
        """Build from a plain mapping; unknown keys are reported with the other problems."""
        names = {f.name for f in fields(cls)}
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


_AMP_IDENTITY = {"off": False, "fp16": True}


def pipeline_for(cfg: TrialConfig) -> str:
    """The data pipeline a trial uses: "device" or "loader" (resolving "auto")."""
    if cfg.data_pipeline != "auto":
        return cfg.data_pipeline
    return "device" if cfg.dataset in DEVICE_PIPELINE_DATASETS else "loader"


# (field, test, requirement) for the method hyperparameters that must be set when used.
_RANGES = (
    ("m_train", lambda v: v >= 1, ">= 1"),
    ("epsilon", lambda v: v >= 0, ">= 0"),
    ("steps", lambda v: v >= 1, ">= 1"),
    ("warmup_epochs", lambda v: v >= 0, ">= 0"),
    ("lam", lambda v: v >= 0, ">= 0"),
    ("eta", lambda v: v >= 0, ">= 0"),
    ("mix_alpha", lambda v: v > 0, "> 0"),
    ("mix_step", lambda v: v in (0, 1), "0 or 1"),
    ("mix_detach", lambda v: True, "true or false"),
    ("macer_beta", lambda v: v > 0, "> 0"),
    ("macer_gamma", lambda v: v > 0, "> 0"),
)


def _method_problems(cfg: TrialConfig, used: tuple[str, ...]) -> list[str]:
    p: list[str] = []
    for name, ok, requirement in _RANGES:
        value = getattr(cfg, name)
        if name in used and (value is None or not ok(value)):
            p.append(f"{name} must be {requirement} for method {cfg.method!r} (got {value})")
    if "mix_maxnorm" in used and cfg.mix_maxnorm is not None and not cfg.mix_maxnorm > 0:
        p.append(f"mix_maxnorm must be > 0 or null (got {cfg.mix_maxnorm})")
    if "attack" in used:
        allowed = ATTACKS if cfg.method == "smoothadv" else ("pgd",)
        if cfg.attack is not None or cfg.method == "smoothadv":
            p += _choice("attack", cfg.attack, allowed, f" for method {cfg.method!r}")
    if cfg.method == "smoothmix" and cfg.mix_step == 1 and cfg.steps == 1:
        p.append(
            "mix_step 1 (the one-step adversary) needs steps >= 2 for method 'smoothmix': "
            "the reference code takes it at the start of step 2, so with steps 1 it trains "
            "exactly as mix_step 0; set mix_step: 0 or steps >= 2"
        )
    if "warmup_schedule" in used:
        p += _choice("warmup_schedule", cfg.warmup_schedule, WARMUP_SCHEDULES)
    if "attack" in used and cfg.attack == "ddn":
        if cfg.ddn_init_norm is not None and not cfg.ddn_init_norm > 0:
            p.append(f"ddn_init_norm must be > 0 or null (the epoch's ε) (got {cfg.ddn_init_norm})")
        if cfg.ddn_gamma is None or not 0 < cfg.ddn_gamma < 1:
            p.append(f"ddn_gamma must be in (0, 1) (got {cfg.ddn_gamma})")
    return p


def _ddrs_problems(cfg: TrialConfig) -> list[str]:
    """DDRS training's fields, checked only when it is on (ddrs_start_epoch set)."""
    start = cfg.ddrs_start_epoch
    if start is None:
        return []
    p: list[str] = []
    if not 0 <= start < cfg.epochs:
        p.append(
            f"ddrs_start_epoch must be in [0, epochs) = [0, {cfg.epochs}) or null (got {start})"
        )
    if cfg.method in METHODS and cfg.method not in DDRS_METHODS:
        p.append(
            f"ddrs_start_epoch: DDRS training supports methods {', '.join(DDRS_METHODS)} "
            f"(got method {cfg.method!r}); set ddrs_start_epoch to null"
        )
    for name in ("ddrs_iterations", "ddrs_samples"):
        value = getattr(cfg, name)
        if value is None or value < 1:
            p.append(f"{name} must be >= 1 when ddrs_start_epoch is set (got {value})")
    if cfg.ddrs_lr is None or not cfg.ddrs_lr > 0:
        p.append(f"ddrs_lr must be > 0 when ddrs_start_epoch is set (got {cfg.ddrs_lr})")
    return p


def _data_parallel_problems(cfg: TrialConfig) -> list[str]:
    k = cfg.data_parallel
    if k is None:
        return []
    if k < 1:
        return [f"data_parallel must be >= 1 or null (got {k})"]
    p = []
    if cfg.batch_size % k:
        p.append(f"batch_size ({cfg.batch_size}) must be a multiple of data_parallel ({k})")
    if k > 1 and (cfg.ddrs_start_epoch is not None or cfg.pseudo_data is not None):
        p.append("data_parallel > 1 does not combine with DDRS training or self-training")
    return p


def _pseudo_problems(cfg: TrialConfig) -> list[str]:
    """Self-training's fields, checked only when it is on (pseudo_data or its fingerprint set)."""
    if cfg.pseudo_data is None and cfg.pseudo_fingerprint is None:
        return []
    if cfg.pseudo_data is None or not cfg.pseudo_data.strip():
        return [
            f"pseudo_data must be the path of the data whose fingerprint is "
            f"{cfg.pseudo_fingerprint} (got {cfg.pseudo_data!r})"
        ]
    p: list[str] = []
    if cfg.pseudo_fingerprint is None or not _FINGERPRINT.fullmatch(cfg.pseudo_fingerprint):
        p.append(
            f"pseudo_fingerprint must be the 16 hex digits printed by `python -m trainables.pseudo "
            f"{cfg.pseudo_data} --dataset {cfg.dataset}` (got {cfg.pseudo_fingerprint!r})"
        )
    if cfg.pseudo_eta is None or not cfg.pseudo_eta >= 0:
        p.append(f"pseudo_eta must be >= 0 when pseudo_data is set (got {cfg.pseudo_eta})")
    if cfg.pseudo_ratio is None or cfg.pseudo_ratio < 1:
        p.append(f"pseudo_ratio must be >= 1 when pseudo_data is set (got {cfg.pseudo_ratio})")
    if cfg.ddrs_start_epoch is not None:
        p.append(
            "pseudo_data: self-training cannot be combined with DDRS training (pseudo-labelled "
            "inputs have no σ_x); set ddrs_start_epoch or pseudo_data to null"
        )
    return p


def _choice(name: str, value: Any, valid: tuple[str, ...], where: str = "") -> list[str]:
    if value in valid:
        return []
    return [f"unknown {name} {value!r}{where} (valid: {', '.join(valid)})"]


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """Resolved field annotations (cached: a 644-trial grid builds thousands of configs)."""
    return typing.get_type_hints(cls)


def type_problems(obj: Any) -> list[str]:
    """Fields of a dataclass instance whose values do not match their annotations
    (int is accepted for float, bool is not accepted for int)."""
    return _type_problems(obj)


def _type_problems(cfg: Any) -> list[str]:
    hints = _hints(type(cfg))
    return [
        f"{f.name} must be {_type_name(hints[f.name])} (got {getattr(cfg, f.name)!r})"
        for f in fields(cfg)
        if not _is_instance(getattr(cfg, f.name), hints[f.name])
    ]


def _is_instance(value: Any, hint: Any) -> bool:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_is_instance(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    args = typing.get_args(hint)
    if args:
        return " or ".join("null" if a is type(None) else a.__name__ for a in args)
    return hint.__name__
