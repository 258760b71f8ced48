"""Import published certification logs into an experiment (`sweeper import DIR`).

Logs: the tab-separated files that `certify.py` of Cohen et al. (locuslab/smoothing) and of
the code built on it (Hadisalman/smoothing-adversarial, jh-jeong/smoothing-consistency,
jh-jeong/smoothmix) writes, one file per model and certification σ, one row per test point:

    idx	label	predict	radius	correct	time
    0	3	-1	0.0	0	0:00:13.736080
    20	7	7	0.0734	1	0:00:13.771528

- predict −1 = abstain (stored with radius 0); correct 0/1 (or True/False), = predict == label;
- radius: any decimal text: the reference's `{:.3}` (0.523, 0.000123, 1.23e+00) or four
  decimals (0.5234); stored as printed, so certified accuracy is what the papers computed;
- time: seconds (13.7) or str(datetime.timedelta) (0:00:13.736080, 0:00:14, 1 day, 0:00:01);
- LF, CRLF or CR line ends, a UTF-8 BOM; blank lines are ignored.

Every row must be one CERTIFY can write (sweeper.ingest.log_reader): idx unique and
inside the data set's test split, label and predict classes of the data set, at most --max-rows
rows (default 100,000), and the radius at most what the n, α and σ_cert its rows are stored
with allow (σ_cert·Φ⁻¹(α^(1/n)), 3.8σ_cert for the papers' n and α, plus the printing's
rounding). Logs are streamed and re-read to be written, so an import holds one log's rows in
memory at a time.

The certification σ (σ_cert, stored per row and in the cert_id) is --set sigma_cert, else the
σ of the log's name `sigma_<σ>`, else the training σ. The reference code names the log by
certify.py's `sigma` argument and the model directory `noise_<σ>` by the training σ; the two
may differ (Cohen et al.'s published noise_0.25/test/sigma_0.50 reaches radius 1.62, beyond
what σ = 0.25 allows; SmoothAdv's noise_0.00/test/sigma_0.12), so the bound is σ_cert's.

A log is any file under DIR whose first line is that header (DIR may also be one log file).
Skipped, with the reason: empty files, header-only files, files with an unparseable or
impossible line (its number is given), logs certified on the training split (a `train`
directory), and files named `sigma_*` without the header. Other files (checkpoints,
stdout.txt, ...) are counted and ignored. A radius beyond the bound is not skipped: it means
the n, α or σ_cert the import would store are not the log's, so the import is refused (the
file, the line and the --set to pass named; nothing written).

Hyperparameters come from the directory and file names (`path_names`: one module per layout
of the reference code in `layouts/`, e.g. noise_0.25/, PGD_10steps/, eps_255/, 4-multitrain/).
The method is smoothadv when an attack part is present, else the one method a keyword names
(cohen/gaussian only if no other), else gaussian; a path naming two (consistency/salman/pgd_...)
is an error unless --set method=... says which. `--set key=value` (`sets`: values parsed as
YAML scalars; 1e-3 is read as a number) overrides or adds any TrialConfig field and the
certification settings n0, n, alpha (default: the papers' 100, 100000, 0.001) and
sigma_cert. Everything else takes TrialConfig's defaults (the method's protocol: the SmoothAdv
CIFAR-10 one, 150 epochs, batch 256, ..., MACER main.py's own), or a code's own protocol: the
jh-jeong code's logs (`noise_<σ>`) its schedule and input layer and the shared numbers (MACER
logs too), SmoothAdv's ImageNet models (PGD_1step, DDN_2steps,
replication) the `imagenet` space's. The trial_id is the hash of that config, so an imported model
with the same resolved config as one of ours gets the same trial_id; its rows keep a cert_id
of their own, `imported-sigma-<σ>-n-<n>-alpha-<α>`.

Each log becomes one finished model's file
(`certify/<trial_id>/<cert_id>/compacted-of-00001.parquet`, written atomically, count and
p_lower null), and the experiment's cache is refreshed, so reads
open one file for hundreds of imported models. Everything is checked before anything is
written. A file already holding the same rows is skipped (re-importing is idempotent);
different rows for the same model are an error, as are two different logs that resolve to the
same model. (Imports before this wrote `shard-00000-of-00001.parquet`; `sweeper compact` folds
those into the same files and the cache.)
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.ingest.layouts import jh_jeong, smoothing_adversarial
from sweeper.ingest.log_reader import (
    DEFAULT_MAX_ROWS,
    HEADER,
    LogLimits,
    LogRefused,
    LogSkip,
    read_log,
)
from sweeper.ingest.path_names import NEEDS, path_values
from sweeper.ingest.sets import PAPER_CERTIFY, TRIAL_KEYS, IngestError, parse_sets
from sweeper.results.attested_rows import signed
from sweeper.results.certify_rows import CERTIFY_ROWS, shard_table
from sweeper.results.inventory import sign_if_keyed
from sweeper.results.reader import refresh_cache
from sweeper.results.stage_table import write_table
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import SETTINGS, record_settings, write_sweep
from trainables.kernel import fileio
from trainables.kernel.attestation import load_signing_key, sha256_file
from trainables.kernel.config import TrialConfig
from trainables.kernel.errors import ConfigError
from trainables.kernel.final_points import FinalPoints, final_id

_SNIFF_BYTES = 4096
_LOG_NAME = re.compile(r"(sigma|noise)_.*|.*\.(tsv|log)", re.IGNORECASE)  # reported if empty


@dataclass
class Model:
    """One log, checked. Its rows are not kept: `columns()` reads them again to write them,
    so an import holds one log in memory at a time."""

    source: Path
    rel: str
    cfg: TrialConfig
    cert_id: str
    constants: dict[str, Any]
    sigma_cert: float
    limits: LogLimits
    out: str
    rows: int = 0
    digest: str = ""

    def columns(self) -> dict[str, list]:
        """The shard's columns; the first call sets `rows` and `digest`, later ones check that
        the log did not change since (IngestError if it did)."""
        try:
            cols = read_log(self.source, self.limits)
        except (LogSkip, LogRefused) as e:
            if not self.digest:
                raise
            raise IngestError(
                [f"{self.rel} changed during the import ({e}): import it again"]
            ) from None
        n = len(cols["idx"])
        cols["sigma_cert"] = [self.sigma_cert] * n
        cols["count"] = cols["p_lower"] = [None] * n
        blob = json.dumps([self.cfg.trial_id, self.cert_id, self.constants, cols], sort_keys=True)
        digest = hashlib.sha256(blob.encode()).hexdigest()
        if self.digest and digest != self.digest:
            raise IngestError([f"{self.rel} changed during the import: import it again"])
        self.rows, self.digest = n, digest
        return cols


@dataclass
class ImportReport:
    """What an import did: models written, models already there, files skipped and why."""

    experiment: Experiment
    imported: list[Model] = field(default_factory=list)
    already: list[Model] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (relative path, reason)
    ignored: int = 0  # files that are not certification logs
    wrote_sweep: bool = False

    @property
    def rows(self) -> int:
        return sum(m.rows for m in self.imported)


# ---------------------------------------------------------------------------- finding logs
def find_logs(directory: Path) -> tuple[list[Path], list[tuple[Path, str]], int]:
    """(log files, (file, reason) skipped before parsing, files that are not logs)."""
    if directory.is_file():
        files = [directory]
    else:  # not inside hidden directories (.git of a cloned repository)
        files = sorted(
            p
            for p in directory.rglob("*")
            if p.is_file() and not any(s.startswith(".") for s in p.relative_to(directory).parts)
        )
    logs, skipped, ignored = [], [], 0
    for path in files:
        try:
            with path.open("rb") as f:
                head = f.read(_SNIFF_BYTES).decode("utf-8-sig", errors="replace")
        except OSError as e:
            skipped.append((path, f"cannot read it ({e.strerror or e})"))
            continue
        first = head.splitlines()[0] if head.strip() else ""
        named = _LOG_NAME.fullmatch(path.name) is not None
        if tuple(s.strip() for s in first.split("\t")) == HEADER:
            logs.append(path)
        elif named and not head.strip():
            skipped.append((path, "empty"))
        elif named and path.name.startswith("sigma_"):
            skipped.append((path, f"line 1: not the header {'<TAB>'.join(HEADER)}"))
        else:
            ignored += 1
    return logs, skipped, ignored


# ---------------------------------------------------------------------------- planning
def _config(values: dict, methods: set[str], trial_sets: dict) -> TrialConfig:
    """The log's TrialConfig from its path's values, the methods it names and --set."""
    values = {k: v for k, v in values.items() if k in TRIAL_KEYS}
    strong = methods - {"gaussian"}  # `cohen` names the base training of another method too
    if "method" not in trial_sets:
        if len(strong) > 1:
            named = ", ".join(sorted(strong))
            raise ConfigError([f"the path names several methods ({named}): pass --set method=..."])
        values["method"] = next(iter(strong), "gaussian")
    if "sigma" not in values and "sigma" not in trial_sets:
        raise ConfigError(
            ["no training σ in the path (a noise_<σ> directory): pass --set sigma=..."]
        )
    return TrialConfig.from_dict(values | trial_sets)


def _sigma_cert(given: float | None, named: float | None, trained: float) -> float:
    """The σ the log was certified with: --set sigma_cert, else the σ of the log's name
    (`sigma_<σ>`: certify.py's `sigma` argument, which may differ from the training σ of the
    model directory, as in Cohen et al.'s noise_0.25/test/sigma_0.50), else the training σ
    (jh-jeong's `noise_<σ>` logs are certified at the training σ). LogRefused for a name's
    σ of 0, which CERTIFY cannot certify with."""
    if given is not None:
        return float(given)  # sets.parse_sets checked it is > 0
    if named is not None and not named > 0:
        raise LogRefused(
            f"the file name says certification σ {named:g}; CERTIFY needs σ > 0: "
            "pass --set sigma_cert=... as the log was certified"
        )
    return float(named if named is not None else trained)


def _model(log: Path, root: Path, exp: Experiment, sets: tuple[dict, dict], max_rows: int) -> Model:
    """The log's model, its rows read and checked (LogSkip: why the log is skipped;
    LogRefused: a row its stored n, α and σ_cert cannot give, which refuses the import)."""
    trial_sets, cert_sets = sets
    rel = str(log.relative_to(root))
    values, methods = smoothing_adversarial.vanilla(*path_values(log, root))
    if jh_jeong.LOG_NAME.fullmatch(log.name):  # trained by the jh-jeong code: its protocol
        values = {**jh_jeong.PROTOCOL, **values}
    dataset = trial_sets.get("dataset", values.get("dataset"))
    values = smoothing_adversarial.protocol(values, dataset)  # its ImageNet models' protocol
    if values.get("_split") == "train":
        raise LogSkip("certified on the training split (a 'train' directory)")
    for what, part in values["_needs"]:
        key, keys = NEEDS[what]
        if key not in trial_sets:
            raise LogSkip(f"{what} ({part}) is not described by the path alone: pass --set {keys}")
    cfg = _config(values, methods, trial_sets)
    cert = {**PAPER_CERTIFY, **cert_sets}
    sigma_cert = _sigma_cert(cert.pop("sigma_cert", None), values.get("sigma_cert"), cfg.sigma)
    # The bound follows from exactly the σ_cert, n and α the rows are stored with.
    cert_id = f"imported-sigma-{sigma_cert:g}-n-{cert['n']}-alpha-{cert['alpha']:g}"
    if cert.pop("final", False):  # a final step's log (`--set final=true`): its own cert_id
        cert_id = final_id(cert_id, FinalPoints())
    limits = LogLimits.of(max_rows, cfg.dataset, cert["n"], cert["alpha"], sigma_cert)
    constants = {"smoothing": "fixed", **cert}
    # A finished model's file, read through the experiment's cache like a compacted sweep model
    out = exp.compacted_path("certify", cfg.trial_id, cert_id, 1)
    model = Model(log, rel, cfg, cert_id, constants, sigma_cert, limits, out)
    model.columns()
    return model


def _existing_digest(location: str) -> str | None:
    """The digest recorded in an existing shard ("" if unreadable or not imported), or None."""
    if not fileio.exists(location):
        return None
    try:
        meta = pq.read_schema(io.BytesIO(fileio.read_bytes(location))).metadata or {}
    except (pa.ArrowInvalid, OSError):
        return ""
    return meta.get(b"sweeper.import_digest", b"").decode()


def _place(model: Model, seen: dict[str, Model], report: ImportReport, problems: list[str]) -> None:
    """File the model as new, already imported, a duplicate, or a conflict."""
    other = seen.get(model.out)
    if other is not None:
        if other.digest == model.digest:
            report.skipped.append((model.rel, f"the same rows as {other.rel}"))
        else:
            problems.append(
                f"{model.rel} and {other.rel} resolve to the same model {model.cfg.trial_id} "
                f"({model.cert_id}) with different rows: import them separately with --set "
                "(e.g. seed=1)"
            )
        return
    seen[model.out] = model
    existing = _existing_digest(model.out)
    if existing is None:
        report.imported.append(model)
    elif existing == model.digest:
        report.already.append(model)
    elif existing == "":
        problems.append(
            f"{model.rel}: {model.out} exists but is no imported shard: delete it and import again"
        )
    else:
        problems.append(
            f"{model.rel}: {model.out} already holds different rows for model {model.cfg.trial_id} "
            f"({model.cert_id}): pass --set to tell them apart (e.g. seed=1) or another "
            "--experiment"
        )


def plan_import(
    directory: str | Path, exp: Experiment, sets: list[str], max_rows: int = DEFAULT_MAX_ROWS
) -> ImportReport:
    """Everything an import would do, checked; raises IngestError with every problem."""
    root = Path(directory).expanduser().absolute()
    problems = [] if root.exists() else [f"{directory}: no such directory"]
    try:
        parsed = parse_sets(sets)
    except IngestError as e:
        problems += e.problems
    if problems:
        raise IngestError(problems)
    logs, early, ignored = find_logs(root)
    base = root.parent if root.is_file() else root
    report = ImportReport(exp, ignored=ignored)
    report.skipped += [(str(p.relative_to(base)), why) for p, why in early]
    if not logs:
        raise IngestError(
            [
                f"{directory}: no certification logs "
                f"(files starting with the line {' '.join(HEADER)})"
            ]
        )
    seen: dict[str, Model] = {}
    rejected: dict[str, list[str]] = {}  # TrialConfig's problem -> the logs it was found in
    for log in logs:
        rel = str(log.relative_to(base))
        try:
            _place(_model(log, base, exp, parsed, max_rows), seen, report, problems)
        except LogSkip as e:
            report.skipped.append((rel, str(e)))
        except LogRefused as e:
            problems.append(f"{rel}: {e}")
        except ConfigError as e:
            for p in e.problems:
                rejected.setdefault(p, []).append(rel)
    # A --set that every log rejects is one line, not one per log.
    for p, rels in rejected.items():
        more = f" and {len(rels) - 1} more logs" if len(rels) > 1 else ""
        problems.append(f"{rels[0]}{more}: {p}")
    if problems:
        raise IngestError(problems)
    return report


# ---------------------------------------------------------------------------- writing
def write_import(report: ImportReport) -> ImportReport:
    """Write the planned models' files and refresh the experiment's cache, then a sweep.json if
    the experiment has none (an empty sweep: the imported models are results, not trials of a
    sweep of ours), the imported settings declared in it. sweep.json comes last:
    an import that fails on the way leaves no experiment that looks whole (re-run it)."""
    exp = report.experiment
    for m in report.imported:
        metadata = {
            "certify_backend": f"imported from {m.source}",
            "normalization": "unknown (imported log)",
            "config": m.cfg.to_dict(),
            "import_digest": m.digest,
        }
        table = shard_table(m.cfg, exp.name, m.cert_id, m.constants, m.columns(), metadata)
        write_table(_attested(table, m), m.out)
    settings = sorted({m.cert_id for m in report.imported})
    if fileio.exists(exp.sweep_json):  # the readers count only the settings it declares
        record_settings(exp, settings)
    if report.imported:
        refresh_cache(exp, CERTIFY_ROWS)  # the models are read from one file, not hundreds
    if (report.imported or report.already) and not fileio.exists(exp.sweep_json):
        sweep = {"space": None, "trials": [], "imported": True, SETTINGS: settings}
        write_sweep(exp, sweep)
        report.wrote_sweep = True
    sign_if_keyed(exp)  # the inventory, with what was imported
    return report


def _attested(table, m: Model):
    """The imported rows signed with this machine's key (as they are without one): made by
    `import` from the log of this digest, as this model and setting."""
    key = load_signing_key()
    if key is None:
        return table
    settings = {"trial_id": m.cfg.trial_id, "setting_id": m.cert_id, "source": m.source.name}
    return signed(table, key, "import", {"log": sha256_file(m.source)}, settings)


def import_logs(
    directory: str | Path,
    exp: Experiment,
    sets: list[str] | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> ImportReport:
    """Check everything, then write: the import of DIR's logs into `exp` (see the module doc)."""
    return write_import(plan_import(directory, exp, list(sets or []), max_rows))
