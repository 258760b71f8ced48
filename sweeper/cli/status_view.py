"""How `sweeper status` (and the progress display of `run grid`, `certify`, `empirical`) shows
where a sweep stands: the summary lines, then only the trials that need attention (every
trial with `--all`), as rich renderables, plain text or JSON."""

from __future__ import annotations

import dataclasses
import textwrap

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from sweeper.api.surface import ATTENTION, Status, Summary, TrialRow
from sweeper.cli.display import screen_width, terminal_width

ATTENTION_ROWS = 20  # trials listed under the summary (the rest: `--all`): fits 40 lines


def duration(seconds: float | None) -> str:
    """`45 s`, `12 min`, `3 h 05 min`, `2 d 04 h`; `-` when not known."""
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600:02d} h"


def _n(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _share(done: int, total: int | None) -> str:
    if not total:
        return f"{done:,} done (total not known)"
    return f"{done:,} of {total:,} ({100 * done / total:.1f} %)"


def _ends(what: str, eta: float | None, running: bool) -> str:
    if eta == 0:
        return f"{what} done"
    if eta is None:
        return f"{what}: no ETA " + (
            "yet (nothing finished in the window)" if running else "(not running)"
        )
    return f"{what} ends in ≈ {duration(eta)}"


def _h(hours: float | None) -> str:
    """Hours to a useful precision: 1,234 / 12.3 / 0.04 / < 0.01."""
    if hours is None:
        return "-"
    if hours < 0.01:
        return "< 0.01"
    return f"{hours:,.0f}" if hours >= 100 else f"{hours:.1f}" if hours >= 1 else f"{hours:.2f}"


def _hours(pair: tuple[float | None, float | None], unit: str) -> str:
    spent, projected = pair
    if spent is None:
        return "not measured yet"
    of = _h(projected)
    return f"{_h(spent)} {unit}-h spent of {of if of.startswith('<') else '≈ ' + of} projected"


def summary_lines(s: Summary, st: Status | None = None) -> list[str]:
    """The summary as plain lines (the same text on a terminal, in a log file and in tests);
    of a slice (`st.sweep_trials`: the run of an `--only`) it says so: `slice 8 of 34 trials`."""
    states = ", ".join(f"{k} {v:,}" for k, v in s.states.items() if v)
    trials = (
        f"slice {s.trials:,} of {st.sweep_trials:,} trials (--only {st.only})"
        if st is not None and st.sweep_trials is not None
        else f"{s.trials:,} trials"
    )
    lines = [f"{s.experiment}: {trials}: {states or 'none'}"]
    unfinished = sum(s.states.get(k, 0) for k in ("pending", "interrupted", "trained"))
    if s.driver is None:
        lines.append(
            "driver: none, nothing is running"
            + (
                f" ({unfinished:,} trials unfinished: re-run the sweep's command to resume)"
                if unfinished
                else ""
            )
        )
    else:
        lines.append(f"driver: {s.driver}, running for {duration(s.elapsed_s)}")
    rate = ""
    if s.window_s is not None:
        rate = f"; {_n(s.epochs_per_hour)} epochs/h over the last {duration(s.window_s)}"
    lines.append(
        f"epochs: {_share(*s.epochs)}{rate}; "
        f"{_ends('training', s.eta_train_s, s.driver is not None)}"
    )
    for stage, (done, total) in s.shards.items():
        line = f"{stage} shards: {_share(done, total)}"
        if stage == "certify":
            line += f"; rows {_share(*s.rows)}"
            if s.window_s is not None:
                line += f"; {_n(s.points_per_hour)} points/h"
            line += f"; {_ends('certification', s.eta_certify_s, s.driver is not None)}"
        lines.append(line)
    lines.append(
        f"training: {_hours(s.train_hours, s.unit)}; certification: "
        f"{_hours(s.certify_hours, s.unit)}"
    )
    extra = f"; {s.extra_models} more certified models (imported)" if s.extra_models else ""
    lines.append(f"storage: {s.size_bytes / 1e6:,.1f} MB{extra}")
    return lines


def needing_attention(st: Status) -> list[TrialRow]:
    """Failed, blocked and interrupted trials first, then what is running, then the rest."""
    order = {state: i for i, state in enumerate(ATTENTION)}
    return sorted((t for t in st.trials if t.state in order), key=lambda t: order[t.state])


def trial_cells(t: TrialRow) -> list[str]:
    certify = t.shards["certify"]
    shards = (
        "-"
        if certify.total is None and not certify.done
        else (f"{certify.done}/{certify.total if certify.total is not None else '?'}")
    )
    return [t.trial_id, t.summary, t.state, f"{t.epoch}/{t.epochs}", shards, t.error]


HEADER = ["trial_id", "trial", "state", "epoch", "shards", "error"]  # shards: certification's
PRIORITY = ["trial_id", "trial", "state", "shards", "epoch", "error"]  # kept while they fit
GAP = 2  # spaces between two columns


def column_widths(rows: list[TrialRow]) -> dict[str, int]:
    """Each column's width, its widest cell (the error column only when a row has an error)."""
    cells = [trial_cells(t) for t in rows]
    widths = {h: max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(HEADER)}
    if not any(t.error for t in rows):
        del widths["error"]
    return widths


def line_width(widths: dict[str, int], columns: list[str]) -> int:
    return sum(widths[c] for c in columns) + GAP * (len(columns) - 1)


def fitting_columns(widths: dict[str, int], width: int) -> list[str]:
    """The columns whose whole cells fit `width` on one line, by PRIORITY, in HEADER's order."""
    chosen: list[str] = []
    for h in PRIORITY:
        if h in widths and (not chosen or line_width(widths, [*chosen, h]) <= width):
            chosen.append(h)
    return [h for h in HEADER if h in chosen]


def trials_table(rows: list[TrialRow], title: str, width: int | None = None) -> Group:
    """The trials, a line each at `width` (the terminal's): the columns that fit whole, by
    priority; the errors that do not fit in the table listed under it, each under its trial."""
    width = width or terminal_width()
    widths = column_widths(rows)
    shown = fitting_columns(widths, width)
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, GAP - 1, 0, 0),
        title=title,
        title_justify="left",
    )
    for h in shown:  # a narrower terminal than the first columns need: the trial's text wraps
        table.add_column(h, no_wrap=h != "trial", overflow="fold")
    for t in rows:
        cells = dict(zip(HEADER, trial_cells(t), strict=True))
        table.add_row(*(cells[h] for h in shown))
    parts: list = [table]
    left = [h for h in HEADER[:-1] if h not in shown]
    if left:
        whole = line_width(widths, HEADER[:-1])
        parts.append(
            Text(f"left out to fit {width} columns: {', '.join(left)} (shown at {whole} columns)")
        )
    if "error" not in shown and any(t.error for t in rows):
        parts += [Text(line) for line in error_lines(rows, width)]
    return Group(*parts)


