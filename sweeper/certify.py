"""Certification as Ray tasks: each finished trial's test subset is cut into shards (index
ranges), each shard is one task that loads the checkpoint once, runs CERTIFY on its points
and writes one Parquet file atomically. Existing shard files are skipped, so re-running
certifies only what is missing; other settings (n, α, σ_cert) get their own files.
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import ray

from sweeper.memory import memory_path, run_memory_pass
from sweeper.results import shard_table, write_shard
from sweeper.spec import CertifySpec, Resources
from sweeper.storage import SHARD_RE, Experiment, index_chunks
from trainables import fileio
from trainables.config import TrialConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Shard:
    trial_id: str
    cert_id: str
    index: int
    count: int
    indices: tuple[int, ...]  # positions in the test split


@dataclass(frozen=True)
class Event:
    """A progress event of a sweep (trial_started/_epoch/_finished/_failed, shard_done/_failed,
    shards_planned); `shards` is the certifier's (done, total, failed) after the event."""

    kind: str
    trial_id: str
    detail: str = ""
    shards: tuple[int, int, int] | None = None


@lru_cache(maxsize=8)
def test_size(dataset: str, data_dir: str | None) -> int:
    from trainables.datasets import load_dataset

    return len(load_dataset(dataset, "test", data_dir))


def plan_shards(cfg: TrialConfig, spec: CertifySpec, num_test: int) -> list[Shard]:
    chunks = index_chunks(num_test, spec.skip, spec.max_points, spec.shard_size)
    return [Shard(cfg.trial_id, spec.cert_id, k, len(chunks), c) for k, c in enumerate(chunks)]


def trial_shards(cfg: TrialConfig, spec: CertifySpec) -> list[Shard]:
    """Every shard of a trial's certification under `spec`."""
    return plan_shards(cfg, spec, test_size(cfg.dataset, cfg.data_dir))


def shard_counts(exp: Experiment, trial_id: str, cert_id: str) -> set[int]:
    """The K of the `shard-k-of-K` files already written for one model and setting."""
    directory = fileio.join(exp.certify_dir, trial_id, cert_id)
    return {
        int(m.group(2))
        for f in fileio.list_files(directory, ".parquet")
        if (m := SHARD_RE.search(f))
    }


def missing_shards(exp: Experiment, shards: list[Shard]) -> list[Shard]:
    return [
        s
        for s in shards
        if not fileio.exists(exp.shard_path(s.trial_id, s.cert_id, s.index, s.count))
    ]


def certify_shard(exp: Experiment, shard: Shard, spec: CertifySpec, cpus: float) -> int:
    """Run CERTIFY on one shard and write its Parquet file; returns rows written (0: existed)."""
    import torch

    from trainables import checkpoint
    from trainables.certification import CertifySettings, certify_points, run_mode, seed_for
    from trainables.datasets import INFO, load_dataset

    out = exp.shard_path(shard.trial_id, shard.cert_id, shard.index, shard.count)
    if fileio.exists(out):
        return 0
    torch.set_num_threads(max(1, int(cpus)))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, cfg = checkpoint.load_model(exp.checkpoint(shard.trial_id), device)
    sigma = spec.sigma if spec.sigma is not None else cfg.sigma
    settings = CertifySettings(
        spec.n0, spec.n, spec.alpha, sigma, spec.batch_size, spec.points_per_batch, spec.ddrs,
        precision=spec.precision, channels_last=spec.channels_last, compile=spec.compile,
    )  # fmt: skip
    dataset = load_dataset(cfg.dataset, "test", cfg.data_dir)
    seed = seed_for(shard.trial_id, shard.cert_id, shard.index)
    cols = certify_points(
        model, dataset, shard.indices, INFO[cfg.dataset].num_classes, settings, seed, device
    )
    smoothing = "fixed" if spec.ddrs is None else "data-dependent"
    constants = {"smoothing": smoothing, "n0": spec.n0, "n": spec.n, "alpha": spec.alpha}
    metadata = {
        "certify_backend": f"sweeper.certify torch-{torch.__version__} {device.type} {platform.node()}",
        "normalization": f"{type(model[0]).__name__}(means={model[0].means.flatten().tolist()}, sds={model[0].sds.flatten().tolist()})",
        "config": cfg.to_dict(),
        "shard": f"{shard.index}/{shard.count}",
        **run_mode(settings, device),  # precision, channels_last, compile: how f was run
    }
    write_shard(shard_table(cfg, exp.name, shard.cert_id, constants, cols, metadata), out)
    return len(cols["idx"])


