"""`sweeper key init` / `sweeper key show`: the Ed25519 key pair that signs what a sweep makes
(`trainables.kernel.attestation`; docs/security.md). The secret stays outside the storage: in
the user's config directory (mode 0600) or `SWEEPER_SIGNING_KEY`; the public key is what a
reader needs to verify an experiment, with `sweeper verify`."""

from __future__ import annotations

from typing import Annotated

import typer

from sweeper.api.surface import DEFAULT_STORAGE
from sweeper.cli.common import LatestExperiment, Storage, app, fail, resolve_experiment
from sweeper.cli.display import echo

key_app = typer.Typer(
    help="The key that signs a sweep's results (attestations).", no_args_is_help=True
)
app.add_typer(key_app, name="key")


@key_app.command("init")
def init() -> None:
    """Make a new signing key pair under $XDG_CONFIG_HOME/sweeper (else ~/.config/sweeper):
    signing-key.pem (the secret, mode 0600) and signing-key.pub.pem (publish it with your
    results). An existing key is never overwritten."""
    from trainables.kernel.attestation import AttestationError, config_dir, init_key

    try:
        pair = init_key(config_dir())
    except (AttestationError, OSError) as e:
        fail([str(e)])
    echo(f"signing key {pair.key_id}: {pair.secret} (secret, mode 0600)")
    echo(f"public key: {pair.public} (publish it; `sweeper verify --public-key` reads it)")
    echo(f'For CI and clusters: SWEEPER_SIGNING_KEY="$(cat {pair.secret})" in the environment')


@key_app.command("show")
def show() -> None:
    """The signing key this shell would use ($SWEEPER_SIGNING_KEY, else the config
    directory's): its id and public key (PEM). Never the secret."""
    from trainables.kernel.attestation import KEY_ENV, AttestationError, load_signing_key

    try:
        key = load_signing_key()
    except (AttestationError, OSError) as e:
        fail([f"{e} (from ${KEY_ENV} or `sweeper key init`)"])
    if key is None:
        fail([f"no signing key: run `sweeper key init`, or set ${KEY_ENV}"])
    echo(f"signing key {key.key_id}")
    echo(key.public.pem().decode().rstrip())


@app.command()
def verify(
    storage: Storage = DEFAULT_STORAGE,
    experiment: LatestExperiment = None,
    public_key: Annotated[
        str | None,
        typer.Option(
            "--public-key",
            help="The public key to verify with (a PEM file, as published with the results; "
            "default: the file $SWEEPER_PUBLIC_KEY names, else this machine's signing key's).",
        ),
    ] = None,
) -> None:
    """What in an experiment is attested (signed by the key), what is not, and what fails:
    each trial's training and each results file. Exits 1 on any failure; unattested files
    (made without a key) are listed, not failures."""
    from sweeper import Sweep

    exp = resolve_experiment(storage, experiment)
    checked = Sweep(storage=exp.storage, experiment=exp.name).verify(public_key)
    for path, why in checked.failed:
        echo(f"FAILED {path}: {why}")
    for path, why in checked.unattested:
        echo(f"unattested {path}: {why}")
    held = "" if checked.inventory is None else f"; signed inventory version {checked.inventory}"
    echo(
        f"key {checked.key_id}: {len(checked.attested)} files attested, "
        f"{len(checked.unattested)} unattested, {len(checked.failed)} failed{held}"
    )
    if not checked.ok:
        raise typer.Exit(1)
