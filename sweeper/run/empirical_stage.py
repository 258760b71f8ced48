"""Empirical robustness as Ray tasks (SmoothAdv, Salman et al. 2019, section 4.2).

Each finished model is attacked with SmoothAdv-PGD at every (ε, m_test) of the space's
`empirical` block, and each attacked input is classified with PREDICT. It is a stage of the
sharded-stage engine (`sweeper.run.shards`), like certification: one task per (model, setting,
shard) loads the checkpoint once and attacks its points; the engine writes

    <experiment>/empirical/<trial_id>/<emp_id>/shard-00003-of-00010.parquet

(compacted once complete), where `emp_id` names the setting, so new settings add files and
existing shards are skipped. The settings are `trainables.kernel.stage_settings`'s
(`EmpiricalSpec`, resolved here into `EmpiricalSetting`s), the loop over a shard's points is
`trainables.empirical_points`, and the rows, their checks and reading them (the envelope overlay)
are `sweeper.results.empirical_rows`. This module is the stage's driver side: torch and Ray are
imported only by the functions that run attacks.
"""

from __future__ import annotations

import platform
from collections.abc import Callable

import pyarrow as pa

from sweeper.plan.spec import Resources
from sweeper.results.empirical_rows import EMPIRICAL_ROWS, EMPIRICAL_SCHEMA
from sweeper.results.stage_table import trial_parts
from sweeper.results.storage import Experiment
from sweeper.run.outcome import Outcome
from sweeper.run.retries import Budget, budget_tasks
from sweeper.run.shards import StageRunner, Work
from sweeper.run.stage import Shard, Stage
from trainables.kernel.config import TrialConfig
from trainables.kernel.stage_settings import CertifySpec, EmpiricalSetting, EmpiricalSpec


def settings(spec: EmpiricalSpec, certify: CertifySpec) -> list[EmpiricalSetting]:
    """Every (ε, m_test) of `spec`, ε ascending (ε = 0 once, unattacked); fields left null
    follow `certify`. `spec` must be valid (`spec.problems()` empty)."""

    def pick(name: str):
        value = getattr(spec, name)
        return getattr(certify, name) if value is None else value

    mp = pick("max_points")
    common = {
        "n": pick("n"),
        "alpha": pick("alpha"),
        "skip": pick("skip"),
        "max_points": None if mp == "all" else mp,
        "shard_size": pick("shard_size"),
        "batch_size": pick("batch_size"),
    }
    out: dict[str, EmpiricalSetting] = {}
    for eps in sorted(float(e) for e in spec.epsilons):
        for m in sorted(spec.m_test) if eps > 0 else [None]:
            attack = (m, spec.steps, spec.estimator) if eps > 0 else (None, None, None)
            s = EmpiricalSetting(eps, *attack, **common)
            out.setdefault(s.emp_id, s)
    return list(out.values())


def attack_shard(exp: Experiment, shard: Shard, setting: EmpiricalSetting, cpus: float) -> pa.Table:
    """Attack and PREDICT one shard's points (on a worker): its rows. Smoothing σ = the
    model's training σ; the noise comes from a generator seeded by (trial_id, emp_id, shard),
    so a rerun draws the same."""
    import torch

    from trainables import checkpoint
    from trainables.attestations import verify_checkpoint
    from trainables.certify_points import seed_for
    from trainables.datasets import load_dataset
    from trainables.empirical_points import empirical_points
    from trainables.kernel.catalog import NUM_CLASSES

    torch.set_num_threads(max(1, int(cpus)))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, cfg = checkpoint.load_model(exp.checkpoint(shard.trial_id), device, verify_checkpoint)
    dataset = load_dataset(cfg.dataset, "test", cfg.data_dir)
    generator = torch.Generator(device=device).manual_seed(
        seed_for(shard.trial_id, shard.setting_id, shard.index)
    )
    cols = empirical_points(
        model,
        dataset,
        shard.indices,
        setting,
        cfg.sigma,
        NUM_CLASSES[cfg.dataset],
        generator,
        device,
    )
    metadata = {
        "empirical_backend": (
            f"sweeper.empirical torch-{torch.__version__} {device.type} {platform.node()}"
        ),
        "normalization": type(model[0]).__name__,
        "shard": f"{shard.index}/{shard.count}",
    }
    return empirical_table(cfg, exp.name, setting, cols, metadata)


def empirical_table(
    cfg: TrialConfig,
    experiment: str,
    setting: EmpiricalSetting,
    columns: dict[str, list],
    metadata: dict,
) -> pa.Table:
    """A shard's rows: the trial's identity and the setting repeated per row, then `columns`;
    `metadata` and the trial's config in the file's footer."""
    import json

    rows = len(columns["idx"])
    identity, config = trial_parts(cfg)
    constants = {
        "trial_id": cfg.trial_id,
        "experiment": experiment,
        "emp_id": setting.emp_id,
        **identity,
        "epsilon_attack": setting.epsilon,
        "m_test": setting.m_test,
        "steps_attack": setting.steps,
        "estimator": setting.estimator,
        "n": setting.n,
        "alpha": setting.alpha,
    }
    data = {**{k: [v] * rows for k, v in constants.items()}, **columns}
    table = pa.Table.from_pydict(
        {f.name: data[f.name] for f in EMPIRICAL_SCHEMA}, schema=EMPIRICAL_SCHEMA
    )
    footer = {"config": config, **metadata}  # metadata may name another (tests plant one)
    meta = {f"sweeper.{k}": v if isinstance(v, str) else json.dumps(v) for k, v in footer.items()}
    return table.replace_schema_metadata(meta)


EMPIRICAL = Stage.of(EMPIRICAL_ROWS, attack_shard)


def run_empirical(
    exp: Experiment,
    trials: list[TrialConfig],
    settings_: list[EmpiricalSetting],
    resources: Resources,
    on_event: Callable,
    budget: Budget | None = None,
) -> Outcome:
    """Attack every finished trial in `trials` under every setting; Ray must be initialized.
    Ctrl-C cancels the tasks in flight (finished shards are kept) and returns interrupted.
    `budget`: the tasks' retries (`retries.task_budget`; None: the defaults)."""
    runner = StageRunner(exp, [Work(EMPIRICAL, s) for s in settings_], resources, on_event)
    runner.expect(trials)  # progress counts of every shard planned from the first event
    budget_tasks(runner, budget)
    try:
        for cfg in trials:
            runner.submit(cfg)
        runner.wait()
    except KeyboardInterrupt:
        runner.cancel()
        return Outcome(failures=runner.failure_rows(), interrupted=True)
    runner.finish()
    return Outcome(failures=runner.failure_rows())
