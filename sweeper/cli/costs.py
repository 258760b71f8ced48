"""What a sweep will cost: the dry run's estimate, and `sweeper bench`, which measures this
machine's throughput for it. Importing this module imports neither torch nor Ray: the dry
run needs neither (Ray only to ask a cluster given with --address for its size)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from sweeper.api.pricing import (
    SEARCH_SHARE,
    CertifyPreview,
    PricedPlan,
    cost_groups,
    devices,
    record_throughput,
)
from sweeper.cli.common import app, console, fail
from sweeper.cli.display import echo
from trainables.kernel.catalog import ARCHS

if TYPE_CHECKING:
    from sweeper.plan.cost import Devices, SearchCost, SweepCost


def dry_run_report(
    priced: PricedPlan, address: str | None, gpus: int | None, data_dir: str | None = None
) -> None:
    """After the plan of a dry run: the data a real run needs (found in `data_dir`, checked
    as a real run would, when given), and what the sweep will cost."""
    dry_run_data(priced, data_dir)
    if priced.cost is None:
        return
    device = "GPU" if priced.kind == "gpu" else "core"
    _print_figures(priced)
    _print_groups(priced.cost, device)
    _print_totals(priced.cost, device)
    _print_strategies(priced, device)
    if priced.search is not None:
        _print_search(priced.search, device)
    if priced.kind == "cpu" and gpus is not None:
        console.print("(--gpus does not apply: the trials ask for no GPU)")
        gpus = None
    capacity = devices(priced.kind, address, gpus)
    if capacity is None:
        console.print("wall-clock: pass --gpus N (or --address of a cluster) for an estimate")
        return
    _print_wall_clock(priced, capacity)


def dry_run_data(priced: PricedPlan, data_dir: str | None) -> None:
    """The data a real run needs: checked in `data_dir` (as a real run would) when given."""
    if priced.data or priced.pseudo:
        what = " and ".join(
            filter(
                None,
                [", ".join(priced.data), "the pseudo-labelled data" if priced.pseudo else None],
            )
        )
        if data_dir is not None:
            console.print(f"data: {what} checked in {data_dir}, as a real run reads them")
        else:
            console.print(
                f"data: not read on a dry run; a real run needs {what}"
                + (" (--data-dir DIR, or --download)" if priced.data else "")
            )


def certify_dry_run_report(preview: CertifyPreview, data_dir: str | None) -> None:
    """`sweeper certify --dry-run`: how far the finished models are certified under the
    settings, and the device-hours left (with the figures that price them)."""
    priced, plan = preview.priced, preview.plan
    unfinished = len(plan.trials) - len(preview.ready)
    begun = sum(w for w, _ in preview.partly.values()), sum(p for _, p in preview.partly.values())
    table = Table(title="sweeper certify (dry run)", show_header=False, box=None)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")  # a long id or path folds, never cut
    envelope = plan.spec.certify.strategy == "envelope"
    shards = f" ({begun[0]} of {begun[1]} shards written)" if preview.partly else ""
    table.add_row(
        "models",
        f"{len(preview.ready)} finished trials: {len(preview.done)} "
        f"{'certified or pruned' if envelope else 'certified'}, {len(preview.partly)} "
        f"begun{shards}, {preview.to_start} {'not settled' if envelope else 'not begun'}"
        + (f"; {unfinished} not finished (not certified by this command)" if unfinished else ""),
    )
    table.add_row("settings", ", ".join(preview.settings))
    table.add_row("storage", plan.exp.root)
    console.print(table, markup=False, highlight=False)
    if preview.final is not None:  # the final step (`--final`), priced
        for line in preview.final.lines("GPU" if priced.kind == "gpu" else "core"):
            console.print(line, highlight=False)
    if not priced.trials:
        final_left = preview.final is not None and preview.final.chosen.todo
        said = "the selection is done" if final_left else "nothing to do"
        console.print(f"{said}: every finished model is certified with these settings")
        return
    dry_run_data(priced, data_dir)
    device = "GPU" if priced.kind == "gpu" else "core"
    _print_figures(priced)
    assert priced.cost is not None
    fewest, most = priced.cost.forwards_per_model()
    forwards = _power(most) if fewest == most else f"{_power(fewest)} to {_power(most)}"
    console.print(
        f"certification left ≈ {_amount(preview.left_hours, device)} on the device above, "
        f"for {len(priced.trials)} models ({forwards} forwards per model; a begun model only "
        "its missing shards)",
        highlight=False,
    )
    _print_strategies(priced, device, "the same models from scratch, by strategy")


def _print_figures(priced: PricedPlan) -> None:
    """The figures that priced each architecture, with where they came from; measured figures
    that cannot be trusted are named in one warning line (the shipped table priced instead)."""
    path = priced.figures_file
    if priced.figures_problem:
        echo(
            f"warning: ignoring the measured figures in {path} ({priced.figures_problem}): "
            "using the shipped table; re-run `sweeper bench` to measure again",
            err=True,
        )
    for arch, (fig, device) in priced.figures.items():
        smoke = " --smoke, tiny batches: not representative" if device.smoke else ""
        console.print(
            f"figures: {arch} on {device.name} ({device.origin}{smoke}): forward "
            f"{fig.forward:,.0f}/s, training step {fig.train:,.0f}/s; {fig.source}",
            highlight=False,
            markup=False,
        )
    if priced.kind not in priced.measured_kinds:
        console.print(f"(measure your own device with `sweeper bench`; stored in {path})")


def _amount(h: float, device: str) -> str:
    """Device time with its unit: 15,238 GPU-h, 42.0 GPU-min, 6.5 core-s."""
    if h >= 1:
        return f"{h:,.{2 if h < 10 else 1 if h < 100 else 0}f} {device}-h"
    return f"{h * 60:.1f} {device}-min" if h * 60 >= 1 else f"{h * 3600:.1f} {device}-s"


def _duration(h: float) -> str:
    if h >= 48:
        return f"{h / 24:,.1f} days"
    return f"{h:,.1f} hours" if h >= 1 else f"{max(1.0, h * 60):.0f} min"


def _power(x: float) -> str:
    """5.0·10^7"""
    exponent = len(str(int(x))) - 1 if x >= 1 else 0
    return f"{x / 10**exponent:.1f}·10^{exponent}"


GROUP_COLUMNS = ("trials like", "trials", "passes", "train", "certify", "total")


def _print_groups(sweep: SweepCost, device: str) -> None:
    """One row per group of alike trials: their label without the words every label shares
    (those go in the title), how many, their passes, each one's training and certification,
    and the row's total. At 80 columns the numbers fit whole beside a label of 18 letters."""
    found = cost_groups(sweep)
    labels, common = _distinct_words([g.label for g in found])
    every = f"; every trial: {common}" if common else ""
    table = Table(
        title=f"cost on the device above: train and certify per trial, total per row{every}",
        title_justify="left",
    )
    for name in GROUP_COLUMNS:
        # Numbers never cut: only the group's label wraps (fold, never an ellipsis).
        left = name == GROUP_COLUMNS[0]
        table.add_column(
            name, justify="left" if left else "right", no_wrap=not left, overflow="fold"
        )
    for g, label in zip(found, labels, strict=True):
        per = (g.train_hours / g.trials, g.certify_hours / g.trials)
        table.add_row(
            label,
            str(g.trials),
            str(g.passes),
            _amount(per[0], device),
            _amount(per[1], device),
            _amount(g.train_hours + g.certify_hours, device),
        )
    console.print(table)
    console.print(
        "passes: forward+backward passes per training input and epoch (after the ε "
        "warm-up); certification: n0 + n forwards per certified point",
        highlight=False,
    )


