"""A CIFAR-scale drill of the control and results plane, measured.

Run from the repository root (a benchmark, not a test):

    .venv/bin/python benchmarks/sweep_scale.py            # the full cifar10 plan, ~15-30 min
    .venv/bin/python benchmarks/sweep_scale.py --smoke    # 32 trials, no 10x step, ~3 min

What runs is the real launcher (`sweeper.run.launch.run_sweep`: Ray Tune, the stage searcher, the
callbacks, the sharded-stage engine with compaction and the results cache, the storage layout,
the experiment's lease) over the real `cifar10` plan: its 644 trial configs and trial ids, its
certification setting (10 shards of 50 points per model) and row schema. Only the data plane is
a stand-in, at the `DataPlane` boundary of the launcher: the trainable writes the trial's
`trial.json` as finished and reports once (no epochs are trained), and the certification stage
returns CERTIFY-like rows (valid: radii below what n and α allow, labels in range) without a
model. Ray is local, with fake resources at the space's packing: 16 CPUs and 2 GPUs advertised,
so 8 trials (cpu 2, gpu 0.25 each) and 8 certification tasks run at once on this machine.

1. A driver process runs `tune.Tuner` over the same number of trivial trials ("bare Tune"),
   then the sweep; it reports both wall times, its own peak RSS, and the whole machine's busy
   and idle CPU-seconds during the sweep per trial (`/proc/stat`: Ray's workers and daemons
   included; on 2 saturated cores what a sweep costs shows there, not in wall time alone).
2. The reads a user makes afterwards, timed in this process (imports done first): `envelope`
   (load_results + envelope at 0:2.25:0.25), `status` (experiment_status) and `report`
   (build_report + write_report).
3. Resume after kill: a new experiment; its driver is SIGKILLed once about half the trials have
   finished, then run again to the end. "retrained" counts trials started again although they
   had finished before the kill; "duplicate rows" counts (trial_id, cert_id, idx) present
   twice across every results file on storage.
4. (with --search) The same plan under `--search envelope` (its searcher, cost and curves the
   sweep's own, in another experiment): the trials it trained and its wall time per trained
   trial against bare Tune's, and the CPU time the searcher itself spent in Tune's calls
   (its record's `deciding`: curves read, decisions, the record written) per proposal, a
   figure a shared machine's load does not inflate as it does wall time; and bare Tune
   again, in a fresh driver, over as many trials as the search trained (a Tune run's fixed
   cost per trial grows as it runs fewer: 0.085 s at 160 trials, 0.056 s at 644 here).
   The stand-in's curves have no structure to learn (random counts), so this times the
   control plane, not the search's economy.
5. (with --attested) Everything signed as a keyed sweep signs it (a key made for the run, in
   the environment of the harness and its drivers): the stand-in trainable writes a stand-in
   checkpoint and its training statement, shards, compacted files, the cache and the
   inventory are signed, the reads check every file they use (`attestation_reads`), and
   `sweeper verify`'s work is timed.
6. (not with --smoke) 10x: the results replicated under 10 certification settings (6,440
   models, 3.2M rows, the cache refreshed), and the three reads timed again.

The last line is the summary: `scale: ... trials, ... shards, ... rows; overhead ... s/trial
(bare Tune ... s); driver RSS ... GiB; envelope ... s; status ... s; report ... s; resume after
kill: ... retrained, ... duplicate rows`. Goals on a 2-core machine: overhead within 0.25 s per
trial of bare Tune, driver RSS <= 2 GiB, envelope and status <= 1 s and report <= 5 s at 644
models (10x: under 5x those), 0 retrained, 0 duplicates.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from sweeper.results.certify_rows import CERTIFY_ROWS, SCHEMA, shard_table
from sweeper.results.storage import Experiment
from sweeper.run.stage import Stage
from trainables.kernel import fileio
from trainables.kernel.config import TrialConfig

CPUS, GPUS = 16, 2  # advertised: the cifar10 space's packing, 8 trials at once
TEST_SIZE = 10_000  # CIFAR-10's test split


# ------------------------------------------------------------------------------ the stand-ins
def standin_trial(config: dict, experiment_root: str) -> None:
    """The Tune trainable's bookkeeping without training: a start marker, trial.json, one report."""
    from ray import tune

    from trainables.attestations import attest_training
    from trainables.kernel.trial_status import trial_dir, write_status

    cfg = TrialConfig.from_dict(config["trial"])
    marker = fileio.join(experiment_root, "standin-starts", f"{cfg.trial_id}.{time.time_ns()}")
    fileio.write_bytes_atomic(marker, b"")
    directory = trial_dir(experiment_root, cfg.trial_id)
    checkpoint = fileio.join(directory, "checkpoint.pt")  # a stand-in's bytes, attested as one
    fileio.write_bytes_atomic(checkpoint, cfg.trial_id.encode())
    attest_training(directory, cfg, checkpoint, None)  # with the run's key, as training does
    write_status(directory, cfg, "finished", cfg.epochs, {})
    tune.report({"epoch": cfg.epochs, "trial_id": cfg.trial_id})