def error_lines(rows: list[TrialRow], width: int) -> list[str]:
    """`errors:` then each trial's error under its trial_id, wrapped at `width`."""
    out = ["errors:"]
    for t in rows:
        if t.error:
            lead = f"  {t.trial_id}  "
            out += textwrap.wrap(
                t.error,
                max(width, len(lead) + 20),
                initial_indent=lead,
                subsequent_indent=" " * len(lead),
                break_on_hyphens=False,
            )
    return out


def shown_trials(
    st: Status, everything: bool, limit: int = ATTENTION_ROWS
) -> tuple[list[TrialRow], int]:
    """(the trials to list, how many more need attention than are listed)."""
    if everything:
        return st.trials, 0
    rows = needing_attention(st)
    return rows[:limit], max(0, len(rows) - limit)


def hints(st: Status, space: str | None) -> list[str]:
    """What to do next: where the failures' full text is, how to retrain a broken trial."""
    out = []
    if st.failures_log and any(t.state == "failed" for t in st.trials):
        out.append(f"full error texts: {st.failures_log}")
    broken = [
        t.trial_id for t in st.trials if t.state == "failed" and t.error.startswith("certify")
    ]
    if broken:
        out.append(
            "a trial whose checkpoint cannot be read is retrained alone (its old checkpoint "
            f"moved aside): sweeper run grid {space or 'SPACE'} --only trial_id={broken[0]} "
            "--retrain"
        )
    return out


