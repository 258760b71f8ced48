"""Secrets stay secret (issue 25, section 6): credentials in a storage URI, in --address or in
--mlflow are refused with one `error:` line that shows them redacted, and never reach the
lease, sweep.json, Tune's state or a message.

The redaction and detection are checked on exact strings; every credential form through the
real command line (the secret never in stdout or stderr, nothing written); the command line the
lease stores; and one tiny real run whose experiment files are grepped for a secret that only
the environment held.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.cli.driver import command_line, finish
from sweeper.plan.sweep_plan import address_problems
from sweeper.results.credentials import (
    has_credentials,
    redact,
    redact_args,
    scrub,
    secret_params,
    userinfo,
    without_credentials,
)
from sweeper.results.lease import Lease
from sweeper.results.storage import Experiment, storage_problem
from sweeper.run.launch_options import CredentialsError, LaunchOptions

runner = CliRunner()
SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"


# ------------------------------------------------------------------------------ the functions
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (f"s3://AKIA:{SECRET}@bucket/prefix", "s3://***@bucket/prefix"),
        (f"s3://AKIA:wJal/rXUt{SECRET}@bucket/p", "s3://***@bucket/p"),  # '/' in the secret
        (f"s3://b/p?aws_secret_access_key={SECRET}&region=x", "s3://***@b/p?***"),
        (f"gs://b/p?access_token={SECRET}", "gs://***@b/p?***"),
        (f"abfs://c/p?client_secret={SECRET}", "abfs://***@c/p?***"),
        (f"s3://b/p?endpoint_override=http://u:{SECRET}@minio:9000", "s3://***@b/p?***"),
        (f"s3://b/p#access_token={SECRET}", "s3://***@b/p#***"),
        (f"ray://user:{SECRET}@head:10001", "ray://***@head:10001"),
        (f"user:{SECRET}@head:10001", "***@head:10001"),  # Ray's scheme-less address
        (f"http://user:{SECRET}@mlflow:5000/x", "http://***@mlflow:5000/x"),
        (f"file://user:{SECRET}@host/tmp/x?y", "file://***@host/tmp/x?y"),
        # nothing to hide: returned as given
        ("s3://bucket/prefix", "s3://bucket/prefix"),
        ("/data/user@host/results", "/data/user@host/results"),  # a path
        ("file:///tmp/a@b?c", "file:///tmp/a@b?c"),  # a local URI's path and query
        ("ray://head:10001", "ray://head:10001"),
        ("10.0.0.1:6379", "10.0.0.1:6379"),
        ("auto", "auto"),
    ],
)
def test_redact_hides_userinfo_and_a_remote_query_on_exact_strings(value, shown):
    assert redact(value) == shown
    assert SECRET not in redact(value)


@pytest.mark.parametrize(
    "value",
    [
        f"s3://AKIA:{SECRET}@bucket/prefix",
        f"s3://{SECRET}@bucket",
        f"s3://AKIA:wJal/rXUt{SECRET}@bucket/p",
        f"s3://b/p?aws_secret_access_key={SECRET}",
        f"s3://b/p?AWS_SESSION_TOKEN={SECRET}",
        f"gs://b/p?access_token={SECRET}",
        f"abfs://c/p?client_secret={SECRET}",
        f"abfs://c/p?sv=2022&sig={SECRET}",  # an Azure SAS token
        f"s3://b/p?region=x&Secret_Key={SECRET}",
        "s3://b/p?password",  # a secret key without a value
        f"s3://b/p?endpoint_override=http://u:{SECRET}@minio:9000",
        f"s3://b/p?endpoint_override=u:{SECRET}@minio:9000",
        f"s3://b/p?endpoint_override=http%3A%2F%2Fu%3A{SECRET}%40minio",  # percent-encoded
        f"ray://user:{SECRET}@head:10001",
        f"user:{SECRET}@head:10001",
        f"http://user:{SECRET}@mlflow:5000",
        f"http://mlflow:5000/?token={SECRET}",
        f"file://user:{SECRET}@host/tmp/x",
    ],
)
def test_every_credential_form_is_found(value):
    assert has_credentials(value)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "auto",
        "local",
        "10.0.0.1:6379",
        "ray://head:10001",
        "s3://bucket/prefix",
        "s3://b/p?region=us-west-2&endpoint_override=localhost:9000&scheme=http",
        "/data/user@host/results",
        "runs/v2@x",
        "file:///tmp/a@b?token=c",
        "http://mlflow:5000",
        "file:/tmp/mlruns",
    ],
)
def test_values_without_credentials_are_not_flagged(value):
    assert not has_credentials(value)


def test_the_parts_found_and_what_to_give_instead_on_exact_strings():
    assert userinfo("s3://AKIA:wJal/rXUt@bucket/p") == "AKIA:wJal/rXUt"
    assert userinfo("user:pw@head:10001") == "user:pw"
    assert userinfo("file://u@host/x@y") == "u" and userinfo("file:///x@y") is None
    assert userinfo("runs/v2@x") is None  # a scheme-less value with '/' is a path
    uri = "s3://b/p?region=x&aws_secret_access_key=k&endpoint_override=http://u:p@m:9000"
    assert secret_params(uri) == [
        ("aws_secret_access_key", "k"),
        ("endpoint_override", "http://u:p@m:9000"),
    ]
    assert without_credentials(uri) == "s3://b/p?region=x"
    assert without_credentials("ray://user:pw@head:10001") == "ray://head:10001"
    assert without_credentials("http://u:p@mlflow:5000/?token=t") == "http://mlflow:5000/"
    assert without_credentials(f"http://u:p@mlflow/#access_token={SECRET}") == "http://mlflow/"
    assert without_credentials(f"http://u:p@mlflow/?x=1#{SECRET}") == "http://mlflow/?x=1"
    assert without_credentials("file://u@host/a?b#c") == "file://host/a?b"


def test_redact_args_hides_only_credentials_and_keeps_the_rest_as_typed():
    args = [
        "x",
        f"--storage=s3://a:{SECRET}@b/p",
        "--address",
        f"u:{SECRET}@h:1",
        "runs@v2",
        "--storage",
        "s3://b/p?region=x",
        "--mlflow",
        f"http://m/?token={SECRET}",
    ]
    assert redact_args(args) == [
        "x",
        "--storage=s3://***@b/p",
        "--address",
        "***@h:1",
        "runs@v2",
        "--storage",
        "s3://b/p?region=x",
        "--mlflow",
        "http://***@m/?***",
    ]


def test_scrub_hides_each_secret_part_of_a_value_in_a_third_party_text():
    value = f"ray://user:{SECRET}@head:10001?session=s3cr3t"
    text = f"Failed to connect to user:{SECRET}@head:10001; password {SECRET}; session=s3cr3t"
    assert (
        scrub(text, value, None)
        == "Failed to connect to ***@head:10001; password ***; ***"  # the whole query
    )


# ------------------------------------------------------------------------------ refusals
def error_lines(result) -> list[str]:
    """Exit 2, no traceback, only `error:` lines on stderr, the secret nowhere."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output and SECRET not in result.output + result.stderr
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), result.stderr
    return lines


