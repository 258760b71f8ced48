"""`TrainState`: everything one training trial holds between steps (model, optimizer, schedule,
AMP scaler, random streams, history, the DDRS σ table, the self-training stream), how it is
built from a `TrialConfig`, and its checkpoint payload with the exact restore that makes a
resumed run bitwise identical to an uninterrupted one on CPU. The epoch loop is
`trainables.train`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from trainables import attacks, pseudo, runtime
from trainables.datasets import INFO
from trainables.kernel.config import TrialConfig, pipeline_for, required
from trainables.kernel.errors import ConfigError
from trainables.models import build_model, input_statistics

log = logging.getLogger(__name__)


@dataclass
class TrainState:
    cfg: TrialConfig
    device: torch.device
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    loader_generator: torch.Generator
    noise_generator: torch.Generator
    epoch: int = 0  # epochs finished
    history: list[dict[str, Any]] = field(default_factory=list)
    ddrs_sigma: torch.Tensor | None = None  # DDRS: σ_x per training input (CPU, float32)
    pseudo_stream: pseudo.PseudoStream | None = None  # self-training: pseudo-labelled batches
    rank: int = 0  # data-parallel training (`trainables.distributed`): this process's rank
    world_size: int = 1
    # "device" or "loader"; the device pipeline's crop/flip stream (the DataLoader's: global)
    pipeline: str = "loader"
    augment_generator: torch.Generator | None = None

    @property
    def precision(self) -> str:
        """The autocast precision of training steps: fp32 for amp off, and for amp fp16 off
        CUDA (which has always trained in fp32 there)."""
        amp = self.cfg.amp
        return "fp32" if amp == "off" or (amp == "fp16" and self.device.type != "cuda") else amp

    def payload(self) -> dict[str, Any]:
        """Everything needed to resume or to certify, as a checkpoint dict."""
        rng = {
            "torch": torch.get_rng_state(),
            "loader": self.loader_generator.get_state(),
            "noise": self.noise_generator.get_state(),
        }
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        if self.augment_generator is not None:
            rng["augment"] = self.augment_generator.get_state()
        payload = {
            "config": self.cfg.to_dict(),
            "trial_id": self.cfg.trial_id,
            "epoch": self.epoch,
            "model": attacks.unwrap(self.model).state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": rng,
            "history": list(self.history),
            "data_pipeline": self.pipeline,
        }
        if self.ddrs_sigma is not None:
            payload["ddrs_sigma"] = self.ddrs_sigma.clone()
        if self.pseudo_stream is not None:
            payload["pseudo"] = self.pseudo_stream.state_dict()
        return payload

    def restore(self, payload: dict[str, Any]) -> None:
        """Continue from a checkpoint; one without "data_pipeline" (older) used the DataLoader,
        and under data_pipeline auto goes on with it, exactly as it would have."""
        if not _same_config(payload["config"], self.cfg):
            log.warning("resuming from a checkpoint written with a different config")
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.scheduler.load_state_dict(payload["scheduler"])
        self.scaler.load_state_dict(payload["scaler"])
        rng = payload["rng"]
        torch.set_rng_state(rng["torch"].cpu())
        self.loader_generator.set_state(rng["loader"].cpu())
        self.noise_generator.set_state(rng["noise"].cpu())
        if "cuda" in rng and self.device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"].cpu(), self.device)
        if "augment" in rng and self.augment_generator is not None:
            self.augment_generator.set_state(rng["augment"].cpu())
        if self.cfg.data_pipeline == "auto":
            self.pipeline = payload.get("data_pipeline", "loader")
        self.epoch = int(payload["epoch"])
        self.history = list(payload["history"])
        table = payload.get("ddrs_sigma")
        self.ddrs_sigma = None if table is None else table.detach().to("cpu").clone()
        if self.pseudo_stream is not None and "pseudo" in payload:
            self.pseudo_stream.load_state_dict(payload["pseudo"])

    def sigma_table(self, size: int) -> torch.Tensor:
        """The DDRS σ table for a training split of `size` inputs (created at cfg.sigma)."""
        if self.ddrs_sigma is None:
            self.ddrs_sigma = torch.full((size,), self.cfg.sigma, dtype=torch.float32)
        if len(self.ddrs_sigma) != size:
            raise ValueError(
                f"DDRS sigma table has {len(self.ddrs_sigma)} entries for a training split "
                f"of {size} inputs (checkpoint of another data set?)"
            )
        return self.ddrs_sigma


def _same_config(stored: dict[str, Any], cfg: TrialConfig) -> bool:
    """Whether a checkpoint's config dict is `cfg` (read as today's code reads it)."""
    try:
        return TrialConfig.from_dict(stored) == cfg
    except ConfigError:
        return False


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def build_state(cfg: TrialConfig, device: torch.device | None = None) -> TrainState:
    """A fresh model and optimizer, seeded from cfg.seed."""
    device = device or default_device()
    torch.manual_seed(cfg.seed)
    info = INFO[cfg.dataset]
    mean, std = input_statistics(cfg.normalize_input, cfg.scale_input, info.mean, info.std)
    model = build_model(required(cfg.arch, "arch"), info.num_classes, mean, std).to(device)
    if cfg.channels_last:
        runtime.to_channels_last(model)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
    )
    scheduler = build_scheduler(cfg, optimizer)
    scaler = torch.amp.GradScaler("cuda", enabled=cfg.amp == "fp16" and device.type == "cuda")
    loader_gen = torch.Generator().manual_seed(cfg.seed)
    noise_gen = torch.Generator(device=device).manual_seed(cfg.seed + 1)
    state = TrainState(cfg, device, model, optimizer, scheduler, scaler, loader_gen, noise_gen)
    state.pseudo_stream = pseudo.stream(cfg, device)
    state.pipeline = pipeline_for(cfg)
    state.augment_generator = torch.Generator(device=device).manual_seed(cfg.seed + 2)
    check_amp(state)
    return state


def build_scheduler(
    cfg: TrialConfig, optimizer: torch.optim.Optimizer
) -> torch.optim.lr_scheduler.LRScheduler:
    """The LR schedule, stepped once after every epoch (`trainables.train.fit`): the LR is
    multiplied by lr_gamma entering each epoch of `cfg.lr_drops()`. At lr_step_offset 0 a
    StepLR, as before the offset existed (its checkpoints resume); otherwise a MultiStepLR
    at those epochs (MACER's own scheduler class)."""
    if not cfg.lr_step_offset:
        return torch.optim.lr_scheduler.StepLR(optimizer, cfg.lr_step_size, cfg.lr_gamma)
    return torch.optim.lr_scheduler.MultiStepLR(optimizer, cfg.lr_drops(), cfg.lr_gamma)


def check_amp(state: TrainState) -> None:
    """Refuse bf16 without bf16 hardware; say that fp16 off CUDA trains in fp32."""
    if state.cfg.amp == "fp16" and state.device.type != "cuda":
        log.warning("amp fp16 needs CUDA: training in fp32 on %s", state.device.type)
    runtime.check_precision(state.precision, state.device)
