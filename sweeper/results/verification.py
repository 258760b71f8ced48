"""`sweeper verify`: what in an experiment is attested, what is not, and what fails (issue 38).

Checked with a public key only (a reader of published results has no secret):
- each trial `sweep.json` lists: its training statement (`trials/<id>/train.attestation.json`)
  verifies, is that trial's, and names the checkpoint's bytes on storage (when it is there);
- each results file (`certify/`, `empirical/`: shards and compacted files): the statement in
  its footer verifies, signs its rows, is of its own model and setting (a shard: of its own
  shard), and the checkpoint it was made from is the one that trial's training attested.
A file with no statement is unattested (made without a key, or before keys: it still reads);
one whose statement fails is a failure, and so is any difference from the signed inventory
(`inventory`: a file deleted, changed or planted since the last keyed driver let go, or an
inventory rolled back). Pilot files and the cache are not signed (the pilots'
counts are recomputed from, the cache is derived from the files and checked against them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sweeper.results.attestation_reads import Memo, check_statement, file_statement, reading_key
from sweeper.results.inventory import inventory_path, inventory_problems
from sweeper.results.storage import STAGES, Experiment, StageFile
from sweeper.results.sweep_file import declared
from trainables.attestations import attestation_path, train_statement
from trainables.kernel import fileio
from trainables.kernel.attestation import (
    AttestationError,
    PublicKey,
    sha256_bytes,
)
from trainables.kernel.errors import ProblemsError


@dataclass
class Verification:
    """Per file (a path): attested, unattested (with why) or failed (with why)."""

    key_id: str
    inventory: int | None = None  # the signed inventory's version, when it holds
    attested: list[str] = field(default_factory=list)
    unattested: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


def public_key_from(path: str | None) -> PublicKey:
    """The public key in file `path` (as published with results), else the one the reads
    check with (`attestation_reads.reading_key`: $SWEEPER_PUBLIC_KEY's file, else this
    machine's signing key's); ProblemsError (one line, exit 2) when there is none or it
    cannot be read."""
    if path is None:
        key = reading_key()
        if key is None:
            raise ProblemsError(
                [
                    "no key to verify with: give --public-key FILE (the public key published "
                    "with the results), or make this machine's with `sweeper key init`"
                ]
            )
        return key
    try:
        return PublicKey.from_pem(fileio.read_bytes(str(Path(path).expanduser()), 1 << 16))
    except (AttestationError, OSError) as e:
        raise ProblemsError([f"--public-key {path}: {e}"]) from None


def verify_experiment(exp: Experiment, public: PublicKey) -> Verification:
    """Every declared trial's training and every results file, checked with `public`."""
    out = Verification(public.key_id)
    checkpoints: dict[str, str] = {}  # trial_id -> the checkpoint its training attested
    for trial_id in _declared_trials(exp):
        digest = _check_training(exp, trial_id, public, out)
        if digest is not None:
            checkpoints[trial_id] = digest
    memo = Memo(public.key_id)
    for stage in STAGES:
        for f in exp.stage_files(stage):
            if f.kind != "memory":
                _check_rows(f, public, checkpoints, out, memo)
    memo.save()
    _check_inventory(exp, public, out)
    return out


def _check_inventory(exp: Experiment, public: PublicKey, out: Verification) -> None:
    """The signed inventory against what is there: a file deleted, changed or planted since,
    a rollback. With nothing attested and no inventory, the experiment is unattested; an
    attested file without an inventory is a failure (a keyed driver always signs one)."""
    version, problems = inventory_problems(exp, public)
    if version is None and not fileio.exists(inventory_path(exp)) and not out.attested:
        out.unattested.append((inventory_path(exp), "no signed inventory"))
        return
    if not problems:
        out.inventory = version
        out.attested.append(inventory_path(exp))
    for line in problems:
        path, _, why = line.partition(": ")
        out.failed.append((path, why))


def _declared_trials(exp: Experiment) -> list[str]:
    return sorted(declared(exp).trials or ())


def _check_training(
    exp: Experiment, trial_id: str, public: PublicKey, out: Verification
) -> str | None:
    """The checkpoint digest trial `trial_id`'s training attested (None: not attested or
    failed, recorded in `out`)."""
    where = attestation_path(exp.trial_dir(trial_id), "train")
    if not fileio.exists(where):
        if fileio.exists(exp.checkpoint(trial_id)):
            out.unattested.append((exp.checkpoint(trial_id), "no training attestation"))
        return None
    try:
        digest = str(train_statement(exp.trial_dir(trial_id), public).outputs["checkpoint.pt"])
        ckpt = exp.checkpoint(trial_id)
        if fileio.exists(ckpt) and sha256_bytes(fileio.read_bytes(ckpt)) != digest:
            raise AttestationError("the checkpoint's bytes are not the ones attested")
    except (AttestationError, KeyError) as e:
        out.failed.append((where, str(e)))
        return None
    out.attested.append(where)
    return digest


def _check_rows(
    f: StageFile, public: PublicKey, checkpoints: dict[str, str], out: Verification, memo: Memo
) -> None:
    """A results file: its statement (remembered by the file's sha256, as the reads do),
    of its own model, setting and shard, made from the checkpoint its training attested."""
    try:
        said = file_statement(f, public, memo)
        if said is None:
            out.unattested.append((f.path, "its rows carry no attestation"))
            return
        check_statement(f, said, checkpoints.get(f.trial_id))
    except (AttestationError, OSError, ValueError) as e:
        out.failed.append((f.path, str(e)))
        return
    out.attested.append(f.path)