def _distinct_words(labels: list[str]) -> tuple[list[str], str]:
    """(each label without the words all of them share, those words in the order of the
    first): `cifar10 cifar_resnet110 smoothadv T=2 m=1 150 ep` -> `smoothadv T=2 m=1`."""
    if len(labels) < 2:
        return labels, ""
    shared = set.intersection(*(set(label.split()) for label in labels))
    kept = [" ".join(w for w in label.split() if w not in shared) or label for label in labels]
    return kept, " ".join(w for w in labels[0].split() if w in shared)


def _print_totals(sweep: SweepCost, device: str) -> None:
    fewest, most = sweep.forwards_per_model()
    forwards = _power(most) if fewest == most else f"{_power(fewest)} to {_power(most)}"
    low, median, high = (_amount(h, device) for h in sweep.spread())
    console.print(
        f"training ≈ {_amount(sweep.train_hours, device)}, certification ≈ "
        f"{_amount(sweep.certify_hours, device)} ({forwards} forwards per model), total ≈ "
        f"{_amount(sweep.hours, device)} for {len(sweep.costs)} trials "
        f"(per trial: min {low}, median {median}, max {high})",
        highlight=False,
    )


def _print_strategies(
    priced: PricedPlan, device: str, what: str = "certification by strategy"
) -> None:
    """Both strategies' cost, and where the envelope strategy's pilots cannot prune."""
    hours, seen = priced.strategies, priced.outlook
    if not hours or seen is None:
        return
    shares = ", ".join(f"{seen.shares[s]:.0%} at σ = {s:g}" for s in sorted(seen.shares))
    console.print(
        f"{what}: full ≈ {_amount(hours['full'], device)}, envelope ≈ "
        f"{_amount(hours['envelope'], device)} (an estimate: the selection and first pilot on "
        f"every model, the rest on the models expected to be certified fully: {shares})",
        highlight=False,
    )
    if cannot := seen.cannot_prune:
        sigmas = ", ".join(f"{s:g}" for s in cannot)
        console.print(
            f"warning: at n = {seen.n:,} the envelope strategy's pilots cannot prune at "
            f"σ = {sigmas} (a pilot's bound overstates a point's radius by a grid step or "
            "more): no saving there, its pilots cost extra; a larger n (the papers' 100,000) "
            "lets them prune",
            highlight=False,
        )


