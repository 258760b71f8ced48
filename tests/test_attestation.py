"""Signed statements (issue 38 item 2): canonical JSON, DSSE's encoding, Ed25519 through
`cryptography`, the key's files and environment, and `sweeper key`."""

from __future__ import annotations

import base64
import json
import os
import pickle
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from trainables.kernel import attestation as att
from trainables.kernel.attestation import AttestationError, SigningKey, Statement

runner = CliRunner()


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """What reads and the inventory remember (verified statements, signed versions) stays in
    this test's own cache directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


D1, D2 = "a" * 64, "b" * 64
# RFC 8032 §7.1, TEST 1: the seed and the public key it makes
RFC_SEED = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
RFC_PUBLIC = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"


def _statement() -> Statement:
    return Statement("train", {"config": D1}, {"checkpoint.pt": D2}, {"epochs": 3}, "v1")


def test_canonical_json_sorts_keys_drops_whitespace_keeps_utf8_and_refuses_nan():
    assert att.canonical({"b": 1, "a": [1.5, "é", None]}) == '{"a":[1.5,"é",null],"b":1}'.encode()
    with pytest.raises(ValueError):
        att.canonical({"x": float("nan")})


def test_pae_is_dsses_own_example():
    # the DSSE specification's example (protocol.md)
    assert att.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_a_seed_in_base64_is_the_rfc_8032_key():
    from cryptography.hazmat.primitives import serialization

    key = SigningKey.from_text(base64.b64encode(bytes.fromhex(RFC_SEED)).decode())
    raw = key.public.key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert raw.hex() == RFC_PUBLIC
    assert key.key_id == att.sha256_bytes(bytes.fromhex(RFC_PUBLIC))[:16]
    assert SigningKey.from_text(key.pem().decode()).key_id == key.key_id


def test_a_signed_statement_verifies_with_the_public_key_alone():
    key = SigningKey.generate()
    envelope = key.sign(_statement())
    public = att.PublicKey.from_pem(key.public.pem())
    assert public.verify(json.loads(json.dumps(envelope))) == _statement()


def _tampered(envelope: dict, **fields) -> dict:
    return {**envelope, **fields}


def test_every_change_to_an_envelope_fails_to_verify():
    key, other = SigningKey.generate(), SigningKey.generate()
    envelope = key.sign(_statement())
    body = base64.b64decode(envelope["payload"])
    changed = body.replace(D2.encode(), D1.encode())
    sig = envelope["signatures"][0]
    cases = {
        "payload": _tampered(envelope, payload=base64.b64encode(changed).decode()),
        "type": _tampered(envelope, payloadType="application/json"),
        "signature": _tampered(
            envelope, signatures=[{**sig, "sig": base64.b64encode(b"\0" * 64).decode()}]
        ),
        "key id": _tampered(envelope, signatures=[{**sig, "keyid": other.key_id}]),
        "not an envelope": {"payload": envelope["payload"]},
    }
    for bad in cases.values():
        with pytest.raises(AttestationError):
            key.public.verify(bad)
    with pytest.raises(AttestationError, match="not signed by this key"):
        other.public.verify(envelope)


def test_a_validly_signed_but_non_canonical_statement_is_refused():
    key = SigningKey.generate()
    body = json.dumps(_statement().to_json(), indent=1).encode()  # same value, other bytes
    sig = key.key.sign(att.pae(att.PAYLOAD_TYPE, body))
    envelope = {
        "payloadType": att.PAYLOAD_TYPE,
        "payload": base64.b64encode(body).decode(),
        "signatures": [{"keyid": key.key_id, "sig": base64.b64encode(sig).decode()}],
    }
    with pytest.raises(AttestationError, match="canonical"):
        key.public.verify(envelope)


def test_a_statement_takes_only_sha256_digests():
    with pytest.raises(AttestationError, match="not a sha256"):
        Statement("train", {"config": "abc"})
    with pytest.raises(AttestationError, match="fields differ"):
        Statement.from_json({**_statement().to_json(), "extra": 1})


def test_a_signing_key_is_never_pickled_and_its_repr_names_only_its_id():
    key = SigningKey.generate()
    with pytest.raises(TypeError):
        pickle.dumps(key)
    assert repr(key) == f"SigningKey(key_id={key.key_id})"


def test_init_key_writes_a_0600_secret_and_never_overwrites(tmp_path):
    pair = att.init_key(tmp_path / "sweeper")
    assert stat.S_IMODE(os.stat(pair.secret).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(pair.public).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "sweeper").st_mode) == 0o700
    before = pair.secret.read_bytes()
    with pytest.raises(AttestationError, match="never overwritten"):
        att.init_key(tmp_path / "sweeper")
    assert pair.secret.read_bytes() == before
    public = att.PublicKey.from_pem(pair.public.read_bytes())
    assert public.key_id == pair.key_id


def test_the_key_comes_from_the_environment_else_the_config_directory(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    assert att.load_signing_key(env) is None
    pair = att.init_key(att.config_dir(env))
    assert att.load_signing_key(env).key_id == pair.key_id  # type: ignore[union-attr]
    other = SigningKey.generate()
    env[att.KEY_ENV] = other.pem().decode()
    assert att.load_signing_key(env).key_id == other.key_id  # type: ignore[union-attr]
    os.chmod(pair.secret, 0o640)
    with pytest.raises(AttestationError, match="readable by others"):
        att.load_signing_key({"XDG_CONFIG_HOME": str(tmp_path)})
    with pytest.raises(AttestationError, match="not an Ed25519 private key"):
        att.load_signing_key({att.KEY_ENV: "not a key"})


def test_sweeper_key_init_then_show_prints_the_public_key_never_the_secret(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path), att.KEY_ENV: ""}
    made = runner.invoke(app, ["key", "init"], env=env)
    assert made.exit_code == 0, made.output
    secret = (tmp_path / "sweeper" / att.KEY_FILE).read_text()
    shown = runner.invoke(app, ["key", "show"], env=env)
    assert shown.exit_code == 0, shown.output
    assert "BEGIN PUBLIC KEY" in shown.stdout and secret.splitlines()[1] not in shown.output
    again = runner.invoke(app, ["key", "init"], env=env)
    assert again.exit_code == 2 and "never overwritten" in again.stderr
    assert (tmp_path / "sweeper" / att.KEY_FILE).read_text() == secret


def test_sweeper_key_show_without_a_key_says_how_to_make_one(tmp_path):
    shown = runner.invoke(
        app, ["key", "show"], env={"XDG_CONFIG_HOME": str(tmp_path), att.KEY_ENV: ""}
    )
    assert shown.exit_code == 2
    assert (
        shown.stderr.strip()
        == "error: no signing key: run `sweeper key init`, or set $SWEEPER_SIGNING_KEY"
    )


def test_training_is_attested_from_the_checkpoints_bytes_and_the_config(tmp_path, monkeypatch):
    from trainables.attestations import attest_training, attestation_path, config_digest
    from trainables.kernel.config import TrialConfig

    key = SigningKey.generate()
    cfg = TrialConfig(dataset="digits", arch="digits_cnn", sigma=0.25, epochs=2)
    ckpt, parent = tmp_path / "checkpoint.pt", tmp_path / "parent.pt"
    ckpt.write_bytes(b"weights")
    parent.write_bytes(b"parent weights")
    monkeypatch.delenv(att.KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    attest_training(str(tmp_path), cfg, str(ckpt), None)  # no key: nothing written
    assert not os.path.exists(attestation_path(str(tmp_path), "train"))
    monkeypatch.setenv(att.KEY_ENV, key.pem().decode())
    attest_training(str(tmp_path), cfg, str(ckpt), str(parent))
    written = Path(attestation_path(str(tmp_path), "train")).read_bytes()
    envelope = json.loads(written)
    statement = key.public.verify(envelope)
    assert statement.inputs == {
        "config": att.sha256_bytes(att.canonical(cfg.to_dict())),
        "parent checkpoint": att.sha256_bytes(b"parent weights"),
    }
    assert statement.inputs["config"] == config_digest(cfg)
    assert statement.outputs == {"checkpoint.pt": att.sha256_bytes(b"weights")}
    assert statement.settings == {"trial_id": cfg.trial_id, "epochs": 2}
    assert key.pem() not in written


def test_a_launch_hands_the_key_to_workers_through_ray_and_refuses_an_unreadable_one(
    tmp_path, monkeypatch
):
    from sweeper.run.signing import workers_signing_env
    from trainables.kernel.errors import ProblemsError

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv(att.KEY_ENV, raising=False)
    assert workers_signing_env() is None
    pair = att.init_key(att.config_dir())
    env = workers_signing_env()
    assert env is not None and SigningKey.from_text(env["env_vars"][att.KEY_ENV]).key_id == (
        pair.key_id
    )
    os.chmod(pair.secret, 0o644)
    with pytest.raises(ProblemsError, match=r"signing key: .*readable by others"):
        workers_signing_env()


SPACE = """
fixed: {dataset: digits, method: gaussian, m_train: 1, epochs: 1, batch_size: 64, lr: 0.02, eval_subset: 64}
grids:
  - name: g
    axes: {sigma: [0.25], seed: [0, 1]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 16, n: 64, alpha: 0.001, skip: 45, max_points: null, batch_size: 400, shard_size: 10}