def view(
    st: Status,
    summary: Summary,
    everything: bool = False,
    space: str | None = None,
    width: int | None = None,
) -> Group:
    """The whole screen: summary, the trials, the hints. At `width` (else $COLUMNS or the
    terminal's) a longer line wraps at its words; the table fits it (80 when piped)."""
    wrap = width or screen_width()
    lines = summary_lines(summary, st)
    rows, more = shown_trials(st, everything)
    after = [f"… and {more} more that need attention: sweeper status --all"] if more else []
    after += envelope_lines(st, everything)
    after += st.search.lines() if st.search else []
    after += hints(st, space)
    if st.left_out:
        what = f"{len(st.left_out)} files that fail validation"
        after += [f"left out of every result ({what}):", *(f"  {x}" for x in st.left_out)]
    title = "trials" if everything else "trials that need attention"
    table = [trials_table(rows, title, width or terminal_width())] if rows else []
    return Group(*_texts(lines, wrap), *table, *_texts(after, wrap))


def _texts(lines: list[str], width: int | None) -> list[Text]:
    """Each line as Text, wrapped at `width` (None: whole) under a two-space indent."""
    out = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        wrapped = width and textwrap.wrap(
            line,
            width,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        out += [Text(x) for x in wrapped or [line]]
    return out


def envelope_lines(st: Status, everything: bool = False, bounds: int = 3) -> list[str]:
    """Per envelope setting: models certified and pruned, then each pruned model (at most
    ATTENTION_ROWS unless `everything`) with its first upper bounds on certified accuracy."""
    out = []
    for s in st.envelope or []:
        unfinished = f", {s['unfinished']} unfinished" if s["unfinished"] else ""
        out.append(
            f"envelope strategy (δ = {s['delta']:g}): {s['certified']} models certified, "
            f"{s['pruned']} pruned{unfinished}"
        )
        shown = s["pruned_models"] if everything else s["pruned_models"][:ATTENTION_ROWS]
        for m in shown:
            pairs = [(r, u) for r, u in zip(s["radii"], m["upper"], strict=True) if u]
            text = ", ".join(f"r={r:g} ≤{u:.3f}" for r, u in pairs[:bounds]) or "≤0 everywhere"
            more = " …" if len(pairs) > bounds else ""
            out.append(f"  pruned {m['trial_id']}: {text}{more}")
        if len(shown) < len(s["pruned_models"]):
            out.append(f"  … and {len(s['pruned_models']) - len(shown)} more: --all")
    return out


def trial_json(t: TrialRow) -> dict:
    """One trial as numbers: its epochs and each stage's shards done and planned (null: not
    known), never the table's `1/1` strings."""
    shards = {stage: {"done": s.done, "total": s.total} for stage, s in t.shards.items()}
    return {
        "trial_id": t.trial_id,
        "trial": t.summary,
        "state": t.state,
        "epoch": t.epoch,
        "epochs": t.epochs,
        "shards": shards,
        "points": list(t.points),
        "error": t.error,
    }


def as_json(st: Status, summary: Summary, everything: bool) -> dict:
    """`status --format json`: the summary, the trials that need attention (all of them, in
    the order the view lists them), with `--all` every trial; the slice a driver runs, the
    envelope strategy's verdicts, the files left out."""
    attention = [trial_json(t) for t in needing_attention(st)]
    doc: dict = {"summary": summary.to_dict(), "attention": attention}
    if everything:
        doc["trials"] = [trial_json(t) for t in st.trials]
    doc["failures_log"] = st.failures_log
    if st.sweep_trials is not None:  # the run of a slice: the summary counts it alone
        doc["slice"] = {"trials": len(st.trials), "of": st.sweep_trials, "only": st.only}
    envelope = {"envelope": st.envelope} if st.envelope else {}  # only under that strategy
    search = {"search": dataclasses.asdict(st.search)} if st.search else {}  # only if one ran
    return {**doc, "left_out": st.left_out or [], **envelope, **search}
