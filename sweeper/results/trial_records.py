"""The trial behind a certification file: a trial the sweep declared (sweep.json lists its
config: `sweep_file.declared`) with its `trials/<trial_id>/trial.json`, whose config must hash
to the trial_id, or (an imported setting, cert_id `imported-…`) the file's import record: the
metadata `sweeper import` writes, `certify_backend` "imported from <log>" and the config,
hashing to the trial_id. `provenance` checks the rows against what this finds, and
`envelope_records` a pruned model's trial (`stored_trial`)."""

from __future__ import annotations

import json
from typing import Any

from sweeper.results.storage import Experiment, StageFile
from sweeper.results.sweep_file import declared
from trainables.kernel.cert_ids import is_imported

IMPORT_BACKEND = "imported from "  # how `sweeper import` marks the files it writes


def trial_configs(exp: Experiment, files: list[StageFile], metadata: list[dict | None]):
    """(trial_id -> its config, file index -> why no trial is behind it). A trial is behind a
    file when the sweep declared it and trials/<trial_id>/trial.json's config hashes to the
    trial_id, or (an imported setting) when the file's import record's config does."""
    configs: dict[str, Any] = {}
    problems: dict[int, str] = {}
    stored: dict[str, Any] = {}
    sweep = declared(exp)
    for i, f in enumerate(files):
        imported = is_imported(f.setting_id)
        if f.trial_id not in stored:
            stored[f.trial_id] = stored_trial(exp, f.trial_id)
        found = stored[f.trial_id]
        if not imported and not isinstance(found, str):
            found = sweep.trial_problem(f.trial_id) or found
        if not isinstance(found, str):
            configs[f.trial_id] = found
        elif imported:
            record = _import_record(f.trial_id, metadata[i])
            if isinstance(record, str):
                problems[i] = record
            else:
                configs[f.trial_id] = record
        else:
            problems[i] = found
    return configs, problems


def stored_trial(exp: Experiment, trial_id: str):
    """The config of trials/<trial_id>/trial.json if it hashes to `trial_id`, else why not."""
    from trainables.kernel.errors import ProblemsError
    from trainables.kernel.trial_status import read_status

    try:
        doc = read_status(exp.trial_dir(trial_id))
        if doc is None:
            return f"no trial behind it (no trials/{trial_id}/trial.json)"
        return _config_with_id(doc.get("config"), trial_id, f"trials/{trial_id}/trial.json")
    except (ProblemsError, OSError) as e:
        return f"no trial behind it (trials/{trial_id}/trial.json: {e})"


def _import_record(trial_id: str, metadata: dict | None):
    """The config of an imported file's import record if it hashes to `trial_id`, else why."""
    meta = metadata or {}
    backend = meta.get(b"sweeper.certify_backend", b"").decode(errors="replace")
    if not backend.startswith(IMPORT_BACKEND):
        return "no trial behind it (no trial.json, and no import record in the file)"
    try:
        config = json.loads(meta.get(b"sweeper.config", b"null"))
    except ValueError:
        config = None
    return _config_with_id(config, trial_id, "the file's import record")


def _config_with_id(config: Any, trial_id: str, where: str):
    from trainables.kernel.config import TrialConfig
    from trainables.kernel.errors import ProblemsError

    try:
        cfg = TrialConfig.from_dict(config)
    except (ProblemsError, TypeError, AttributeError) as e:
        return f"no trial behind it ({where}: not a trial's config: {e})"
    if cfg.trial_id != trial_id:
        return f"no trial behind it ({where} is the config of {cfg.trial_id})"
    return cfg
