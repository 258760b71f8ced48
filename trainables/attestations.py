"""A step's signed statement, written beside what the step made (issue 38; docs/security.md).

`attest` signs `Statement(step, inputs, outputs, settings, code)` with this process's key
(`trainables.kernel.attestation.load_signing_key`: $SWEEPER_SIGNING_KEY, which the driver hands
its workers through Ray, never through the storage) and writes the envelope atomically to
`<directory>/<step>.attestation.json`. Without a key nothing is written and the results stay
unattested: they still read, marked as such."""

from __future__ import annotations

import functools
import importlib.metadata
import json

from trainables.kernel import fileio
from trainables.kernel.attestation import (
    AttestationError,
    PublicKey,
    SigningKey,
    Statement,
    canonical,
    load_signing_key,
    sha256_bytes,
)
from trainables.kernel.config import TrialConfig

SUFFIX = ".attestation.json"
MAX_STATEMENT = 1 << 16  # bytes: a statement names a few digests


def config_digest(cfg: TrialConfig) -> str:
    """The sha256 of a trial's resolved config in canonical JSON."""
    return sha256_bytes(canonical(cfg.to_dict()))


@functools.cache
def code_version() -> str:
    """The code a statement was made by: sweeper's and torch's package versions. Read once per
    process: they are the versions of the code this process imported (a `pip install` during a
    run changes what is on disk, not what runs), and reading a distribution's metadata parses
    its files again each time (a shard's signing spent a tenth of its time there)."""
    versions = []
    for package in ("sweeper", "torch"):
        try:
            versions.append(f"{package}-{importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{package}-unknown")
    return " ".join(versions)


def attestation_path(directory: str, step: str) -> str:
    return fileio.join(directory, f"{step}{SUFFIX}")


def attest(
    directory: str,
    step: str,
    inputs: dict[str, str],
    outputs: dict[str, str],
    settings: dict,
    key: SigningKey | None = None,
) -> str | None:
    """Sign what `step` made and write it beside; the path written, None without a key."""
    key = key or load_signing_key()
    if key is None:
        return None
    statement = Statement(step, inputs, outputs, settings, code_version())
    path = attestation_path(directory, step)
    fileio.write_bytes_atomic(path, canonical(key.sign(statement)))
    return path


def train_statement(directory: str, public: PublicKey) -> Statement:
    """The training statement in trial folder `directory`, verified with `public` and of that
    trial; AttestationError otherwise (a missing statement included)."""
    try:
        raw = fileio.read_bytes(attestation_path(directory, "train"), MAX_STATEMENT)
    except FileNotFoundError:
        raise AttestationError(
            "no training attestation beside it: only a checkpoint its sweep trained and signed "
            f"is certified while a signing key is set (key {public.key_id})"
        ) from None
    try:
        statement = public.verify(json.loads(raw))
    except ValueError as e:
        raise AttestationError(f"its training attestation does not verify: {e}") from None
    trial_id = directory.rstrip("/").rsplit("/", 1)[-1]
    if statement.step != "train" or statement.settings.get("trial_id") != trial_id:
        raise AttestationError(f"its training attestation is not trial {trial_id}'s")
    return statement


def trained_checkpoint(directory: str, key: SigningKey) -> str:
    """The checkpoint digest the training statement in trial folder `directory` names
    (`train_statement`, verified with `key`)."""
    return str(train_statement(directory, key.public).outputs.get("checkpoint.pt"))


def verify_checkpoint(path: str, data: bytes) -> None:
    """With a key in this process, `data` (the bytes of checkpoint `path`, about to be loaded)
    must be the checkpoint its trial's training statement names (`trained_checkpoint`);
    AttestationError otherwise: a planted or replaced checkpoint is never certified. Without
    a key nothing is checked: the results are unattested, and read as such."""
    key = load_signing_key()
    if key is None:
        return
    directory = path.rstrip("/").rsplit("/", 1)[0]  # a local path or a URI: "/" either way
    if trained_checkpoint(directory, key) != sha256_bytes(data):
        raise AttestationError("its bytes are not the ones its training attested")


def attest_training(
    directory: str,
    cfg: TrialConfig,
    checkpoint: str,
    parent: str | None,
    key: SigningKey | None = None,
    data: dict[str, str] | None = None,
) -> None:
    """The training step's statement: the checkpoint (by its bytes on storage) made from the
    trial's config and `data` (`trainables.data_cache.data_inputs`), and from its parent's
    checkpoint for a fine-tune trial; signed with `key`, else this process's (none: nothing
    written)."""
    key = key or load_signing_key()
    if key is None:
        return
    inputs = {"config": config_digest(cfg), **(data or {})}
    if parent is not None:
        inputs["parent checkpoint"] = sha256_bytes(fileio.read_bytes(parent))
    outputs = {"checkpoint.pt": sha256_bytes(fileio.read_bytes(checkpoint))}
    settings = {"trial_id": cfg.trial_id, "epochs": cfg.epochs}
    attest(directory, "train", inputs, outputs, settings, key)
