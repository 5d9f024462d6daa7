"""Which runs each experiment's results come from, and which commit and day produced them, so that the
pages say it beside every section (not only the console).

Run logs record the commit of the harness that ran them (meta.json `git.commit`, `git.dirty`) and when
they finished (`finished_at`). The analysis records that per experiment in its manifest entry, with the
commit of the analysis itself and the day it ran, so that results kept from an earlier manifest can say
where they come from. Entries written before this was recorded say so ("not recorded").
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from analysis.metrics.compute import Analysis
from analysis.report.manifest import Kept, kept_provenance, same_numbers

#: Where the analysis' own repository is (its commit is recorded with what it computed).
_REPO = Path(__file__).resolve().parents[2]
_SHORT = 7


def analysis_commit(repo: Path = _REPO) -> str | None:
    """The commit the analysis code is at (`git rev-parse HEAD`), or None outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else None


def today() -> str:
    """The analysis' day (UTC), as recorded with what it computed."""
    return datetime.now(UTC).date().isoformat()


def from_runs(runs: pd.DataFrame, commit: str | None, day: str) -> dict[str, dict]:
    """Experiment -> its provenance record from its runs' meta.json (RunLogs.runs' flattened config)."""
    records = {}
    for experiment, group in runs.groupby("experiment", sort=True):
        configs = list(group["config"])
        commits = sorted({str(c["git.commit"]) for c in configs if c.get("git.commit")})
        days = sorted({str(c["finished_at"])[:10] for c in configs if c.get("finished_at")})
        records[str(experiment)] = {
            "runs": len(group),
            "run_commits": commits,
            "unrecorded_commits": sum(1 for c in configs if not c.get("git.commit")),
            "dirty": any(bool(c.get("git.dirty")) for c in configs),
            "first_day": days[0] if days else None,
            "last_day": days[-1] if days else None,
            "analysis_commit": commit,
            "analysed_on": day,
        }
    return records


def _commits(record: dict) -> str | None:
    commits = [c[:_SHORT] for c in record.get("run_commits") or []]
    if not commits:
        return None
    text = ("commit " if len(commits) == 1 else "commits ") + ", ".join(commits)
    if record.get("unrecorded_commits"):
        text += f" (and {record['unrecorded_commits']} runs without one)"
    return text + (" with uncommitted changes" if record.get("dirty") else "")


def _days(record: dict) -> str | None:
    first, last = record.get("first_day"), record.get("last_day")
    if not first:
        return None
    return first if first == last else f"{first} to {last}"


def describe(record: dict | None, runs: int, *, kept: bool) -> str:
    """One line: how many runs, at which commit and on which days, and whether the results are kept
    from an earlier manifest (and which)."""
    if record is None:
        where = "commit and date not recorded"
        return f"{runs} runs ({where}; kept from an earlier manifest)" if kept else f"{runs} runs ({where})"
    commits, days = _commits(record), _days(record)
    text = f"{runs} runs" + (f" at {commits}" if commits else "") + (f", {days}" if days else "")
    missing = [name for name, found in (("commit", commits), ("date", days)) if not found]
    text += f" ({' and '.join(missing)} not recorded)" if missing else ""
    if kept:
        commit = record.get("analysis_commit")
        text += (
            f"; kept from the manifest of {commit[:_SHORT] if commit else 'an unknown commit'}, "
            f"{record.get('analysed_on') or 'date unknown'}"
        )
    return text


def settled(records: dict[str, dict], kept: Kept, analysis: Analysis) -> dict[str, dict]:
    """`records`, except that an experiment whose numbers this analysis reproduces exactly keeps the
    record of its earlier manifest entry: the page names the runs that first produced these numbers, and
    rerunning them (a fresh `make reproduce` of the same code) rewrites the committed results byte for
    byte. An entry written before records were kept gets this analysis' record."""

    def earlier(experiment: str) -> dict | None:
        entry = kept.recomputed.get(experiment)
        record = entry.get("provenance") if entry else None
        return record if isinstance(record, dict) and same_numbers(entry, analysis, experiment) else None

    return {e: earlier(e) or record for e, record in records.items()}


def sources(records: dict[str, dict], kept: Kept) -> dict[str, str]:
    """Experiment -> which runs its numbers come from, for the pages: this analysis' runs (`records`,
    `from_runs`), or those of the manifest entries it keeps, said to be kept."""
    texts = {e: describe(r, r["runs"], kept=False) for e, r in records.items()}
    for experiment, record in kept_provenance(kept).items():
        texts[experiment] = describe(record, len(kept.experiments[experiment]["runs"]), kept=True)
    return texts