"""


def test_a_replaced_or_unattested_checkpoint_is_never_certified(tmp_path, signing_env):
    """Issue 38's attack: a trial's checkpoint.pt replaced by another model (here: the other
    seed's, itself genuine), then certified: refused, as is one whose attestation is gone or
    is another trial's; the honest checkpoint certifies."""
    import shutil

    import torch

    from sweeper.plan.grid import expand
    from sweeper.plan.spaces import load_space
    from sweeper.results.storage import Experiment
    from sweeper.run import shards
    from sweeper.run.certify_stage import CERTIFY, certify_shard
    from trainables.attestations import attest_training, attestation_path
    from trainables.checkpoint import CheckpointError
    from trainables.train import fit

    (tmp_path / "space.yaml").write_text(SPACE)
    spec = load_space(str(tmp_path / "space.yaml"))
    exp = Experiment(str(tmp_path / "store"), "tiny")
    ours, other = expand(spec)
    for cfg in (ours, other):
        fit(cfg, exp.checkpoint(cfg.trial_id), device=torch.device("cpu"))
        attest_training(exp.trial_dir(cfg.trial_id), cfg, exp.checkpoint(cfg.trial_id), None)
    shard = shards.plan(ours, "certify", spec.certify, 450)[0]
    assert certify_shard(exp, shard, spec.certify, 1).num_rows == 10
    assert CERTIFY.compute is certify_shard  # what the engine runs is what is checked here
    honest = Path(exp.checkpoint(ours.trial_id)).read_bytes()
    shutil.copy(exp.checkpoint(other.trial_id), exp.checkpoint(ours.trial_id))
    with pytest.raises(CheckpointError, match="not the ones its training attested"):
        certify_shard(exp, shard, spec.certify, 1)
    statement = attestation_path(exp.trial_dir(ours.trial_id), "train")
    shutil.copy(attestation_path(exp.trial_dir(other.trial_id), "train"), statement)
    with pytest.raises(CheckpointError, match=f"not trial {ours.trial_id}'s"):
        certify_shard(exp, shard, spec.certify, 1)
    Path(statement).unlink()
    Path(exp.checkpoint(ours.trial_id)).write_bytes(honest)
    with pytest.raises(CheckpointError, match="no training attestation beside it"):
        certify_shard(exp, shard, spec.certify, 1)


def test_a_checkpoint_signed_by_another_key_is_refused_and_none_is_checked_without_a_key(
    tmp_path, monkeypatch, signing_env
):
    from trainables.attestations import attest, verify_checkpoint

    trial = tmp_path / "trials" / "abc"
    trial.mkdir(parents=True)
    data = b"weights"
    outputs = {"checkpoint.pt": att.sha256_bytes(data)}
    attest(str(trial), "train", {}, outputs, {"trial_id": "abc"}, SigningKey.generate())
    with pytest.raises(AttestationError, match="does not verify: not signed by this key"):
        verify_checkpoint(str(trial / "checkpoint.pt"), data)
    monkeypatch.delenv(att.KEY_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    verify_checkpoint(str(trial / "checkpoint.pt"), b"anything")  # unattested: not checked


def _trained(tmp_path, space: str = SPACE):
    import torch

    from sweeper.plan.grid import expand
    from sweeper.plan.spaces import load_space
    from sweeper.results.storage import Experiment
    from trainables.attestations import attest_training
    from trainables.train import fit

    (tmp_path / "space.yaml").write_text(space)
    spec = load_space(str(tmp_path / "space.yaml"))
    exp = Experiment(str(tmp_path / "store"), "tiny")
    cfg = expand(spec)[0]
    fit(cfg, exp.checkpoint(cfg.trial_id), device=torch.device("cpu"))
    attest_training(exp.trial_dir(cfg.trial_id), cfg, exp.checkpoint(cfg.trial_id), None)
    return spec, exp, cfg


def test_certified_rows_are_signed_per_shard_and_compaction_folds_only_verified_shards(
    tmp_path, signing_env, monkeypatch
):
    """Each shard's rows carry the worker's statement (the attested checkpoint, the model,
    setting and shard); compaction refuses a shard whose rows changed or one moved to another
    shard's place, folds unattested shards into an unattested file, and signs what it folds
    from attested ones: the rows it verified, read once (a shard rewritten after it was read
    is not what is folded)."""
    import shutil

    import pyarrow.parquet as pq

    from sweeper.results.attested_rows import ATTESTATION, rows_digest, statement_of
    from sweeper.results.storage import Experiment
    from sweeper.run import shards
    from sweeper.run.certify_stage import CERTIFY
    from sweeper.run.compaction import compact

    spec, exp, cfg = _trained(tmp_path, SPACE.replace("skip: 45", "skip: 15"))
    planned = shards.plan(cfg, "certify", spec.certify, 450)
    for shard in planned:
        shards.run_shard(exp, CERTIFY, shard, spec.certify, 1)
    paths = [exp.shard_path(cfg.trial_id, s.setting_id, s.index, s.count) for s in planned]
    checkpoint = att.sha256_file(exp.checkpoint(cfg.trial_id))
    for s, path in zip(planned, paths, strict=True):
        statement = statement_of(pq.read_table(path), signing_env.public)
        assert statement is not None and statement.step == "certify"
        assert statement.inputs == {"checkpoint.pt": checkpoint}
        assert statement.settings["shard"] == f"{s.index}/{s.count}"
    honest = Path(paths[0]).read_bytes()
    table = pq.read_table(paths[0])
    count = table.column("count").to_pylist()
    count[0] = (count[0] or 0) + 1
    changed = table.set_column(
        table.schema.get_field_index("count"), "count", pa_array(count, table)
    )
    setting = type("S", (), {"setting_id": planned[0].setting_id})()
    cases = {
        "rows are not the ones its attestation signed": changed,
        "of another shard": pq.read_table(paths[1]),
    }
    for why, bad in cases.items():
        pq.write_table(bad, paths[0])
        with pytest.raises(RuntimeError, match=why):
            compact(exp, CERTIFY, cfg.trial_id, setting, len(planned))
    Path(paths[0]).write_bytes(honest)
    target = exp.compacted_path("certify", cfg.trial_id, planned[0].setting_id, len(planned))
    # A shard written without a key: folded, but the compacted file is unattested like it.
    plain = Experiment(str(tmp_path / "plain"), exp.name)
    shutil.copytree(exp.root, plain.root)
    stripped = {k: v for k, v in table.schema.metadata.items() if k != ATTESTATION}
    pq.write_table(table.replace_schema_metadata(stripped), paths[0].replace(exp.root, plain.root))
    compact(plain, CERTIFY, cfg.trial_id, setting, len(planned))
    unsigned = pq.read_table(target.replace(exp.root, plain.root))
    assert statement_of(unsigned, signing_env.public) is None
    # A legacy DDRS memory file beside attested shards is unattested: so is what it makes.
    legacy = Experiment(str(tmp_path / "legacy"), exp.name)
    shutil.copytree(exp.root, legacy.root)
    shutil.copy(
        paths[0],
        Path(legacy.setting_dir("certify", cfg.trial_id, setting.setting_id)) / "memory.parquet",
    )
    compact(legacy, CERTIFY, cfg.trial_id, setting, len(planned))
    assert (
        statement_of(pq.read_table(target.replace(exp.root, legacy.root)), signing_env.public)
        is None
    )
    from sweeper.run import compaction

    read_bytes, reads = compaction.fileio.read_bytes, []

    def read_then_rewrite(location, limit=None):  # the shard changed once compaction read it
        data = read_bytes(location, limit)
        if location == paths[0]:
            reads.append(location)
            pq.write_table(changed, paths[0])
        return data

    monkeypatch.setattr(compaction.fileio, "read_bytes", read_then_rewrite)
    compact(exp, CERTIFY, cfg.trial_id, setting, len(planned))
    assert reads == [paths[0]]  # read once
    first = table.column("idx")[0].as_py()
    out = pq.read_table(target).to_pydict()
    assert out["count"][out["idx"].index(first)] == table.column("count")[0].as_py()  # honest
    folded = statement_of(pq.read_table(target), signing_env.public)
    assert folded is not None and folded.step == "compact"
    assert folded.settings["finish"] == "sweeper.run.certify_stage.finish"  # DDRS: memory pass
    assert folded.inputs["checkpoint.pt"] == checkpoint
    assert sorted(folded.inputs) == sorted(
        ["checkpoint.pt", *(f"shard {s.index}/{s.count}" for s in planned)]
    )
    assert folded.outputs == {"rows": rows_digest(pq.read_table(target))}


def pa_array(values, table):
    import pyarrow as pa

    return pa.array(values, table.schema.field("count").type)


def _verify(exp, *args: str, env: dict | None = None):
    cmd = ["verify", "--storage", exp.storage, "--experiment", exp.name, *args]
    return runner.invoke(app, cmd, env=env)


def test_sweeper_verify_lists_attested_unattested_and_failed_files_and_exits_1_on_a_failure(
    tmp_path, signing_env
):
    """A signed experiment verifies with its public key alone; a changed compacted file, a
    replaced checkpoint or another key are failures named (exit 1); a file with no statement
    is listed unattested; without any key it is one error line (exit 2)."""
    import shutil

    import pyarrow.parquet as pq

    from sweeper.results.attested_rows import ATTESTATION
    from sweeper.results.inventory import sign_inventory
    from sweeper.results.sweep_file import write_sweep
    from sweeper.run import shards
    from sweeper.run.certify_stage import CERTIFY
    from sweeper.run.compaction import compact

    spec, exp, cfg = _trained(tmp_path)
    write_sweep(exp, {"space": {}, "trials": [cfg.to_dict()]})
    planned = shards.plan(cfg, "certify", spec.certify, 450)
    for shard in planned:
        shards.run_shard(exp, CERTIFY, shard, spec.certify, 1)
    setting = type("S", (), {"setting_id": planned[0].setting_id})()
    compact(exp, CERTIFY, cfg.trial_id, setting, len(planned))
    assert sign_inventory(exp, signing_env) == 1  # as the driver does, letting go
    public = tmp_path / "public.pem"
    public.write_bytes(signing_env.public.pem())
    no_key = {att.KEY_ENV: "", "XDG_CONFIG_HOME": str(tmp_path / "none")}
    done = _verify(exp, "--public-key", str(public), env=no_key)
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[-1] == (
        f"key {signing_env.key_id}: 3 files attested, 0 unattested, 0 failed; "
        "signed inventory version 1"
    )
    refused = _verify(exp, env=no_key)
    assert refused.exit_code == 2 and "no key to verify with" in refused.stderr
    other = tmp_path / "other.pem"
    other.write_bytes(SigningKey.generate().public.pem())
    assert _verify(exp, "--public-key", str(other)).exit_code == 1
    target = exp.compacted_path("certify", cfg.trial_id, planned[0].setting_id, len(planned))
    table = pq.read_table(target)
    count = [(c or 0) + 1 for c in table.column("count").to_pylist()]
    pq.write_table(
        table.set_column(table.schema.get_field_index("count"), "count", pa_array(count, table)),
        target,
    )
    changed = _verify(exp)
    assert changed.exit_code == 1
    assert f"FAILED {target}: its rows are not the ones its attestation signed" in changed.stdout
    plain = table.replace_schema_metadata(
        {k: v for k, v in table.schema.metadata.items() if k != ATTESTATION}
    )
    pq.write_table(plain, target)
    unattested = _verify(exp)
    assert unattested.exit_code == 1  # its statement gone: unattested, and not the bytes listed
    assert f"unattested {target}: its rows carry no attestation" in unattested.stdout
    assert f"FAILED {exp.relative(target)}: not the bytes the signed inventory lists" in (
        unattested.stdout
    )
    shutil.copy(target, exp.checkpoint(cfg.trial_id))  # any other bytes
    replaced = _verify(exp)
    assert replaced.exit_code == 1
    assert "the checkpoint's bytes are not the ones attested" in replaced.stdout


def _certified(exp, spec, cfg) -> list:
    from sweeper.run import shards
    from sweeper.run.certify_stage import CERTIFY
    from sweeper.run.compaction import compact

    planned = shards.plan(cfg, "certify", spec.certify, 450)
    for shard in planned:
        shards.run_shard(exp, CERTIFY, shard, spec.certify, 1)
    setting = type("S", (), {"setting_id": planned[0].setting_id})()
    compact(exp, CERTIFY, cfg.trial_id, setting, len(planned))
    return planned


def _one_signed_one_plain(tmp_path, signing_env, monkeypatch):
    """Two trained models of SPACE, one trained and certified with the key, the other
    without: (experiment, signed config, plain config, the signed model's shards)."""
    import torch

    from sweeper.plan.grid import expand
    from sweeper.plan.spaces import load_space
    from sweeper.results.storage import Experiment
    from sweeper.results.sweep_file import write_sweep
    from trainables.attestations import attest_training
    from trainables.kernel.trial_status import write_status
    from trainables.train import fit

    (tmp_path / "space.yaml").write_text(SPACE)
    spec = load_space(str(tmp_path / "space.yaml"))
    exp = Experiment(str(tmp_path / "store"), "tiny")
    signed, plain = expand(spec)
    write_sweep(exp, {"space": {}, "trials": [signed.to_dict(), plain.to_dict()]})
    for cfg in (signed, plain):
        state = fit(cfg, exp.checkpoint(cfg.trial_id), device=torch.device("cpu"))
        write_status(exp.trial_dir(cfg.trial_id), cfg, "finished", state.epoch, state.history[-1])
    attest_training(exp.trial_dir(signed.trial_id), signed, exp.checkpoint(signed.trial_id), None)
    planned = _certified(exp, spec, signed)
    monkeypatch.delenv(att.KEY_ENV)
    _certified(exp, spec, plain)
    monkeypatch.setenv(att.KEY_ENV, signing_env.pem().decode())
    return exp, signed, plain, planned


def test_reads_mark_what_rests_on_unattested_files_leave_out_failed_ones_and_can_keep_only_attested(
    tmp_path, signing_env, monkeypatch
):
    """Two models, one certified with the key and one without: `envelope` counts both and
    says which rests on unattested files (csv: `attested`); --attested-only counts the signed
    one only; a signed file whose rows were changed is named and left out."""
    import io

    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    exp, signed, plain, planned = _one_signed_one_plain(tmp_path, signing_env, monkeypatch)
    args = ["envelope", "--storage", exp.storage, "--experiment", exp.name, "--format", "csv"]
    args += ["--radii", "0"]
    both = runner.invoke(app, args)
    assert both.exit_code == 0, both.output
    frame = pd.read_csv(io.StringIO(both.stdout))
    winner = frame.loc[0, "trial_id"]
    assert bool(frame.loc[0, "attested"]) == (winner == signed.trial_id)
    assert (
        f"attestations (key {signing_env.key_id}): 1 files verified; 1 model rest on unattested "
        "files (made without a key, or planted): counted"
    ) in both.stderr
    only = runner.invoke(app, [*args, "--attested-only"])
    assert only.exit_code == 0, only.output
    kept = pd.read_csv(io.StringIO(only.stdout))
    assert kept.loc[0, "trial_id"] == signed.trial_id and bool(kept.loc[0, "attested"])
    assert "1 model resting on unattested files left out (--attested-only)" in only.stderr
    per_model = runner.invoke(
        app,
        ["table", "--storage", exp.storage, "--experiment", exp.name, "--radii", "0"],
        env={"COLUMNS": "200"},
    )
    assert per_model.exit_code == 0, per_model.output
    assert f"{plain.trial_id} †" in per_model.stdout
    assert f"{signed.trial_id} †" not in per_model.stdout
    report = [*args[:5], "--radii", "0", "--formats", "svg"]
    report[0] = "report"
    written = runner.invoke(app, report)
    assert written.exit_code == 0, written.output
    index = Path(exp.report_dir(None), "index.md").read_text()
    assert f"- Checked with key {signing_env.key_id}: 1 results files verified;" in index
    assert "- 1 models rest on unattested files (made without a key, or planted) and are " in index
    assert f"counted: {plain.trial_id} ({planned[0].setting_id})." in index
    winners = Path(exp.report_dir(None), "envelope.md").read_text()
    assert (f"{plain.trial_id} †" in winners) == (winner == plain.trial_id)
    target = exp.compacted_path("certify", signed.trial_id, planned[0].setting_id, len(planned))
    table = pq.read_table(target)
    field = table.schema.field("time_s")  # a column no other check can tell is changed
    times = [t * 2 + 1 for t in table.column("time_s").to_pylist()]
    changed = table.set_column(
        table.schema.get_field_index("time_s"), field, pa.array(times, field.type)
    )
    pq.write_table(changed, target)
    tampered = runner.invoke(app, [*args, "--attested-only"])
    assert f"left out {target}: its rows are not the ones its attestation signed" in tampered.stderr
    monkeypatch.delenv(att.KEY_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    no_key = runner.invoke(app, [*args, "--attested-only"])
    assert no_key.exit_code == 2 and "--attested-only: no key to check" in no_key.stderr


def test_the_signed_inventory_shows_a_deleted_a_planted_and_a_changed_file_and_a_rollback(
    tmp_path, signing_env, monkeypatch
):
    import shutil

    from sweeper.results.inventory import inventory_path, inventory_problems, sign_inventory
    from sweeper.results.sweep_file import write_sweep

    spec, exp, cfg = _trained(tmp_path)
    write_sweep(exp, {"space": {}, "trials": [cfg.to_dict()]})
    planned = _certified(exp, spec, cfg)
    assert sign_inventory(exp, signing_env) == 1
    assert inventory_problems(exp, signing_env.public) == (1, [])
    first = tmp_path / "inventory-v1.json"
    shutil.copy(inventory_path(exp), first)
    assert sign_inventory(exp, signing_env) == 2
    target = exp.compacted_path("certify", cfg.trial_id, planned[0].setting_id, len(planned))
    rel = exp.relative(target)
    moved = tmp_path / "winner.parquet"
    shutil.move(target, moved)
    assert inventory_problems(exp, signing_env.public)[1] == [
        f"{rel}: listed in the signed inventory, now absent (deleted)"
    ]
    # the reads tell it too, without hashing a file: the model's folder is listed, now empty
    from sweeper.results.certify_rows import load_results

    assert load_results(exp).attestations.inventory == (
        f"{rel.rsplit('/', 1)[0]}: in the signed inventory, now absent (deleted)",
    )
    read = runner.invoke(app, ["envelope", "--storage", exp.storage, "--experiment", exp.name])
    assert read.exit_code == 2 and read.stderr.startswith(
        f"error: {rel.rsplit('/', 1)[0]}: in the signed inventory, now absent (deleted)"
    ), read.stderr
    shutil.copy(moved, target)
    assert load_results(exp).attestations.inventory == ()
    Path(exp.root, "sweep.json").write_text('{"space": {}, "trials": []}')
    planted = exp.compacted_path("certify", cfg.trial_id, "sigma-100", 1)
    Path(planted).parent.mkdir(parents=True)
    shutil.copy(target, planted)
    assert inventory_problems(exp, signing_env.public)[1] == [
        f"{exp.relative(planted)}: not in the signed inventory (written since, by whom?)",
        "sweep.json: not the bytes the signed inventory lists (changed)",
    ]
    shutil.copy(first, inventory_path(exp))  # an older signed inventory put back
    version, problems = inventory_problems(exp, signing_env.public)
    assert version == 1
    assert (
        f"{inventory_path(exp)}: version 1, older than the 2 this machine signed: rolled back"
        in (problems)
    )


def test_with_a_key_a_cache_edited_with_its_digests_recomputed_is_not_read(tmp_path, signing_env):
    """Issue 38's cache forgery: rows edited, the column digests recomputed. Signed by the
    driver that refreshed it, the cache no longer matches its statement: named, and the rows
    are read from the files (the honest ones)."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from sweeper.results.certify_rows import CERTIFY_ROWS, load_results
    from sweeper.results.digests import column_digests
    from sweeper.results.reader import COVERS, ROWS, refresh_cache
    from sweeper.results.sweep_file import write_sweep
    from trainables.kernel.trial_status import write_status

    spec, exp, cfg = _trained(tmp_path)
    write_sweep(exp, {"space": {}, "trials": [cfg.to_dict()]})
    write_status(exp.trial_dir(cfg.trial_id), cfg, "finished", 1, {})
    _certified(exp, spec, cfg)
    assert refresh_cache(exp, CERTIFY_ROWS) == 1
    honest = load_results(exp)
    assert honest.invalid == [] and honest.attestations.unattested == frozenset()
    cache = exp.cache_path("certify")
    table = pq.read_table(cache)
    meta = table.schema.metadata
    i = table.schema.get_field_index("time_s")
    edited = table.set_column(i, table.schema.field(i), pa.array([9.0] * table.num_rows))
    forged = {**meta, ROWS: json.dumps(column_digests(edited)).encode()}
    pq.write_table(edited.replace_schema_metadata(forged), cache)
    read = load_results(exp)
    assert read.invalid == [
        f"{cache}: its attestation is not of these records; reading the files instead"
    ]
    assert read.frame["time_s"].tolist() == honest.frame["time_s"].tolist()
    unsigned = {k: v for k, v in forged.items() if k in (COVERS, ROWS)}
    pq.write_table(edited.replace_schema_metadata(unsigned), cache)
    assert load_results(exp).invalid == [f"{cache}: not attested; reading the files instead"]


def test_a_keyed_read_of_the_signed_cache_checks_no_covered_file_again(
    tmp_path, signing_env, monkeypatch
):
    """The driver that refreshes the cache with the key checks each file's attestation and
    signs which covered files are unattested; a keyed read that verifies the cache takes its
    rows and that record, with no covered file read or checked again (what keeps a read of
    644 models fast), and checks a file whose size changed since."""

    from sweeper.results import attestation_reads, reader
    from sweeper.results.certify_rows import CERTIFY_ROWS, load_results

    exp, signed, plain, planned = _one_signed_one_plain(tmp_path, signing_env, monkeypatch)
    slow = load_results(exp)  # no cache yet: every file checked
    assert reader.refresh_cache(exp, CERTIFY_ROWS) == 2
    checked: list[list] = []
    real = attestation_reads.check_files
    monkeypatch.setattr(
        attestation_reads,
        "check_files",
        lambda e, files, k: checked.append(files) or real(e, files, k),
    )
    fast = load_results(exp)
    assert checked == [[]], "no covered file checked again"
    assert fast.attestations.attested == 1 == slow.attestations.attested
    assert (
        fast.attestations.unattested
        == slow.attestations.unattested
        == {(plain.trial_id, planned[0].setting_id)}
    )
    columns = ["trial_id", "idx", "radius", "correct"]
    order = ["trial_id", "idx"]
    assert (
        fast.frame[columns]
        .sort_values(order)
        .reset_index(drop=True)
        .equals(slow.frame[columns].sort_values(order).reset_index(drop=True))
    )
    # a covered file whose size changed (the same rows, written uncompressed) is read and
    # checked as a file: its statement still holds
    import pyarrow.parquet as pq

    target = exp.compacted_path("certify", signed.trial_id, planned[0].setting_id, len(planned))
    size = Path(target).stat().st_size
    pq.write_table(pq.read_table(target), target, compression="none")
    assert Path(target).stat().st_size != size
    checked.clear()
    again = load_results(exp)
    assert [f.path for f in checked[0]] == [target] and again.attestations.attested == 1
    # without the key nothing is skipped: the checked path reads every file
    monkeypatch.delenv(att.KEY_ENV)
    assert load_results(exp).attestations is None


def test_a_refresh_takes_its_own_compaction_s_statement_and_checks_a_file_changed_since(
    tmp_path, signing_env, monkeypatch
):
    """A compaction returns the digest of the file it wrote and what its statement says; a
    refresh given it (`known`, as the run's driver passes its tasks' results: through Ray,
    not the storage) verifies no statement of those bytes again, and does verify a file
    whose bytes are no longer those: rows changed under the old statement fail, left out."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sweeper.results import attestation_reads, attested_rows
    from sweeper.results.certify_rows import CERTIFY_ROWS
    from sweeper.results.reader import refresh_cache
    from sweeper.results.sweep_file import write_sweep
    from sweeper.run import shards
    from sweeper.run.certify_stage import CERTIFY
    from sweeper.run.compaction import compact
    from trainables.kernel.trial_status import write_status

    spec, exp, cfg = _trained(tmp_path)
    write_sweep(exp, {"space": {}, "trials": [cfg.to_dict()]})
    write_status(exp.trial_dir(cfg.trial_id), cfg, "finished", 1, {})
    planned = shards.plan(cfg, "certify", spec.certify, 450)
    for shard in planned:
        shards.run_shard(exp, CERTIFY, shard, spec.certify, 1)
    setting = type("S", (), {"setting_id": planned[0].setting_id})()
    done = compact(exp, CERTIFY, cfg.trial_id, setting, len(planned))
    target = exp.compacted_path("certify", cfg.trial_id, setting.setting_id, len(planned))
    assert done.digest == att.sha256_bytes(Path(target).read_bytes())
    statement = attested_rows.statement_of(pq.read_table(target), signing_env.public)
    assert statement is not None and done.said == attested_rows.said_by(statement)
    assert done.key_id == signing_env.key_id and done.rows == len(planned) * 10
    verified: list[str] = []
    real = attestation_reads.statement_of
    monkeypatch.setattr(
        attestation_reads, "statement_of", lambda t, k: verified.append("file") or real(t, k)
    )
    assert refresh_cache(exp, CERTIFY_ROWS, known={done.digest: done.said}) == 1
    assert verified == []
    table = pq.read_table(target)
    i = table.schema.get_field_index("time_s")
    changed = table.set_column(i, table.schema.field(i), pa.array([9.0] * table.num_rows))
    pq.write_table(changed, target)  # its statement kept, its rows not those signed
    Path(exp.cache_path("certify")).unlink()
    assert refresh_cache(exp, CERTIFY_ROWS, known={done.digest: done.said}) == 0
    assert verified == ["file"]


def test_the_statement_memo_is_rewritten_only_for_what_it_did_not_know(tmp_path):
    """check_files gives the memo what the run's compactions vouch for at every refresh: a
    statement it holds already marks nothing to save."""
    from sweeper.results.attestation_reads import Memo

    memo = Memo("k" * 16)
    memo.put("d" * 64, {"step": "compact"})
    memo.save()
    again = Memo("k" * 16)
    assert again.get("d" * 64) == {"step": "compact"}
    again.put("d" * 64, {"step": "compact"})
    assert not again.changed
    again.put("d" * 64, {"step": "certify"})
    assert again.changed
    assert str(tmp_path) in str(again.path)  # the test's own cache, never the user's