def _print_search(cost: SearchCost, device: str) -> None:
    """The envelope search's expected cost beside the grid's, and the budget's effect."""
    train, certify = cost.search
    full = sum(cost.full)
    console.print(
        f"envelope search: expected ≈ {_amount(train + certify, device)} (training "
        f"{_amount(train, device)}, certification {_amount(certify, device)}) of the grid's "
        f"{_amount(full, device)}: {SEARCH_SHARE:.0%} of it, the median where the replay of the "
        "published SmoothAdv logs stopped, and the audit; no guarantee, the landscape decides",
        highlight=False,
    )
    if cost.budget is not None:
        effect = "caps it" if cost.capped else "is above the expected cost"
        console.print(
            f"--budget {_amount(cost.budget, device)} {effect} (training stops before a "
            "model would pass it; the audit comes after)",
            highlight=False,
        )


def _print_wall_clock(priced: PricedPlan, capacity: Devices) -> None:
    resources, kind = priced.resources, priced.kind
    wall = priced.wall_clock(capacity)
    if wall is None:
        need = f"cpu={resources.cpu:g}" + (f", gpu={resources.gpu:g}" if kind == "gpu" else "")
        console.print(
            f"wall-clock: {capacity.where} cannot host one trial ({need}); "
            "pass --gpus N for an estimate"
        )
        return
    if kind == "gpu":
        packing = (
            f"{1 / resources.gpu:g} trials per GPU"
            if resources.gpu < 1
            else f"{resources.gpu:g} GPUs per trial"
        )
        how = (
            f"at {packing} ({wall.at_once} at once on {wall.devices:g} GPUs), assuming packed "
            "trials share a GPU's throughput"
        )
    else:
        how = (
            f"{wall.at_once} trials at once on {resources.cpu:g} core(s) each, assuming "
            "throughput grows with the cores"
        )
    console.print(
        f"wall-clock ≈ {_duration(wall.hours)} on {capacity.where}, {how}", highlight=False
    )


@app.command()
def bench(
    arch: Annotated[
        list[str] | None,
        typer.Option(
            "--arch",
            help="Architecture(s) to measure, repeated or comma-separated "
            f"(default: all of {', '.join(ARCHS)}).",
        ),
    ] = None,
    smoke: Annotated[
        bool,
        typer.Option(
            "--smoke", help="Tiny batches and one timed run: seconds, not representative."
        ),
    ] = False,
    repeats: Annotated[
        int, typer.Option("--repeats", min=1, help="Timed runs per figure (the best is kept).")
    ] = 3,
) -> None:
    """Measure forward and training-step samples/s of each architecture on this machine (CUDA
    if available, else one CPU core) and store them for dry runs ($SWEEPER_THROUGHPUT, else
    ~/.cache/sweeper/throughput.json); `sweeper run grid SPACE --dry-run` prices with them."""
    archs = [a.strip() for item in arch or [",".join(ARCHS)] for a in item.split(",") if a.strip()]
    unknown = [a for a in archs if a not in ARCHS]
    if unknown:
        fail([f"--arch: unknown architecture {a!r} (valid: {', '.join(ARCHS)})" for a in unknown])
    name, kind, rates = _measure(list(dict.fromkeys(archs)), smoke, repeats)
    path = record_throughput(name, kind, rates, smoke)
    console.print(
        f"figures written to {path}: dry runs of sweeps on "
        f"{'GPUs' if kind == 'gpu' else 'CPUs'} price with them"
    )


def _measure(archs: list[str], smoke: bool, repeats: int) -> tuple[str, str, dict]:
    """(device name, kind, arch -> rates and batches), measured on the GPU, else one core."""
    import torch

    from trainables.bench import device_name, measure

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)  # figures per core, as the dry run prices CPU trials
    name = device_name(device)
    table = Table(
        "arch",
        "forward samples/s",
        "train samples/s",
        "batches (train, forward)",
        title=f"sweeper bench on {name}",
    )
    rates = {}
    for a in archs:
        m = measure(a, device, smoke, repeats)
        rates[a] = (m.forward, m.train, m.forward_batch, m.train_batch)
        table.add_row(
            a, f"{m.forward:,.0f}", f"{m.train:,.0f}", f"{m.train_batch}, {m.forward_batch}"
        )
    console.print(table)
    return name, "gpu" if device.type == "cuda" else "cpu", rates