def standin_certify(exp: Experiment, shard, spec, cpus: float) -> pa.Table:
    """CERTIFY-like rows for the shard's points: a vote count drawn per point, the rest as
    CERTIFY derives it from the count (`radius_from_counts`, on the whole shard at once: the
    stand-in is the data plane, not what this drill times), so the reader's checks, which
    recompute p_lower and the radius from the count, accept them."""
    from trainables.kernel.certificates import ABSTAIN, radius_from_counts
    from trainables.kernel.trial_status import read_status

    cfg = TrialConfig.from_dict(read_status(exp.trial_dir(shard.trial_id))["config"])
    rng = np.random.default_rng(abs(hash((shard.trial_id, shard.index))) % 2**32)
    k = len(shard.indices)
    nA = rng.binomial(spec.n, rng.beta(6, 1.5, k))
    label = np.asarray(shard.indices) % 10
    chosen = np.where(rng.random(k) < 0.8, label, (label + 1) % 10)
    p_lower, radius = radius_from_counts(nA, spec.n, spec.alpha, cfg.sigma)
    p_lower, radius = np.atleast_1d(p_lower), np.atleast_1d(radius)
    abstain = p_lower < 0.5
    predict = np.where(abstain, ABSTAIN, chosen)
    cols = {
        "idx": list(shard.indices),
        "label": label.tolist(),
        "predict": predict.tolist(),
        "count": nA.tolist(),
        "p_lower": p_lower.tolist(),
        "radius": np.where(abstain, 0.0, radius).tolist(),
        "correct": ((predict != ABSTAIN) & (predict == label)).tolist(),
        "sigma_cert": [cfg.sigma] * k,
        "time_s": [0.0] * k,
    }
    constants = {"smoothing": "fixed", "n0": spec.n0, "n": spec.n, "alpha": spec.alpha}
    meta = {"certify_backend": "benchmarks/sweep_scale.py stand-in", "config": cfg.to_dict()}
    return shard_table(cfg, exp.name, shard.setting_id, constants, cols, meta)


STANDIN = Stage.of(CERTIFY_ROWS, standin_certify)


def standin_test_size(dataset: str, data_dir: str | None) -> int:
    return TEST_SIZE


# ------------------------------------------------------------------------------ the driver
BARE_ONLY = "bare-only"  # a driver of bare Tune alone (`searched_line`)


def trivial(config: dict) -> None:
    from ray import tune

    tune.report({"done": 1})


def bare_tune(trials: int, storage: str) -> float:
    """Wall time of `trials` trivial trials through tune.Tuner at the sweep's resources."""
    from ray import tune

    fn = tune.with_resources(trivial, {"cpu": 2, "gpu": 0.25})
    start = time.perf_counter()
    tune.Tuner(
        fn,
        param_space={"i": tune.grid_search(list(range(trials)))},
        tune_config=tune.TuneConfig(reuse_actors=True),
        run_config=tune.RunConfig(name="bare", storage_path=storage, verbose=0),
    ).fit()
    return time.perf_counter() - start


