"""Shared test set-up: few threads (2-core CI machine), deterministic torch and hypothesis."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from hypothesis import settings

torch.set_num_threads(1)
# Property tests: the same examples on every run (a failure is a reproducible counterexample,
# never a flake), no example database, and no deadline (a time limit would be a timing assert).
settings.register_profile("sweeper", derandomize=True, database=None, deadline=None)
settings.load_profile("sweeper")


# Seconds an end-to-end test may take, its fixtures' set-up included (a module's first test
# also runs the sweep its fixture builds): a hung Ray fails that test instead of the run.
E2E_TIMEOUT = 900


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "e2e" in item.keywords and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT))
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _cwd_in_tmp_path(tmp_path, monkeypatch):
    """Every test runs in its own tmp_path: a relative path the code under test makes up (a
    mutant that drops a URI's scheme or a directory, an unset storage) lands there, never in
    the checkout or in mutmut's mutants/ tree. Tests name the repository's files from
    `Path(__file__)`, never from the working directory. What a warm read remembers
    (`read_memo`, and the verified statements of `attestation_reads`, in this process) is the
    test's own too, never the user's; $XDG_CACHE_HOME
    itself is left alone (matplotlib's font cache is there)."""
    monkeypatch.chdir(tmp_path)
    from sweeper.results import attestation_reads, read_memo

    own = tmp_path / ".user-cache" / "sweeper"
    for module in (read_memo, attestation_reads):  # the validated files', the statements'
        monkeypatch.setattr(module, "user_cache", lambda *parts: own.joinpath(*parts))


@pytest.fixture(scope="session")
def signing_key():
    """The session's signing key: the Ray workers of `ray_session` hold it (as a driver hands
    its key to its workers), so the sweeps on it are attested; a test that signs or checks in
    its own process sets it there (`signing_env`)."""
    from trainables.kernel.attestation import SigningKey

    return SigningKey.generate()


@pytest.fixture
def signing_env(signing_key, monkeypatch):
    """$SWEEPER_SIGNING_KEY of this process set to the session's key, for this test."""
    from trainables.kernel.attestation import KEY_ENV

    monkeypatch.setenv(KEY_ENV, signing_key.pem().decode())
    return signing_key


@pytest.fixture(scope="session")
def ray_session(signing_key):
    """One local Ray for the whole session: 2 CPUs and one fake GPU (for packing tests);
    its workers hold the session's signing key."""
    ray = pytest.importorskip("ray")
    # address="local": a new Ray even if another process's `ray start` left its address behind
    from sweeper.run.launch import LOCAL_RAY
    from trainables.kernel.attestation import KEY_ENV

    ray.init(
        address="local",
        num_cpus=2,
        num_gpus=1,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {KEY_ENV: signing_key.pem().decode()}},
        _system_config=LOCAL_RAY,  # as the launcher's local Ray (`ray_cluster`)
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def smoke_run(ray_session, signing_key, tmp_path_factory):
    """The smoke sweep of `test_e2e` (`SPACE` there), run once per session, its driver holding
    the session's key (as a user's shell would: it signs the inventory as it lets go; the
    workers have it from `ray_session`). test_e2e's tests extend it (other settings); a test
    that changes it in place or needs it as run copies `pristine_sweep` instead. Returns
    (space, the experiment, a copy of it as the run left it)."""
    from test_e2e import SPACE, run_cli, write_space

    from sweeper.results.storage import Experiment
    from trainables.kernel.attestation import KEY_ENV

    tmp = tmp_path_factory.mktemp("sweep")
    space = write_space(tmp, SPACE)
    os.environ[KEY_ENV] = signing_key.pem().decode()
    try:
        result = run_cli("run", "grid", space, "--storage", tmp / "store", "--experiment", "e2e")
    finally:
        del os.environ[KEY_ENV]
    assert result.exit_code == 0, result.output
    pristine = tmp_path_factory.mktemp("pristine")
    shutil.copytree(tmp / "store", pristine, dirs_exist_ok=True)
    return space, Experiment(str(tmp / "store"), "e2e"), Experiment(str(pristine), "e2e")


@pytest.fixture
def finished_sweep(smoke_run):
    """(space, experiment) of the session's smoke sweep, as test_e2e's tests have left it."""
    space, exp, _ = smoke_run
    return space, exp


@pytest.fixture
def pristine_sweep(smoke_run):
    """(space, experiment) of the smoke sweep as its run left it: copy it before changing it."""
    space, _, pristine = smoke_run
    return space, pristine


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3 server on a free port with a bucket `sweeper-test`; yields the environment
    a process needs to reach it the standard AWS way (AWS_ENDPOINT_URL and credentials)."""
    import os

    boto3 = pytest.importorskip("boto3")
    server_module = pytest.importorskip("moto.server")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # pyarrow in this process (envelope, status, report) reads these
    boto3.client("s3").create_bucket(Bucket="sweeper-test")
    yield env
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    server.stop()
