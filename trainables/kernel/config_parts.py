"""The parts a `TrialConfig` is made of, one per concern, each checking its own fields.

`TrialConfig` (trainables.kernel.config) inherits every part, so its fields stay flat
(`cfg.epsilon`, `TrialConfig(epsilon=0.5)`, one column each in the results) while each concern
is declared, documented and validated here in one place. The field order (the parts' order
below, then each part's own) is the order of the results' columns: append new fields at a part's
end.

Each setting's bounds are declared with it (`setting`) and checked by `bounded`; a method's
settings only where used (`trainables.methods.REGISTRY`: each row's `settings`, those of one
attack only with it), what a method refuses beyond them in its row (`checks`), what a concern
refuses of several settings together in its part. `ENVIRONMENT` fields say where and how a
trial runs, not what it trains, and are no part of the trial_id. Pure Python (no torch): the
control plane validates whole grids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from trainables.kernel.catalog import ARCHS, DATASETS
from trainables.kernel.settings import (
    AtLeast,
    Between,
    NotBelow,
    OneOf,
    Positive,
    TrueOrFalse,
    declared,
    setting,
)
from trainables.methods import METHOD_SETTINGS, METHODS, Method

# Field metadata: where the data lives, how it is loaded, and how the model's forward is laid
# out and compiled do not change the trained model's identity (a different data pipeline gives
# other random draws of the same distributions, as num_workers does).
ENVIRONMENT = {"environment": True}
# Field metadata of a method setting whose null is a value where the method uses it (no bound,
# the epoch's ε), not a setting left unset: `bounded` lets it through.
NULL_IS_A_VALUE = {"null_is_a_value": True}

WARMUP_SCHEDULES = ("reference", "paper")  # `methods.base.warmup_factor`
# Stability training's regularizer (`methods.stability`): the cross-entropy of the noisy
# prediction against the clean one (jh-jeong's train_stab.py, the default) or the paper's KL.
STABILITY_LOSSES = ("cross_entropy", "kl")
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
PSEUDO_FIELDS = ("pseudo_data", "pseudo_fingerprint", "pseudo_eta", "pseudo_ratio")
_FINGERPRINT = re.compile(r"[0-9a-f]{16}")
_TRIAL_ID = re.compile(r"[0-9a-f]{12}")


def choice(name: str, value: Any, valid: tuple[str, ...], where: str = "") -> list[str]:
    if value in valid:
        return []
    return [f"unknown {name} {value!r}{where} (valid: {', '.join(valid)})"]


def bounded(
    part: type, trial: Any, method: Method | None, names: tuple[str, ...] = (), when: str = ""
) -> list[str]:
    """The problems of `trial`'s values of the settings `part` declares with a bound (only
    those in `names`, if given), in field order. A method's setting
    (`trainables.methods.METHOD_SETTINGS`) is checked only when the trial's method uses it
    (`Method.used`, with the trial's attack), and must then be set unless its null is a value
    (`NULL_IS_A_VALUE`); with `when` (" when ... is on"), every one must be set; every other
    one always, null letting through a field whose default is null. A choice among names
    (`OneOf` of strings) says "unknown ... (valid: ...)"."""
    p: list[str] = []
    for f in declared(part):
        if names and f.name not in names:
            continue
        bound, value = f.metadata["bound"], getattr(trial, f.name)
        if f.name in METHOD_SETTINGS:
            attack = getattr(trial, "attack", None)
            if method is not None and f.name in method.used(attack):  # None: said by ModelPart
                optional = bool(f.metadata.get("null_is_a_value"))
                where = f" for method {method.name!r}"
                p += bound.unmet(f.name, value, where=where, required=not optional, null=optional)
        elif when:
            p += bound.unmet(f.name, value, where=when, required=True)
        elif isinstance(bound, OneOf) and all(isinstance(c, str) for c in bound.choices):
            p += bound.problems(f.name, value)
        else:
            p += bound.unmet(f.name, value, null=f.default is None)
    return p


@dataclass(frozen=True)
class ModelPart:
    """What is trained: data set, network, method, noise level and noise draws per input."""

    dataset: str = setting("cifar10", "The data set.", OneOf(DATASETS))
    arch: str | None = setting(
        None, "The network (null: catalog.DEFAULT_ARCH[dataset]).", OneOf(ARCHS)
    )
    method: str = setting("smoothadv", "A row of trainables.methods.REGISTRY.", OneOf(METHODS))
    sigma: float = setting(
        0.25,
        "Training noise level, [0,1] pixel units; also σ for certification.",
        Positive(),
    )
    m_train: int | None = setting(
        None,
        "Noise draws per input (attack estimate + augmentation); 1, 2, 4, 8 (null: the "
        "method's protocol, 1; MACER 16).",
        AtLeast(1),
    )
    # The first layer (None: the method's code, `Method.protocol`): (x − μ)/s, x − μ (with
    # scale_input false: SmoothAdv's from-scratch CIFAR-10/ImageNet models) or none (false).
    normalize_input: bool | None = None
    scale_input: bool | None = None  # unused (None) without normalize_input
    # SmoothAdv, m_train > 1: train on all m copies, a step per chunk (train_pgd.py
    # --train-multi-noise, the published runs'), or (false) on x̂ + δ_1, a step per batch.
    train_multi_noise: bool | None = None

    def model_problems(self, method: Method | None) -> list[str]:
        return bounded(ModelPart, self, method)


@dataclass(frozen=True)
class AttackPart:
    """The adversarial attack of SmoothAdv and the PGD baselines (SmoothMix uses steps and
    warmup_epochs for its own ascent)."""

    attack: str | None = "pgd"  # pgd | ddn (the PGD baselines: pgd only)
    epsilon: float | None = setting(
        1.0, "ℓ2 attack radius; the paper's 0.25, 0.5, 1.0, 2.0.", NotBelow(0)
    )
    steps: int | None = setting(1, "Attack steps T (2..10 in the paper's grid).", AtLeast(1))
    warmup_epochs: int | None = setting(
        10, "W: ε ramps up over the first W epochs (W <= 1: no warm-up).", AtLeast(0)
    )
    warmup_schedule: str | None = setting(
        "reference",
        "The warm-up of ε: reference, min(ε, (e+1)ε/W) as train_pgd.py; paper: 0 at epoch 0.",
        OneOf(WARMUP_SCHEDULES),
    )
    ddn_init_norm: float | None = setting(
        None,
        "DDN's initial norm (null: the epoch's ε, as the reference).",
        Positive(),
        metadata=NULL_IS_A_VALUE,
    )
    ddn_gamma: float | None = setting(0.05, "DDN's norm update factor γ.", Between(0, 1))

    def attack_problems(self, method: Method | None) -> list[str]:
        """The declared bounds of the settings the method uses with this attack, and the
        attack among the method's (its row's `attacks`)."""
        p = bounded(AttackPart, self, method)
        if method is not None and "attack" in method.settings:
            p += choice("attack", self.attack, method.attacks, f" for method {method.name!r}")
        return p


@dataclass(frozen=True)
class MethodPart:
    """The hyperparameters of SmoothMix, MACER, consistency and stability training."""

    lam: float | None = setting(
        None, "λ: regularizer weight (macer 12, consistency 10/20, stability 2).", NotBelow(0)
    )
    eta: float | None = setting(
        None,
        "η: SmoothMix mixup weight (5), consistency entropy weight (0.5).",
        NotBelow(0),
    )
    mix_alpha: float | None = setting(None, "SmoothMix ascent step α (default 2σ).", Positive())
    mix_step: int | None = setting(
        None, "SmoothMix: 0 = mix with x; 1 = the one-step adversary.", OneOf((0, 1))
    )
    mix_maxnorm: float | None = setting(
        None,
        "SmoothMix: an ℓ2 bound on the adversary (null: none).",
        Positive(),
        metadata=NULL_IS_A_VALUE,
    )
    mix_detach: bool | None = setting(
        None, "SmoothMix: stop gradients through the mixed target.", TrueOrFalse()
    )
    macer_beta: float | None = setting(None, "MACER inverse temperature β (16).", Positive())
    macer_gamma: float | None = setting(None, "MACER hinge margin γ (8).", Positive())
    stability_loss: str | None = setting(
        None, "cross_entropy (train_stab.py) or kl (the paper).", OneOf(STABILITY_LOSSES)
    )
    macer_deferred: bool | None = setting(
        None,
        "MACER: λ = 0 until the first LR drop (epochs < lr_step_size + lr_step_offset), as "
        "jh-jeong's train_macer.py --deferred and the SmoothMix appendix C.2's σ = 1.0 model.",
        TrueOrFalse(),
    )

    def method_problems(self, method: Method | None) -> list[str]:
        return bounded(MethodPart, self, method)


@dataclass(frozen=True)
class SelfTrainingPart:
    """Self-training (SmoothAdv NeurIPS appendix E.2; `trainables.pseudo`): after each labelled
    batch, `pseudo_ratio` batches of its size of pseudo-labelled data, trained by the same
    method with the loss scaled by `pseudo_eta` (η ∈ {0.1, 0.5, 1.0} in the paper). On when
    `pseudo_data` (where: an environment field) and `pseudo_fingerprint` (what: identity) are
    set; off (both None), every pseudo_* field resolves to None."""

    # the absolute path of an .npz or <label>/<image> directory
    pseudo_data: str | None = field(default=None, metadata=ENVIRONMENT)
    pseudo_fingerprint: str | None = None  # its content (python -m trainables.pseudo PATH)
    pseudo_eta: float | None = setting(
        None, "η: the weight of the pseudo-labelled loss.", NotBelow(0)
    )
    pseudo_ratio: int | None = setting(
        None, "Pseudo-labelled batches after each labelled batch (null: 1).", AtLeast(1)
    )

    @property
    def self_training(self) -> bool:
        return self.pseudo_data is not None or self.pseudo_fingerprint is not None

    def self_training_resolved(self) -> dict[str, Any]:
        """Off: every field None; on: pseudo_ratio 1 if unset."""
        if not self.self_training:
            return dict.fromkeys(PSEUDO_FIELDS)
        return {"pseudo_ratio": 1} if self.pseudo_ratio is None else {}

    def self_training_problems(self, dataset: str, ddrs: bool) -> list[str]:
        """Checked only when it is on; `ddrs`: whether DDRS training is on."""
        if not self.self_training:
            return []
        if self.pseudo_data is None or not self.pseudo_data.strip():
            return [
                f"pseudo_data must be the path of the data whose fingerprint is "
                f"{self.pseudo_fingerprint} (got {self.pseudo_data!r})"
            ]
        p: list[str] = []
        if self.pseudo_fingerprint is None or not _FINGERPRINT.fullmatch(self.pseudo_fingerprint):
            p.append(
                f"pseudo_fingerprint must be the 16 hex digits printed by `python -m "
                f"trainables.pseudo {self.pseudo_data} --dataset {dataset}` "
                f"(got {self.pseudo_fingerprint!r})"
            )
        p += bounded(SelfTrainingPart, self, None, when=" when pseudo_data is set")
        if ddrs:
            p.append(
                "pseudo_data: self-training cannot be combined with DDRS training (pseudo-labelled "
                "inputs have no σ_x); set ddrs_start_epoch or pseudo_data to null"
            )
        return p


@dataclass(frozen=True)
class OptimisationPart:
    """SGD with momentum and a step schedule: the LR is multiplied by lr_gamma entering each
    0-based epoch k·lr_step_size + lr_step_offset (k = 1, 2, ... while k·lr_step_size <
    epochs: `lr_drops`).

    The training protocol's numbers (epochs, batch_size, lr, weight_decay, lr_step_size) left
    unset (null) are the method's (`Method.protocol` over `PROTOCOL` in trainables.methods:
    150, 256, 0.1, 1e-4, 50; MACER main.py's 440, 64, 0.01, 5e-4, 200), filled in before the
    type checks: on a `TrialConfig` they are always set, as annotated."""

    epochs: int = setting(
        None, "Training epochs (null: the method's protocol, 150; MACER 440).", AtLeast(1)
    )
    batch_size: int = setting(
        None,
        "Inputs per loader batch; split into m_train chunks of batch/m (null: the method's "
        "protocol, 256; MACER 64).",
        AtLeast(1),
    )
    lr: float = setting(
        None, "SGD's learning rate (null: the method's protocol, 0.1; MACER 0.01).", Positive()
    )
    momentum: float = setting(0.9, "SGD's momentum.", NotBelow(0))
    weight_decay: float = setting(
        None, "SGD's weight decay (null: the method's protocol, 1e-4; MACER 5e-4).", NotBelow(0)
    )
    lr_step_size: int = setting(
        None, "Epochs between LR drops (null: the method's protocol, 50; MACER 200).", AtLeast(1)
    )
    lr_gamma: float = setting(0.1, "The factor of each LR drop.", Positive())
    # Where the drops fall, as the method's reference code steps its scheduler (None: the
    # method's, `Method.protocol`): 0 Cohen's and SmoothAdv's (step(epoch) before the epoch),
    # 1 jh-jeong's (after it), -1 MACER's (step() before each 1-based epoch).
    lr_step_offset: int | None = None
    # Whether a negative offset also moves the milestone at or after `epochs` into the run: a
    # drop in the last epoch that no other method's schedule has (MACER at 150 epochs, step
    # 50: entering 49, 99 and 149). True is sweeper's rule before issue 40 §5 (its trials keep
    # their ids); false (`PROTOCOL`) the drops of StepLR over the run, each moved by the offset
    # (main.py's MultiStepLR([200, 400]) over 440 epochs). None where the two rules agree.
    lr_end_drop: bool | None = None

    def lr_drops(self) -> list[int]:
        """The 0-based epochs entering which the LR is multiplied by lr_gamma: each milestone
        k·lr_step_size (k >= 1) moved by lr_step_offset, where the moved epoch is in the run
        and (unless lr_end_drop) the milestone too."""
        return self._drops(bool(self.lr_end_drop))

    def _drops(self, end_drop: bool) -> list[int]:
        size, offset = self.lr_step_size, self.lr_step_offset or 0
        moved = range(size + offset, self.epochs, size)  # k·size + offset inside the run
        return [epoch for epoch in moved if end_drop or epoch - offset < self.epochs]

    def lr_end_drop_unused(self) -> bool:
        """Whether both rules give this schedule the same drops (lr_end_drop is then None)."""
        return self._drops(True) == self._drops(False)

    def optimisation_problems(self) -> list[str]:
        p = []
        offset, size = self.lr_step_offset, self.lr_step_size
        if offset is not None and size >= 1 and not -size < offset < size:
            p.append(
                f"lr_step_offset must be in (-lr_step_size, lr_step_size) = "
                f"({-self.lr_step_size}, {self.lr_step_size}) (got {offset})"
            )
        return p + bounded(OptimisationPart, self, None)


@dataclass(frozen=True)
class RunPart:
    """How the trial runs: data subsets, precision, seed, starting weights and processes; and
    the environment (where the data is, how it is loaded, memory layout, compilation)."""

    train_subset: int | None = setting(
        None, "Use only this many training inputs (smoke runs).", AtLeast(1)
    )
    eval_subset: int | None = setting(
        None, "Evaluate clean/noisy accuracy on this many test inputs.", AtLeast(1)
    )
    data_dir: str | None = field(default=None, metadata=ENVIRONMENT)
    download: bool = field(default=False, metadata=ENVIRONMENT)
    num_workers: int = setting(0, "DataLoader worker processes.", AtLeast(0), metadata=ENVIRONMENT)
    amp: str = setting(
        "off", "off, fp16 or bf16 (AMP_MODES); fp16 on a CPU trains in fp32.", OneOf(AMP_MODES)
    )
    seed: int = 0
    channels_last: bool = field(default=False, metadata=ENVIRONMENT)  # NHWC (faster convolutions)
    compile: bool = field(default=False, metadata=ENVIRONMENT)  # torch.compile (eager where not)
    data_pipeline: str = setting(
        "auto",
        "How batches are made (DATA_PIPELINES).",
        OneOf(DATA_PIPELINES),
        metadata=ENVIRONMENT,
    )
    # Two-stage sweeps: fine-tune another trial's model (its trial_id), loaded before the first
    # epoch but for the input layer (this trial's) and the logit layer (new; NeurIPS app. E.1).
    init_from: str | None = None
    # Synchronous data-parallel SGD in one trial: this many processes (one per GPU, with
    # `resources: {gpu: k}`), batch_size split among them (`trainables.distributed`). None: 1.
    data_parallel: int | None = setting(
        None, "Data-parallel processes of one trial, one per GPU (null: 1).", AtLeast(1)
    )

    def run_problems(self, dataset: str, batch_size: int, ddrs_or_pseudo: bool) -> list[str]:
        """`ddrs_or_pseudo`: whether DDRS training or self-training is on."""
        p = bounded(RunPart, self, None, ("train_subset", "eval_subset", "num_workers"))
        p += bounded(RunPart, self, None, ("data_parallel",))
        p += self._data_parallel_problems(batch_size, ddrs_or_pseudo)
        p += bounded(RunPart, self, None, ("amp", "data_pipeline"))
        if self.data_pipeline == "device" and dataset == "imagenet":
            p.append(
                "data_pipeline device needs an in-memory data set (not imagenet's image "
                "files): use auto or loader"
            )
        if self.init_from is not None and not _TRIAL_ID.fullmatch(self.init_from):
            p.append(f"init_from must be a trial_id (12 hex digits, got {self.init_from!r})")
        return p

    def _data_parallel_problems(self, batch_size: int, ddrs_or_pseudo: bool) -> list[str]:
        k = self.data_parallel
        if k is None or k < 1:  # below 1: its bound says so
            return []
        p = []
        if batch_size % k:
            p.append(f"batch_size ({batch_size}) must be a multiple of data_parallel ({k})")
        if k > 1 and ddrs_or_pseudo:
            p.append("data_parallel > 1 does not combine with DDRS training or self-training")
        return p