def files(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in root.rglob("*")
    }


STORAGES = [
    f"s3://b/p?aws_secret_access_key={SECRET}",
    f"gs://b/p?access_token={SECRET}",
    f"abfs://c/p?client_secret={SECRET}",
    f"s3://b/p?endpoint_override=http://minio:{SECRET}@localhost:9000",
    f"s3://AKIA:wJal/rXUt{SECRET}@bucket/p",
    f"file://user:{SECRET}@host{{tmp}}/store",
]


@pytest.mark.parametrize("uri", STORAGES)
@pytest.mark.parametrize(
    "command", [["run", "grid", "digits", "--smoke"], ["status"], ["envelope"]]
)
def test_storage_credentials_are_refused_redacted_and_nothing_is_written(tmp_path, uri, command):
    uri = uri.format(tmp=tmp_path)
    (line,) = error_lines(runner.invoke(app, [*command, "--storage", uri]))
    assert line.startswith(f"error: --storage {redact(uri)}: credentials in the URI are refused")
    assert "AWS_SECRET_ACCESS_KEY" in line
    assert list(tmp_path.iterdir()) == []


ADDRESSES = [f"ray://user:{SECRET}@127.0.0.1:10001", f"user:{SECRET}@127.0.0.1:10001"]


@pytest.mark.parametrize("address", ADDRESSES)
@pytest.mark.parametrize(
    "command",
    [
        ["run", "grid", "digits", "--smoke", "--dry-run"],
        ["run", "grid", "digits", "--smoke"],
        ["certify", "digits", "--smoke"],
        ["empirical", "digits", "--smoke"],
    ],
)
def test_address_credentials_are_refused_redacted_and_nothing_is_written(
    tmp_path, address, command
):
    result = runner.invoke(app, [*command, "--storage", str(tmp_path / "s"), "--address", address])
    (line,) = error_lines(result)
    assert line == (
        f"error: --address {redact(address)}: credentials in the address are refused (Ray takes "
        f"none there): give {address.replace(f'user:{SECRET}@', '')}; a cluster with token "
        "authentication reads its token from the environment (RAY_AUTH_MODE=token and "
        "RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH)"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("uri", "shown", "plain"),
    [
        (f"http://user:{SECRET}@mlflow:5000", "http://***@mlflow:5000", "http://mlflow:5000"),
        (f"https://mlflow/?access_token={SECRET}", "https://***@mlflow/?***", "https://mlflow/"),
    ],
)
def test_mlflow_credentials_are_refused_with_the_environment_variables_to_use(
    tmp_path, uri, shown, plain
):
    args = ["run", "grid", "digits", "--smoke", "--storage", str(tmp_path / "s"), "--mlflow", uri]
    (line,) = error_lines(runner.invoke(app, args))
    assert line == (
        f"error: --mlflow {shown}: credentials in the URI are refused (they would be stored in "
        f"Ray Tune's state): give {plain} and set MLFLOW_TRACKING_USERNAME and "
        "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) in the environment of the sweeper "
        "command, which logs to MLflow"
    )
    assert list(tmp_path.iterdir()) == []