_remote_certify = ray.remote(max_retries=2)(certify_shard)
# GPU tasks get a fresh worker each by default; keep the worker (and its CUDA context).
_remote_certify_gpu = ray.remote(max_retries=2, max_calls=0)(certify_shard)
_remote_memory = ray.remote(max_retries=2)(run_memory_pass)


class Certifier:
    """Submits certification tasks as trials finish and collects their outcomes.

    Every finished trial is certified under each of `specs` (fixed σ, and data-dependent σ
    if asked); a data-dependent model gets its memory pass once all its shards exist."""

    def __init__(self, exp: Experiment, specs: list[CertifySpec], resources: Resources,
                 on_event: Callable[[Event], None]):  # fmt: skip
        self.exp, self.specs, self.resources, self.on_event = exp, specs, resources, on_event
        self.pending: dict[ray.ObjectRef, tuple[Shard, CertifySpec]] = {}
        self.memory_pending: dict[ray.ObjectRef, tuple[str, str]] = {}
        self.remaining: dict[tuple[str, str], int] = {}
        self.failures: list[tuple[str, str]] = []  # (trial_id, message)
        self.memory_changed = 0
        self.done = 0
        self.total = 0

    def submit(self, cfg: TrialConfig) -> int:
        """Queue every missing shard of a finished trial; returns how many were queued."""
        options = {"num_cpus": self.resources.cpu, "num_gpus": self.resources.gpu}
        task = _remote_certify_gpu if self.resources.gpu else _remote_certify
        queued = 0
        for spec in self.specs:
            planned = trial_shards(cfg, spec)
            other = shard_counts(self.exp, cfg.trial_id, spec.cert_id) - {len(planned)}
            if planned and other:  # another shard_size: its files would count rows twice
                message = (f"{spec.cert_id} was certified in {sorted(other)[0]} shards, now {len(planned)}: "
                           "certify with the shard_size used before, or move that directory away")  # fmt: skip
                self.failures.append((cfg.trial_id, message))
                continue
            todo = missing_shards(self.exp, planned)
            self.total += len(planned)
            self.done += len(planned) - len(todo)
            self.remaining[(cfg.trial_id, spec.cert_id)] = len(todo)
            for shard in todo:
                ref = task.options(**options).remote(self.exp, shard, spec, self.resources.cpu)
                self.pending[ref] = (shard, spec)
            queued += len(todo)
            if not todo and spec.ddrs is not None:
                self._submit_memory(cfg.trial_id, spec.cert_id)
        self._emit("shards_planned", cfg.trial_id, f"{queued} to do")
        return queued

    def _submit_memory(self, trial_id: str, cert_id: str) -> None:
        if not fileio.exists(memory_path(self.exp, trial_id, cert_id)):
            ref = _remote_memory.options(num_cpus=1).remote(self.exp, trial_id, cert_id)
            self.memory_pending[ref] = (trial_id, cert_id)

    def _emit(self, kind: str, trial_id: str, detail: str) -> None:
        self.on_event(Event(kind, trial_id, detail, (self.done, self.total, len(self.failures))))

    def poll(self, timeout: float = 0) -> None:
        refs = [*self.pending, *self.memory_pending]
        if not refs:
            return
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        for ref in ready:
            if ref in self.memory_pending:
                self._memory_done(ref)
            else:
                self._shard_done(ref)

    def _shard_done(self, ref) -> None:
        shard, spec = self.pending.pop(ref)
        try:
            ray.get(ref)
        except Exception as e:  # a task's failure is reported, not raised
            self._failed(shard.trial_id, e, "shard_failed")
            return
        self.done += 1
        key = (shard.trial_id, shard.cert_id)
        self.remaining[key] -= 1
        if self.remaining[key] == 0 and spec.ddrs is not None:
            self._submit_memory(*key)
        self._emit("shard_done", shard.trial_id, f"{shard.index + 1}/{shard.count}")

    def _memory_done(self, ref) -> None:
        trial_id, _ = self.memory_pending.pop(ref)
        try:
            changed = ray.get(ref)
        except Exception as e:
            self._failed(trial_id, e, "memory_failed")
            return
        self.memory_changed += changed
        self._emit("memory_done", trial_id, f"{changed} points adjusted")

    def _failed(self, trial_id: str, error: Exception, kind: str) -> None:
        message = (
            str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        )
        self.failures.append((trial_id, message))
        self._emit(kind, trial_id, message)

    def wait(self, poll_every: float = 0.5) -> None:
        while self.pending or self.memory_pending:
            self.poll(timeout=poll_every)

    def cancel(self) -> None:
        for ref in [*self.pending, *self.memory_pending]:
            ray.cancel(ref, force=True)
        self.pending.clear()
        self.memory_pending.clear()
