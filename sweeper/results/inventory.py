"""The experiment's signed inventory (issue 38; docs/security.md): what a driver left, signed.

Each driver that held the lease signs, as it lets go, a statement (step "inventory") listing
every file its sweep's results rest on by SHA-256: `sweep.json`, each trial's training
statement, each results file (shards and compacted files of every stage), with a version one
above the last it finds or remembers. `sweeper verify` then tells a file deleted or changed
since (listed, absent or other bytes), a file planted since (present, unlisted) and a rollback
(an older inventory put back: its version below the one this machine last signed, which it
remembers outside the storage, in `$XDG_CACHE_HOME/sweeper/inventory/<key id>.json`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from sweeper.results.attestation_reads import user_cache
from sweeper.results.storage import STAGES, Experiment
from trainables.attestations import SUFFIX, code_version
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

log = logging.getLogger(__name__)
NAME = "inventory" + SUFFIX
MAX_INVENTORY = 64 << 20  # bytes: a digest and a path per file, far above a 6,440-model sweep


def inventory_path(exp: Experiment) -> str:
    return fileio.join(exp.root, NAME)


def listed_files(exp: Experiment) -> dict[str, str]:
    """{path relative to the experiment: SHA-256 of its bytes} of what the results rest on."""
    paths = [exp.sweep_json] if fileio.exists(exp.sweep_json) else []
    trials = fileio.join(exp.root, "trials")
    if fileio.exists(trials):
        paths += [p for p in fileio.list_files(trials, "train" + SUFFIX)]
    for stage in STAGES:
        paths += [f.path for f in exp.stage_files(stage) if f.kind != "memory"]
    return {exp.relative(p): sha256_bytes(fileio.read_bytes(p)) for p in sorted(paths)}


def sign_inventory(exp: Experiment, key: SigningKey) -> int:
    """Sign what the experiment holds now; returns the version written."""
    previous = _stored_version(exp, key.public)
    version = max(previous or 0, _remembered(key.key_id, exp)) + 1
    statement = Statement(
        "inventory",
        outputs=listed_files(exp),
        settings={"experiment": exp.name, "version": version},
        code=code_version(),
    )
    fileio.write_bytes_atomic(inventory_path(exp), canonical(key.sign(statement)))
    _remember(key.key_id, exp, version)
    return version


def sign_if_keyed(exp: Experiment) -> None:
    """As a driver lets go of the lease: sign the inventory if this process holds a key (a
    failure is logged, never raised: the run's own outcome stands)."""
    try:
        key = load_signing_key()
        if key is not None and fileio.exists(exp.root):
            log.info("signed inventory version %d", sign_inventory(exp, key))
    except (AttestationError, OSError) as e:
        log.warning("the signed inventory was not updated: %s", e)


def inventory_problems(exp: Experiment, public: PublicKey) -> tuple[int | None, list[str]]:
    """(the inventory's version, what differs from it: a line each). No inventory: (None,
    [one line]) when the experiment holds attested files, since one is signed with them."""
    try:
        statement = _statement(exp, public)
    except AttestationError as e:
        return None, [f"{inventory_path(exp)}: {e}"]
    if statement is None:
        return None, [f"{inventory_path(exp)}: no signed inventory (no run with this key let go)"]
    version = int(statement.settings.get("version") or 0)
    problems = []
    if statement.settings.get("experiment") != exp.name:
        problems.append(f"{inventory_path(exp)}: the inventory of another experiment")
    problems += _rolled_back(exp, public, version)
    now, signed = listed_files(exp), dict(statement.outputs)
    for rel in sorted(set(signed) | set(now)):
        if rel not in now:
            problems.append(f"{rel}: listed in the signed inventory, now absent (deleted)")
        elif rel not in signed:
            problems.append(f"{rel}: not in the signed inventory (written since, by whom?)")
        elif now[rel] != signed[rel]:
            problems.append(f"{rel}: not the bytes the signed inventory lists (changed)")
    return version, problems


def deleted_since(exp: Experiment, public: PublicKey, stage: str) -> list[str]:
    """What a read can tell from the signed inventory without hashing a file (a line each):
    a model setting of `stage` it lists of which no file is left (a model compacted since
    keeps its folder), a rollback, or an inventory that does not verify. Nothing when there
    is none (a run not yet let go): `sweeper verify` says so, and checks every file's bytes."""
    try:
        statement = _statement(exp, public)
    except (AttestationError, OSError) as e:
        return [f"{inventory_path(exp)}: {e}"]
    if statement is None:
        return []
    lines = _rolled_back(exp, public, int(statement.settings.get("version") or 0))
    now = {exp.relative(f.path).rsplit("/", 1)[0] for f in exp.stage_files(stage)}
    listed = {rel.rsplit("/", 1)[0] for rel in statement.outputs if rel.startswith(f"{stage}/")}
    lines += [f"{d}: in the signed inventory, now absent (deleted)" for d in sorted(listed - now)]
    return lines


def _rolled_back(exp: Experiment, public: PublicKey, version: int) -> list[str]:
    """A line if the inventory's `version` is below the one this machine last signed."""
    known = _remembered(public.key_id, exp)
    if version >= known:
        return []
    where = inventory_path(exp)
    return [f"{where}: version {version}, older than the {known} this machine signed: rolled back"]


def _statement(exp: Experiment, public: PublicKey) -> Statement | None:
    path = inventory_path(exp)
    if not fileio.exists(path):
        return None
    try:
        statement = public.verify(json.loads(fileio.read_bytes(path, MAX_INVENTORY)))
    except ValueError as e:
        raise AttestationError(f"the inventory does not verify: {e}") from None
    if statement.step != "inventory":
        raise AttestationError("not an inventory")
    return statement


def _stored_version(exp: Experiment, public: PublicKey) -> int | None:
    try:
        statement = _statement(exp, public)
    except (AttestationError, OSError):
        return None
    return None if statement is None else int(statement.settings.get("version") or 0)


def _memory(key_id: str) -> Path:
    return user_cache("inventory", f"{key_id}.json")


def _where(exp: Experiment) -> str:
    return hashlib.sha256(f"{exp.storage}\0{exp.name}".encode()).hexdigest()[:16]


def _remembered(key_id: str, exp: Experiment) -> int:
    try:
        known = json.loads(_memory(key_id).read_text())
        return int(known.get(_where(exp), 0)) if isinstance(known, dict) else 0
    except (OSError, ValueError, TypeError):
        return 0


def _remember(key_id: str, exp: Experiment, version: int) -> None:
    path = _memory(key_id)
    try:
        known = json.loads(path.read_text()) if path.exists() else {}
        known = known if isinstance(known, dict) else {}
        known[_where(exp)] = version
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known))
        os.replace(tmp, path)
    except (OSError, ValueError) as e:  # the rollback check then rests on the storage alone
        log.warning("could not remember the inventory's version in %s: %s", path, e)