def test_launch_options_refuse_both_at_once_and_take_plain_values():
    with pytest.raises(CredentialsError) as refused:
        LaunchOptions(address=ADDRESSES[0], mlflow=f"http://u:{SECRET}@m:5000")
    assert len(refused.value.problems) == 2 and SECRET not in str(refused.value)
    LaunchOptions(address="ray://head:10001", mlflow="file:/tmp/mlruns")  # no error


def test_address_problems_never_echo_credentials_even_called_directly():
    (problem,) = address_problems(ADDRESSES[0])
    assert (
        problem.startswith("--address ray://***@127.0.0.1:10001: credentials")
        and SECRET not in problem
    )
    assert storage_problem(STORAGES[0]) is not None and storage_problem("/data/u:p@host") is None


def test_ray_address_from_the_environment_is_refused_before_ray_starts(monkeypatch):
    import ray

    from sweeper.run.launch import LaunchError, ray_cluster

    was_up = ray.is_initialized()  # refused whether or not a Ray is up in this process
    monkeypatch.setenv("RAY_ADDRESS", ADDRESSES[0])
    with pytest.raises(LaunchError) as refused, ray_cluster(None):
        pass
    (problem,) = refused.value.problems
    assert problem.startswith("RAY_ADDRESS ray://***@127.0.0.1:10001: credentials in the address")
    assert SECRET not in problem and ray.is_initialized() == was_up


# ------------------------------------------------------------------------------ the lease
ARGV = [
    "sweeper",
    "run",
    "grid",
    "digits",
    "--storage",
    f"s3://AKIA:{SECRET}@b/p",
    f"--address=ray://u:{SECRET}@h:10001",
    "--mlflow",
    f"http://m:5000/?token={SECRET}",
    "--address",
    f"u:{SECRET}@h:10001",
    "--data-dir",
    "runs@v2",
    "--only",
    "a=b",
]


