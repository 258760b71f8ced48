"""The training methods: one row each in `REGISTRY`, one small module each for its loss.

A row names, once, everything the rest of the code knows about a method:
- `settings`: the `TrialConfig` fields it trains with. Every other method setting resolves to
  None for it, so it is no part of its trial_id (adding a method's setting later keeps every
  existing trial_id). DDN's two settings count only with attack ddn.
- `defaults`: values of its settings left unset (null): the papers' CIFAR-10 values.
- `protocol`: values of the fields every method shares (`PROTOCOL`) left unset, where its
  reference code differs from the others: its training protocol's numbers (`epochs`,
  `batch_size`, `lr`, `weight_decay`, `lr_step_size`, and `m_train` for a method that takes
  it: MACER's main.py has its own five and its own step size), where its LR drops fall
  (`lr_step_offset`), whether its model standardizes inputs (`normalize_input`) and whether
  that layer divides by the standard deviations or only subtracts the means (`scale_input`;
  `FromScratch`: the SmoothAdv code's models trained from scratch differ from its fine-tuned
  ones). Under DDRS training `PROTOCOL` itself replaces it whatever the method: the DDRS
  code's input layer and schedule, and the shared numbers (deviation 31).
- `attacks`: the attacks it accepts (the first is the default where it has one), and
  `attack_settings`: the settings of `settings` it uses only with one of them (SmoothAdv's
  DDN's two with attack ddn).
- `checks`: what it refuses beyond each setting's declared bounds (SmoothMix: its one-step
  adversary needs two steps), a function of the trial returning its problems.
- `splits_batch`: as their reference code does, SmoothAdv, SmoothMix and consistency training
  split each loader batch of B inputs into m_train chunks of B/m inputs, each becoming m noisy
  copies, one optimizer step per chunk; MACER and stability training take one step per batch
  on all B·k copies (`Method.chunks`; SmoothAdv with train_multi_noise false: one step).
- `ddrs`: the DDRS training settings it uses (`trainables.kernel.ddrs_settings.DDRSPart`) and
  their defaults, its DDRS script's (MotasemAlfarra/Data_Dependent_Randomized_Smoothing); DDRS
  training (a σ_x per input) supports the methods that have them: the paper's three. A DDRS
  setting a method's row does not name is None (no part of its trial_id), as a method setting.
- `label`: its name in the papers' tables and figures (`method_label`), with the attack
  where `labels_attack` (SmoothAdv-PGD, SmoothAdv-DDN).
- `passes`: forward+backward passes of the network per training input in one epoch, from m
  (`m_train`, 1 where unused) and T (the attack's steps; 0 in an epoch without an attack):
  what the dry run prices (`sweeper.plan.cost.step_passes`).
- `module`, `function`: its loss, `trainables.methods.<module>.<function>(model, x, y, ctx)`
  (see `base`, whose `loss_of` imports it). This package's front (this table) is pure Python
  and imports nothing of the project (the trial's configuration imports it), so the control
  plane validates a grid without torch; the loss module (and torch) is imported when a trial
  trains.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class Trial(Protocol):
    """What the table reads of a trial (a `trainables.kernel.config.TrialConfig`)."""

    @property
    def m_train(self) -> int | None: ...
    @property
    def train_multi_noise(self) -> bool | None: ...
    @property
    def mix_step(self) -> int | None: ...
    @property
    def steps(self) -> int | None: ...


@dataclass(frozen=True)
class SigmaTimes:
    """A default that scales with the training σ (used when σ > 0; else left unset)."""

    factor: float


@dataclass(frozen=True)
class OnDataset:
    """A default that depends on the data set: `values[dataset]`, else `other`."""

    values: Mapping[str, Any]
    other: Any

    def of(self, dataset: str | None) -> Any:
        return self.values.get(dataset or "", self.other)


@dataclass(frozen=True)
class Method:
    """One training method (see the module docstring for each field)."""

    name: str
    settings: tuple[str, ...]
    module: str
    function: str
    splits_batch: bool
    label: str  # as the papers' tables name it
    passes: Callable[[int, int], int]  # (m, T) -> forward+backward passes per training input
    defaults: Mapping[str, Any] = field(default_factory=dict)
    protocol: Mapping[str, Any] = field(default_factory=dict)
    attacks: tuple[str, ...] = ()
    attack_settings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    ddrs: Mapping[str, Any] = field(default_factory=dict)  # DDRS settings and defaults
    checks: Callable[[Trial], list[str]] | None = None
    labels_attack: bool = False  # its label names the attack: SmoothAdv-PGD

    def used(self, attack: str | None) -> frozenset[str]:
        """The settings a trial of this method with `attack` trains with: `settings` but those
        of its other attacks (`attack_settings`)."""
        other = {n for a, names in self.attack_settings.items() if a != attack for n in names}
        return frozenset(self.settings) - other

    def problems(self, cfg: Trial) -> list[str]:
        """What this method refuses of `cfg` beyond the declared bounds (`checks`)."""
        return [] if self.checks is None else self.checks(cfg)

    def chunks(self, cfg: Trial) -> int:
        """Optimizer steps per loader batch: m_train (one per chunk of about B/m inputs) for a
        method that splits its batches, but 1 for SmoothAdv with train_multi_noise false (its
        loss attacks the m chunks itself); 1 for the other methods."""
        if not self.splits_batch or cfg.train_multi_noise is False:
            return 1
        return cfg.m_train or 1


@dataclass(frozen=True)
class FromScratch:
    """A default that depends on where the model starts: `scratch` for a model trained from
    random weights (no `init_from`) on one of `datasets` without self-training (no
    `pseudo_data`), `other` for every other trial."""

    datasets: tuple[str, ...]
    scratch: Any
    other: Any


ATTACKS = ("pgd", "ddn")
# The attack's settings (`trainables.kernel.config_parts.AttackPart`); DDN's count only with ddn.
ATTACK_SETTINGS = ("attack", "epsilon", "steps", "warmup_epochs", "warmup_schedule")
DDN_SETTINGS = ("ddn_init_norm", "ddn_gamma")
_MIX = ("eta", "mix_alpha", "mix_step", "mix_maxnorm", "mix_detach")
# The shared fields a method's `protocol` may set, and their value for the others: the
# SmoothAdv paper's CIFAR-10 protocol (appendix D; Jeong & Shin 2020's, appendix A.1, for
# every method they trained): 150 epochs of batch 256 at lr 0.1, weight decay 1e-4, the LR ×
# lr_gamma every 50 epochs; one noise draw per input (m_train, where the method takes it); the
# LR drops where Cohen's and SmoothAdv's code puts them, and none past the last epoch
# (`lr_end_drop`: `OptimisationPart.lr_drops`); inputs standardized (mean and sd).
PROTOCOL: Mapping[str, Any] = {
    "epochs": 150,
    "batch_size": 256,
    "lr": 0.1,
    "weight_decay": 1e-4,
    "lr_step_size": 50,
    "m_train": 1,
    "lr_step_offset": 0,
    "lr_end_drop": False,
    "normalize_input": True,
    "scale_input": True,
}


# SmoothAdv's input layer (Hadisalman/smoothing-adversarial README, "Very Important": the
# mapping of its published models to their layer): its from-scratch CIFAR-10 and ImageNet
# models, the PGD baselines included, were trained by the first commit's architectures.py
# (3911bd8, l. 33: `get_input_center_layer`, x − μ); the ImageNet32 pre-trained, fine-tuned and
# self-trained ones by cc80077's (HEAD l. 36: `get_normalize_layer`, (x − μ)/s).
def _one_step_adversary(cfg: Trial) -> list[str]:
    """SmoothMix's one-step adversary (mix_step 1) is taken at the start of step 2 by the
    reference code: with one step it never is, and the trial would train as mix_step 0."""
    if cfg.mix_step == 1 and cfg.steps == 1:
        return [
            "mix_step 1 (the one-step adversary) needs steps >= 2 for method 'smoothmix': "
            "the reference code takes it at the start of step 2, so with steps 1 it trains "
            "exactly as mix_step 0; set mix_step: 0 or steps >= 2"
        ]
    return []


_SMOOTHADV_INPUT = {"scale_input": FromScratch(("cifar10", "imagenet"), scratch=False, other=True)}
# DDRS training follows its own code (MotasemAlfarra/Data_Dependent_Randomized_Smoothing,
# CIFAR10/train_macer.py and train_smooth_adv.py), whose input layer and schedule are
# PROTOCOL's for every method: one network that standardizes its inputs, (x − μ)/s
# (models/resnet.py l. 163-164, 209), and StepLR stepped after each epoch (train_macer.py
# l. 361, 382), as Cohen's code does. Its numbers (train_macer.py: 440 epochs, batch 128, lr
# 0.01, weight decay 5e-4) are not taken: a DDRS trial has PROTOCOL's unless it sets them.
# jh-jeong's scripts call scheduler.step(epoch) after each epoch (StepLR's closed form): the
# LR drops entering 0-based epoch lr_step_size + 1 (SmoothMix code/train.py:104).
_JEONG = {"lr_step_offset": 1}
# MACER's protocol, RuntianZ/macer main.py: its argparse defaults (l. 39-46: 440 epochs,
# gauss_num 16, batch 64, lr 0.01), SGD with weight decay 5e-4 (l. 135-136) and
# MultiStepLR(milestones=[200, 400], gamma=0.1) (l. 137-138) stepped before each 1-based epoch
# (l. 155-158), so the LR drops entering 0-based 199 and 399 (step 200, offset −1); its
# ResNet-110 takes the [0, 1] pixels as they are (CIFAR-10: ToTensor only, l. 90-99).
_MACER = {
    "epochs": 440,
    "m_train": 16,
    "batch_size": 64,
    "lr": 0.01,
    "weight_decay": 5e-4,
    "lr_step_size": 200,
    "lr_step_offset": -1,
    "normalize_input": False,
}
# DDRS training's defaults, each method's as its DDRS script has them (Data_Dependent_Randomized_
# Smoothing CIFAR10/, the paper's CIFAR-10 runs): σ steps of lr_sig 1e-4 (both scripts' l. 61),
# `ddrs_iterations` K per visit (`--iter_sig_tr`), `ddrs_samples` draws per step.
# - macer (train_macer.py): K = 10 (l. 63), 64 draws on CIFAR-10 (`--gaussian_num_ds`, l. 71;
#   1 elsewhere: the ImageNet script's), the script's robustness term (`ddrs_macer_loss`,
#   l. 131-138) and its noise copies paired with σ as l. 163-166 pair them (`ddrs_noise_pairing`:
#   copy j of input i gets the σ of input (i·k + j) mod b).
# - smoothadv (train_smooth_adv.py): K = 0 (l. 63): σ_x stays σ in training, its epoch switch
#   (`--epoch-switch` 60, l. 69) changes nothing (its two branches, l. 367-374, make the same
#   calls), and DDRS enters at certification (l. 394: 100 σ steps on the test set, as
#   `certify --ddrs`). Draws: 1 per step (get_sigma, l. 104), should K be raised.
# - gaussian: no CIFAR-10 script; the MACER script's K (deviation 18).
_DDRS = {"ddrs_iterations": 10, "ddrs_lr": 1e-4, "ddrs_samples": 1}
_DDRS_MACER = {
    **_DDRS,
    "ddrs_samples": OnDataset({"cifar10": 64}, other=1),
    "ddrs_macer_loss": "ddrs",
    "ddrs_noise_pairing": "reference",
}
_DDRS_SMOOTHADV = {**_DDRS, "ddrs_iterations": 0}

# fmt: off
_ROWS = (
    Method(  # m noisy copies
        "gaussian", ("m_train",), "gaussian", "loss", splits_batch=True, ddrs=_DDRS,
        label="Gaussian (Cohen et al.)", passes=lambda m, t: m,
    ),
    Method(
        "smoothadv", ("m_train", "train_multi_noise", *ATTACK_SETTINGS, *DDN_SETTINGS),
        "smoothadv", "loss", splits_batch=True, defaults={"train_multi_noise": True},
        label="SmoothAdv", passes=lambda m, t: m * (t + 1),  # T attack steps on m copies
        attacks=ATTACKS, attack_settings={"ddn": DDN_SETTINGS}, ddrs=_DDRS_SMOOTHADV,
        protocol=_SMOOTHADV_INPUT, labels_attack=True,
    ),
    Method(
        "vanilla_pgd", ATTACK_SETTINGS, "vanilla_pgd", "loss_vanilla",
        label="vanilla PGD", passes=lambda m, t: t + 1,  # the clean input attacked
        splits_batch=True, defaults={"attack": "pgd"}, attacks=("pgd",), protocol=_SMOOTHADV_INPUT,
    ),
    Method(
        "pgd_noise", ("m_train", *ATTACK_SETTINGS), "vanilla_pgd", "loss_with_noise",
        label="vanilla PGD + noise", passes=lambda m, t: t + m,
        splits_batch=True, defaults={"attack": "pgd"}, attacks=("pgd",), protocol=_SMOOTHADV_INPUT,
    ),
    Method(  # Jeong et al. 2021: η = 5, the ascent step α = 2σ
        "smoothmix", ("m_train", "steps", "warmup_epochs", *_MIX), "smoothmix", "loss",
        splits_batch=True, label="SmoothMix",
        passes=lambda m, t: m * (t + 2),  # T ascent steps on m copies, m clean + m mixed
        defaults={"eta": 5.0, "mix_step": 0, "mix_detach": False, "mix_alpha": SigmaTimes(2.0)},
        protocol=_JEONG, checks=_one_step_adversary,
    ),
    Method(  # Zhai et al. 2020: RuntianZ/macer main.py (_MACER)
        "macer", ("m_train", "lam", "macer_beta", "macer_gamma", "macer_deferred"), "macer",
        "loss", splits_batch=False, ddrs=_DDRS_MACER, label="MACER", passes=lambda m, t: m,
        defaults={"lam": 12.0, "macer_beta": 16.0, "macer_gamma": 8.0, "macer_deferred": False},
        protocol=_MACER,
    ),
    Method(  # Jeong & Shin 2020 (λ = 20 at σ = 0.25)
        "consistency", ("m_train", "lam", "eta"), "consistency", "loss",
        label="Consistency", passes=lambda m, t: m,
        splits_batch=True, defaults={"lam": 10.0, "eta": 0.5}, protocol=_JEONG,
    ),
    Method(  # Li et al. 2019, as the SmoothMix paper ran it (jh-jeong's train_stab.py)
        "stability", ("lam", "stability_loss"), "stability", "loss", splits_batch=False,
        label="Stability", passes=lambda m, t: 2,  # the clean and one noisy copy
        defaults={"lam": 2.0, "stability_loss": "cross_entropy"}, protocol=_JEONG,
    ),
)
# fmt: on
REGISTRY: dict[str, Method] = {row.name: row for row in _ROWS}
METHODS = tuple(REGISTRY)
# Every field some method uses: None (and no part of the trial_id) for the others.
METHOD_SETTINGS = frozenset(name for row in _ROWS for name in row.settings)
DDRS_METHODS = tuple(row.name for row in _ROWS if row.ddrs)
# Methods that attack with ε (SmoothAdv and the PGD baselines): no attack in an epoch with ε = 0.
EPSILON_METHODS = tuple(row.name for row in _ROWS if "epsilon" in row.settings)


def method_label(method: Any, attack: Any = None) -> str:
    """A method's name in the papers' tables and figures (its row's `label`), with its attack
    where the row says so (`labels_attack`: SmoothAdv-DDN); a name of no row as it is."""
    row = REGISTRY.get(method) if isinstance(method, str) else None
    if row is None:
        return str(method)
    if row.labels_attack and isinstance(attack, str):
        return f"{row.label}-{attack.upper()}"
    return row.label
