"""How a `cliffsweep run` ends: its exit code and the sentences that say why (issue 29).

A script, a CI job or a scheduler reading the exit code must be able to tell a sweep that gave
every result from one that lost trials, one whose input was refused and one that was stopped:

    0    every trial done (or diverged, which is a result) and every checkpoint evaluated
    1    some trial failed, or some evaluation failed for good; everything else finished and is
         recorded (re-run with --retry-failed / the same command to retry them)
    2    the input was refused before anything started: a wrong sweep file, a damaged store,
         another driver running on the store
    130  interrupted (Ctrl-C or SIGTERM): unfinished trials are back to pending, finished
         evaluations kept; the same command resumes

Pure: the decision reads the trials table's statuses, nothing else.
"""

from __future__ import annotations

import shlex
from enum import IntEnum

import pandas as pd

from cliffsweep.sweep.status import NEEDS_RERUN, UNFINISHED, TrialStatus


class Exit(IntEnum):
    DONE = 0
    FAILED = 1
    REFUSED = 2
    INTERRUPTED = 130


def exit_code(trials: pd.DataFrame) -> Exit:
    """Interrupted wins over failed: the failed trials are also said, but a stopped run is not
    finished, and its re-run (plain) is what the user needs first."""
    status = trials["status"] if not trials.empty else pd.Series([], dtype=str)
    if status.isin(UNFINISHED).any():
        return Exit.INTERRUPTED
    if status.isin(NEEDS_RERUN).any():
        return Exit.FAILED
    return Exit.DONE


def ending_text(trials: pd.DataFrame, command: list[str]) -> str:
    """What the user reads last: what did not finish, and the one command that goes on."""
    status = trials["status"] if not trials.empty else pd.Series([], dtype=str)
    again = shlex.join(command)
    lines = []
    unfinished = int(status.isin(UNFINISHED).sum())
    if unfinished:
        lines.append(f"Interrupted: {unfinished} trial(s) not finished. Run the same command again to resume "
                     "(finished trials and evaluations are kept; Tune's 'Tuner.restore' hint does not apply):\n"
                     f"  {again}")
    unevaluated = int((status == TrialStatus.TRAINED).sum())
    if unevaluated:
        lines.append(f"{unevaluated} trial(s) trained but not every checkpoint of theirs is evaluated (the "
                     f"evaluation errors are in `cliffsweep status`). Run the same command again to retry them:\n"
                     f"  {again}")
    failed = trials.loc[status == TrialStatus.FAILED, "trial_id"].tolist() if not trials.empty else []
    if failed:
        shown = ", ".join(failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
        retry = command if "--retry-failed" in command else [*command, "--retry-failed"]
        lines.append(f"{len(failed)} trial(s) failed: {shown} (their errors: `cliffsweep status`). A plain "
                     f"re-run skips them; to run them again:\n  {shlex.join(retry)}")
    return "\n\n".join(lines)