def machine_cpu() -> tuple[float, float]:
    """(busy, idle) CPU-seconds of the whole machine since boot, from /proc/stat (Linux; zeros
    elsewhere): every process's CPU, Ray's workers and daemons with the driver, which a
    driver's own clock leaves out, and a load that wall time hides (two cores saturated)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0, 0.0
    user, nice, system, idle, iowait, irq, softirq = (int(v) for v in fields[:7])
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, (idle + iowait) / tick


def _cpu_line(driven: dict, trained: int) -> str:
    """The machine's busy and idle CPU-seconds per trained trial during a sweep."""
    busy, idle = driven.get("cpu_s") or (0.0, 0.0)
    return f"machine CPU per trial {busy / trained:.3f} s busy, {idle / trained:.3f} s idle"


def drive(storage: str, name: str, trials: int, bare: bool, out: str, search: bool = False) -> None:
    """One driver: (bare Tune), then the sweep through the real launcher (`search`: under the
    envelope search, its searcher and cost the sweep's own); writes JSON."""
    import ray

    from sweeper.plan.grid import expand
    from sweeper.plan.spaces import load_space
    from sweeper.plan.sweep_plan import is_finished, trial_states
    from sweeper.results.inventory import sign_if_keyed
    from sweeper.results.lease import Lease
    from sweeper.results.sweep_file import write_sweep
    from sweeper.run.launch import LOCAL_RAY, DataPlane, run_sweep
    from sweeper.run.launch_options import LaunchOptions

    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    # The stand-ins by reference, as a real plane's functions are (a module the workers
    # import), not by value from __main__: cloudpickle would pickle the stand-in certify
    # function into every shard task (a tenth of the driver's time at 644 trials).
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    import sweep_scale as standins  # type: ignore[import-not-found]  # itself, as a module

    ray.init(
        address="local",
        num_cpus=CPUS,
        num_gpus=GPUS,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
        _system_config=LOCAL_RAY,  # as the launcher's local Ray (`ray_cluster`)
    )
    report: dict[str, object] = {"bare_s": bare_tune(trials, storage) if bare else None}
    if name == BARE_ONLY:  # bare Tune alone, over as many trials as a search trained
        Path(out).write_text(json.dumps(report))
        ray.shutdown()
        return
    spec = load_space("cifar10")
    plan = expand(spec)[:trials]
    exp = Experiment(storage, name)
    with Lease(exp, "benchmarks/sweep_scale.py"):
        write_sweep(
            exp, {"space": json.loads(spec.to_json()), "trials": [t.to_dict() for t in plan]}
        )
        states = trial_states(exp, plan)
        finished = [t for t in plan if is_finished(states[t.trial_id], t)]
        to_train = [t for t in plan if not is_finished(states[t.trial_id], t)]
        plane = DataPlane(standins.standin_trial, standins.STANDIN, standins.standin_test_size)
        searched = None
        if search:
            from sweeper.plan.search_spec import SearchSpec
            from sweeper.run.search_tune import search_plan

            searched = search_plan(SearchSpec(mode="envelope"), plan, spec.certify, gpu=True)
        start, cpu = time.perf_counter(), machine_cpu()
        outcome = run_sweep(
            exp,
            to_train,
            finished,
            spec.certify,
            spec.resources,
            LaunchOptions(),
            lambda e: None,
            None,
            plane,
            search=searched,
        )
        report["sweep_s"] = time.perf_counter() - start
        report["cpu_s"] = [after - before for after, before in zip(machine_cpu(), cpu, strict=True)]
        report["trained"] = len(outcome.completed)
        if search:  # the searcher's own account of its CPU (search_records: `deciding`)
            from sweeper.results.search_records import read_search

            record = read_search(exp) or {}
            report["deciding"] = record.get("deciding")
            report["curve_wait"] = record.get("curve_wait")
            report["proposals"] = len(record.get("proposals", []))
            report["rounds"] = len(list(Path(exp.tune_dir).glob("run-*")))  # Tune's rounds
        sign_if_keyed(exp)  # as a driver does, letting go (with --attested)
    report["failures"] = len(outcome.failed) + len(outcome.certify_failures)
    report["rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    Path(out).write_text(json.dumps(report))
    ray.shutdown()


# ------------------------------------------------------------------------------ the harness
def _driver(
    storage: str, name: str, trials: int, bare: bool, out: str, search: bool = False
) -> list[str]:
    args = [
        sys.executable,
        __file__,
        "--drive",
        name,
        "--storage",
        storage,
        "--trials",
        str(trials),
        "--out",
        out,
    ]
    return [*args, *(["--bare"] if bare else []), *(["--search"] if search else [])]


def time_reads(exp: Experiment, radii: list[float]) -> dict[str, float]:
    """Seconds of work of envelope, status and report (imports done before timing)."""
    from sweeper.api.report_view import dataset_dims
    from sweeper.report.build import build_report, write_report
    from sweeper.results.certify_rows import load_results
    from sweeper.results.envelope import envelope, read_columns
    from sweeper.results.status import experiment_status

    out = {}
    start = time.perf_counter()
    frame = load_results(exp, read_columns("smoothing")).frame  # what `sweeper envelope` reads
    envelope(frame if frame["sound"].all() else frame[frame["sound"]], radii, None)
    out["envelope"] = time.perf_counter() - start
    start = time.perf_counter()
    experiment_status(exp)
    out["status"] = time.perf_counter() - start
    start = time.perf_counter()
    frame = load_results(exp).frame
    dims = dataset_dims(frame["dataset"].unique())
    built = build_report(frame, radii, dims, ("png",), (1, 2, 4, 8), name=exp.name)
    write_report(built, exp.reports_dir)
    out["report"] = time.perf_counter() - start
    return out


def kill_and_resume(storage: str, trials: int) -> tuple[int, int]:
    """(trials retrained, duplicate rows) after SIGKILLing a driver half way and re-running."""
    exp = Experiment(storage, "killed")
    out = os.path.join(storage, "killed.json")
    proc = subprocess.Popen(_driver(storage, "killed", trials, False, out), start_new_session=True)
    while _finished(exp) < trials // 2:
        if proc.poll() is not None:
            raise RuntimeError("the driver ended before it could be killed")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its local Ray (one process group)
    proc.wait()
    before = set(_finished_ids(exp))
    subprocess.run(_driver(storage, "killed", trials, False, out), check=True)
    starts = [p.name.split(".")[0] for p in Path(exp.root, "standin-starts").iterdir()]
    retrained = sum(starts.count(t) - 1 for t in before)
    return retrained, _duplicates(exp)


def _finished_ids(exp: Experiment) -> list[str]:
    return [
        p.parent.name
        for p in Path(exp.root, "trials").glob("*/trial.json")
        if json.loads(p.read_text())["state"] == "finished"
    ]


def _finished(exp: Experiment) -> int:
    try:
        return len(_finished_ids(exp))
    except (OSError, ValueError):
        return 0


def _duplicates(exp: Experiment) -> int:
    """Rows whose (trial_id, cert_id, idx) appears more than once across every results file."""
    import pyarrow.dataset as pads

    files = [f for f in exp.stage_files("certify") if f.kind in ("shard", "compacted")]
    done = {f.model for f in files if f.kind == "compacted"}
    live = [f.path for f in files if f.kind == "compacted" or f.model not in done]
    keys = pads.dataset(live, schema=SCHEMA).to_table(columns=["trial_id", "cert_id", "idx"])
    frame = keys.to_pandas()
    return int(frame.duplicated().sum())


def replicate(exp: Experiment, copies: int) -> int:
    """The experiment's compacted results under `copies` certification settings in all: copy k
    is certified with n0 + k (a setting of its own, which the reader accepts: the rows' n0
    is the one their cert_id names). Returns the models the reader now reads."""
    import pyarrow.parquet as pq

    from sweeper.results.attested_rows import signed
    from sweeper.results.certify_rows import load_results
    from sweeper.results.reader import refresh_cache
    from sweeper.results.stage_table import write_table
    from sweeper.results.sweep_file import record_settings
    from trainables.attestations import trained_checkpoint
    from trainables.kernel.attestation import load_signing_key

    key, settings = load_signing_key(), set()
    for f in [f for f in exp.stage_files("certify") if f.kind == "compacted"]:
        table = pq.read_table(f.path)
        n0 = int(table.column("n0")[0].as_py())
        for k in range(1, copies):
            sid = f.setting_id.replace(f"_n0-{n0}_", f"_n0-{n0 + k}_", 1)
            copy = _with(_with(table, "cert_id", sid), "n0", n0 + k)
            if key is not None:  # signed as the compaction of that setting would sign it
                made = {"trial_id": f.trial_id, "setting_id": sid, "stage": "certify"}
                inputs = {"checkpoint.pt": trained_checkpoint(exp.trial_dir(f.trial_id), key)}
                copy = signed(copy, key, "compact", inputs, {**made, "shards": f.count})
            write_table(copy, exp.compacted_path("certify", f.trial_id, sid, f.count or 0))
            settings.add(sid)
    record_settings(exp, sorted(settings))  # declared, as `sweeper certify` declares its own
    refresh_cache(exp, STANDIN)
    results = load_results(exp, ["trial_id", "cert_id"])
    if results.invalid:  # the reads timed below would not be of 10x the models
        raise RuntimeError(f"the reader refuses the copies: {results.invalid[0]}")
    return len(results.frame.groupby(["trial_id", "cert_id"]))


def _with(table: pa.Table, name: str, value: object) -> pa.Table:
    """`table` with every value of column `name` set to `value` (of the column's type)."""
    i = table.schema.get_field_index(name)
    column = pa.array([value] * table.num_rows, table.schema.field(i).type)
    return table.set_column(i, table.schema.field(i), column)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="32 trials, no 10x step")
    parser.add_argument("--trials", type=int, default=644)
    parser.add_argument("--drive", help=argparse.SUPPRESS)
    parser.add_argument("--storage", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--search", action="store_true", help="also a sweep under --search envelope, timed"
    )
    parser.add_argument(
        "--attested",
        action="store_true",
        help="sign as a keyed sweep does (a key made for the run), reads check attestations, "
        "and `sweeper verify` is timed",
    )
    args = parser.parse_args(argv)
    if args.drive:
        drive(args.storage, args.drive, args.trials, args.bare, args.out, args.search)
        return 0
    trials = 32 if args.smoke else args.trials
    if args.attested:
        _with_a_key()
    return run(trials, not args.smoke, args.search)