def test_the_command_line_is_redacted_and_keeps_everything_else(monkeypatch):
    monkeypatch.setattr(sys, "argv", ARGV)
    assert command_line() == (
        "sweeper run grid digits --storage s3://***@b/p --address=ray://***@h:10001 --mlflow "
        "http://***@m:5000/?*** --address ***@h:10001 --data-dir runs@v2 --only a=b"
    )
    monkeypatch.setattr(sys, "argv", ["sweeper", "status", "--storage", "s3://b/p?region=x"])
    assert command_line() == "sweeper status --storage s3://b/p?region=x"  # nothing secret


def test_the_lease_and_the_resume_hint_hold_the_redacted_command(tmp_path, monkeypatch, capsys):
    """What the drivers store (`Lease(exp, command_line())`) and print (`finish`)."""
    import typer

    monkeypatch.setattr(sys, "argv", ARGV)
    exp = Experiment(str(tmp_path), "x")
    with Lease(exp, command_line()):
        held = Path(exp.lease_json).read_bytes()
    assert SECRET.encode() not in held and b"s3://***@b/p" in held
    assert json.loads(held)["command"] == command_line()
    assert all(SECRET.encode() not in data for data in files(tmp_path).values() if data)
    with pytest.raises(typer.Exit):
        finish(True, [])
    out = capsys.readouterr()
    assert "re-run `sweeper run grid digits --storage s3://***@b/p" in out.out
    assert SECRET not in out.out + out.err


# ------------------------------------------------------------------------------ a real run
@pytest.mark.e2e
def test_a_real_run_stores_no_secret_the_environment_carried(ray_session, tmp_path, monkeypatch):
    """MLflow's credentials given the documented way (the environment) reach no file of the
    experiment (lease.json, sweep.json, tune/**/tuner.pkl, trial.json, logs) nor the MLflow
    store; a storage path with '@' is a path, not a credential."""
    store, mlruns = tmp_path / "runs@v2", tmp_path / "mlruns"
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "sweeper-user")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET)
    args = [
        "run",
        "grid",
        "digits",
        "--smoke",
        "--only",
        "method=gaussian,sigma=0.25",
        "--storage",
        str(store),
        "--mlflow",
        f"file:{mlruns}",
    ]
    monkeypatch.setattr(sys, "argv", ["sweeper", *args])
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    written = {**files(store), **files(mlruns)}
    (tuner,) = [data for name, data in written.items() if name.endswith("tuner.pkl")]
    assert f"file:{mlruns}".encode() in tuner  # Tune keeps the tracking URI: hence the refusal
    assert {"digits-smoke/sweep.json", "digits-smoke/lease.json"} <= set(written)
    assert [name for name, data in written.items() if data and SECRET.encode() in data] == []
    lease = json.loads(written["digits-smoke/lease.json"])
    assert lease["command"] == "sweeper " + " ".join(args)


# ------------------------------------------------------------------------------ data locations
DATA_URIS = [
    f"s3://AKIA:{SECRET}@bucket/data",
    f"s3://AKIA:wJal/rXUt{SECRET}@bucket/data",  # '/' in the secret
    f"s3://bucket/data?aws_secret_access_key={SECRET}",
    f"gs://bucket/data?access_token={SECRET}",
    f"https://user:{SECRET}@host/data",
]


def nowhere(root: Path) -> None:
    """The secret in no file below `root` (every file written, grepped)."""
    assert [p for p in root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()] == []


@pytest.mark.parametrize("uri", DATA_URIS)
@pytest.mark.parametrize(
    "command",
    [
        ["run", "grid", "digits", "--smoke"],  # digits reads no data dir: stored all the same
        ["run", "grid", "digits", "--smoke", "--dry-run"],
        ["run", "grid", "mnist", "--smoke"],
        ["certify", "digits", "--smoke"],
        ["empirical", "mnist", "--smoke"],
    ],
)
def test_data_dir_credentials_are_refused_redacted_and_nothing_is_written(tmp_path, uri, command):
    """Issue 38: `--data-dir s3://KEY:SECRET@…` was stored in sweep.json, trial.json, the
    checkpoint, the Parquet metadata and Tune's state, and printed by mnist's data check."""
    store = tmp_path / "store"
    result = runner.invoke(app, [*command, "--storage", str(store), "--data-dir", uri])
    (line,) = error_lines(result)
    assert line.startswith(
        f"error: --data-dir {redact(uri)}: credentials in the data location are refused (a data "
        "location is stored in sweep.json"
    ), line
    assert f"give {without_credentials(uri)}, with the credentials in the environment" in line
    assert not store.exists()
    nowhere(tmp_path)