def _with_a_key() -> None:
    """A key for this run, in the environment of the harness (its reads, `verify`) and of
    the drivers it starts (which hand it to their workers); what reads remember, in a
    temporary cache."""
    from trainables.kernel.attestation import KEY_ENV, SigningKey

    os.environ[KEY_ENV] = SigningKey.generate().pem().decode()
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="sweep-scale-cache-")


def time_verify(exp: Experiment) -> str:
    """`sweeper verify`'s work on the experiment, with the run's key (--attested)."""
    from sweeper.results.verification import public_key_from, verify_experiment

    start = time.perf_counter()
    checked = verify_experiment(exp, public_key_from(None))
    seconds = time.perf_counter() - start
    return (
        f"verify {seconds:.2f} s ({len(checked.attested)} files attested, "
        f"{len(checked.unattested)} unattested, {len(checked.failed)} failed)"
    )


def searched_line(storage: str, trials: int, bare: float) -> None:
    """The same plan under the envelope search (its own experiment): per trial it trained,
    the sweep's wall time against bare Tune's per trial, over all the plan's trials and over
    as many as the search trained (a Tune run's fixed cost, spread over fewer trials, is
    Tune's, not the control plane's: a fresh driver, as the plain sweep's bare Tune)."""
    out = os.path.join(storage, "search.json")
    subprocess.run(_driver(storage, "cifar10-search", trials, False, out, True), check=True)
    driven = json.loads(Path(out).read_text())
    trained = max(driven["trained"], 1)
    same = os.path.join(storage, "bare-same.json")
    subprocess.run(_driver(storage, BARE_ONLY, trained, True, same), check=True)
    bare_same = json.loads(Path(same).read_text())["bare_s"] / trained
    deciding = driven.get("deciding") or {"calls": 0, "cpu_s": 0.0}
    proposals = max(driven.get("proposals", 0), 1)
    per = driven["sweep_s"] / trained
    print(
        f"search: {driven['trained']} of {trials} trials trained, sweep {driven['sweep_s']:.1f} s, "
        f"overhead {per:.3f} s/trial trained (bare Tune {bare:.3f} s; over {trained} trials "
        f"{bare_same:.3f} s, {per - bare_same:.3f} s above it), "
        f"failures {driven['failures']}; the searcher's CPU {deciding['cpu_s']:.1f} s in "
        f"{deciding['calls']} calls, {deciding['cpu_s'] / proposals:.3f} s per proposal; "
        f"{_latency(driven.get('curve_wait'))}; Tune's rounds {driven.get('rounds')}; "
        f"{_cpu_line(driven, trained)}"
    )


def _latency(wait: dict | None) -> str:
    """The mean seconds from a trial's end to its curve in the search (`curve_wait`)."""
    if not wait or not wait.get("curves"):
        return "no curve latency recorded"
    return f"a curve {wait['seconds'] / wait['curves']:.2f} s after its trial (mean)"


def run(trials: int, tenfold: bool, search: bool = False) -> int:
    from sweeper.results.envelope import parse_radii

    radii = parse_radii("0:2.25:0.25")
    with tempfile.TemporaryDirectory(prefix="sweep-scale-") as storage:
        out = os.path.join(storage, "sweep.json")
        subprocess.run(_driver(storage, "cifar10", trials, True, out), check=True)
        driven = json.loads(Path(out).read_text())
        exp = Experiment(storage, "cifar10")
        time_reads(exp, radii)  # imports and caches warm
        reads = time_reads(exp, radii)
        rows = trials * 500
        print(
            f"{trials} trials: sweep {driven['sweep_s']:.1f} s, bare Tune {driven['bare_s']:.1f} s, "
            f"failures {driven['failures']}; {_cpu_line(driven, trials)}; reads "
            + ", ".join(f"{k} {v:.3f} s" for k, v in reads.items())
        )
        if os.environ.get("SWEEPER_SIGNING_KEY"):
            print(f"attested: {time_verify(exp)}", flush=True)
        if tenfold:
            models = replicate(exp, 10)
            assert models == trials * 10, (
                f"{models} models read after replicating, not {trials * 10}"
            )
            # The first read after replicating checks the new files (as after a sweep); the
            # second is the warm read the 1x figures are.
            for when in ("first", "warm"):
                ten = time_reads(exp, radii)
                print(
                    f"10x ({trials * 10} models, {rows * 10:,} rows), {when} read: "
                    + ", ".join(f"{k} {v:.3f} s ({v / reads[k]:.1f}x)" for k, v in ten.items())
                )
        retrained, dups = kill_and_resume(storage, trials)
        if search:
            searched_line(storage, trials, driven["bare_s"] / trials)
    per, bare = driven["sweep_s"] / trials, driven["bare_s"] / trials
    print(
        f"scale: {trials} trials, {trials * 10} shards, {rows} rows; overhead {per:.3f} s/trial "
        f"(bare Tune {bare:.3f} s); driver RSS {driven['rss_gib']:.2f} GiB; "
        f"envelope {reads['envelope']:.2f} s; status {reads['status']:.2f} s; "
        f"report {reads['report']:.2f} s; resume after kill: {retrained} retrained, "
        f"{dups} duplicate rows"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