@pytest.mark.parametrize("uri", DATA_URIS[:3])
def test_data_put_refuses_credentials_in_to_and_from_without_echoing_them(tmp_path, uri):
    source = tmp_path / "mnist"
    source.mkdir()
    for args, flag in (
        (["mnist", "--from", str(source), "--to", uri], "--to"),
        (["mnist", "--from", uri, "--to", "s3://bucket/data"], "--from"),
        (["pseudo", "--from", uri, "--to", "s3://bucket/data"], "--from"),
    ):
        (line,) = error_lines(runner.invoke(app, ["data", "put", *args]))
        assert line.startswith(f"error: {flag} {redact(uri)}: credentials in the data location")
    (line,) = error_lines(runner.invoke(app, ["pseudo-data", uri, "--dataset", "digits"]))
    assert line.startswith(f"error: PATH {redact(uri)}: credentials in the data location")
    nowhere(tmp_path)


def test_a_data_uri_refused_for_its_shape_is_shown_redacted():
    """The data cache's own check (on a worker, or `data put --to` of another shape) words a
    refused URI through `redact`: it may be one of a trial.json written before this check."""
    from trainables import data_cache

    for uri in DATA_URIS:
        problem = data_cache.uri_problem(uri)
        assert problem is not None and SECRET not in problem and redact(uri) in problem


SPACE_WITH_SECRET = """\
fixed: {{dataset: digits, arch: mlp, epochs: 1, {field}: "{uri}"}}
grids:
  - name: g
    axes: {{sigma: [0.25]}}
"""


@pytest.mark.parametrize("field", ["pseudo_data", "data_dir"])
@pytest.mark.parametrize("uri", DATA_URIS[:3])
def test_a_space_whose_data_fields_carry_credentials_is_refused_naming_the_place(
    tmp_path, field, uri
):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE_WITH_SECRET.format(field=field, uri=uri))
    store = tmp_path / "store"
    for command in (["run", "grid"], ["run", "grid", "--dry-run"], ["certify"]):
        args = [*command[:2], str(space), *command[2:], "--storage", str(store)]
        lines = error_lines(runner.invoke(app, args))
        assert lines == [
            f"error: space.yaml: fixed.{field} {redact(uri)}: credentials in the data location "
            f"are refused (a data location is stored in sweep.json, every trial's state and "
            f"checkpoint, and Tune's): give {without_credentials(uri)}, with the credentials in "
            "the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, "
            "GOOGLE_APPLICATION_CREDENTIALS) or the nodes' roles"
        ], lines
    assert not store.exists()


def test_a_space_value_deep_in_a_grid_is_found_and_a_local_path_with_an_at_is_not():
    from sweeper.results.credentials import space_credentials_problems

    doc = {
        "grids": [{"axes": {"pseudo_data": ["/data/user@host/p.npz", DATA_URIS[0]]}}],
        "fixed": {"data_dir": "data@v2", "description": "mail me at a@b"},
    }
    [line] = space_credentials_problems(doc)
    assert line.startswith(f"grids[0].axes.pseudo_data[1] {redact(DATA_URIS[0])}: credentials")


def test_import_set_refuses_a_data_location_with_credentials(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    args = ["import", str(logs), "--storage", str(tmp_path / "store"), "--experiment", "e"]
    (line,) = error_lines(runner.invoke(app, [*args, "--set", f"pseudo_data={DATA_URIS[0]}"]))
    assert line.startswith(f"error: --set pseudo_data {redact(DATA_URIS[0])}: credentials")
    assert not (tmp_path / "store").exists()
