"""How the CLI shows progress: a live bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
from typing import TextIO

from controller_core import errors
from controller_core.model import ElectionType
from controller_core.orchestration.election import ElectionReport
from controller_core.orchestration.reassignment import DryRunReport, Limits, Progress
from controller_core.units import counted, format_bytes
from controller_core.units import format_duration as format_seconds

PLAIN_EVERY_PERCENT = 10.0
LIST_LIMIT = 20


def progress_line(key: str, p: Progress, now: float) -> str:
    width = 24
    filled = int(width * p.percent / 100)
    bar = "#" * filled + "." * (width - filled)
    return (f"{key} [{bar}] {p.percent:5.1f}%  {p.phase.value}  done {p.done}/{p.total} "
            f"moving {p.moving} pending {p.pending} failed {p.failed}  "
            f"{format_bytes(p.bytes_moved)}/{format_bytes(p.bytes_total)}  "
            f"ETA {format_seconds(p.eta_seconds)}  t={format_seconds(now)}")


def cap_list(items: list[str], limit: int = LIST_LIMIT) -> str:
    """At most ``limit`` items, then "and N more" — the same cap in every view."""
    more = len(items) - limit
    return ", ".join(items[:limit]) + (f" and {more} more" if more > 0 else "")


def format_election(report: ElectionReport, kind: ElectionType) -> list[str]:
    """Lines in the words of kafka-leader-election."""
    lines = []
    elected = [str(tp) for tp in sorted(tp for tp, r in report.results.items() if r.ok)]
    not_needed = [str(tp) for tp in sorted(tp for tp, r in report.results.items()
                                           if r.error == errors.ELECTION_NOT_NEEDED)]
    if elected:
        lines.append(f"Successfully completed leader election ({kind.value}) for partitions "
                     f"{cap_list(elected)}")
    if not_needed:
        lines.append(f"Valid replica already elected for partitions {cap_list(not_needed)}")
    failures = report.failures()
    for topic in report.unknown_topics:
        lines.append(f"Error completing leader election ({kind.value}) for topic {topic}: "
                     "UNKNOWN_TOPIC_OR_PARTITION: the topic does not exist")
    if failures:
        lines.append(f"Errors in leader election ({kind.value}) for {len(failures)} partition(s):")
        for tp, r in failures[:LIST_LIMIT]:
            lines.append(f"  {tp}: {r.error.name}: {r.message}")
        if len(failures) > LIST_LIMIT:
            lines.append(f"  ... and {len(failures) - LIST_LIMIT} more")
    if not lines and not report.attempted_all:
        lines.append("No partitions to elect leaders for.")
    # Over every partition, those needing no election are not in the answer: a balanced
    # cluster prints nothing, as kafka-leader-election --all-topic-partitions does.
    return lines


class ProgressView:
    def __init__(self, *, json_mode: bool = False, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.json_mode = json_mode
        self.tty = self.out.isatty() and not json_mode
        self._last_percent: dict[str, float] = {}
        self._last_phase: dict[str, str] = {}

    def line(self, text: str) -> None:
        if not self.json_mode:
            print(text, file=self.out, flush=True)

    def progress(self, key: str, p: Progress, now: float) -> None:
        if self.json_mode:
            return
        if self.tty:
            self.out.write("\r\033[K" + progress_line(key, p, now))
            self.out.flush()
            return
        last = self._last_percent.get(key, -PLAIN_EVERY_PERCENT)
        if p.percent >= last + PLAIN_EVERY_PERCENT or self._last_phase.get(key) != p.phase:
            self._last_percent[key] = p.percent
            self._last_phase[key] = p.phase
            self.line(progress_line(key, p, now))

    def finish(self, key: str, p: Progress, now: float) -> None:
        if self.json_mode:
            return
        if self.tty:
            self.out.write("\r\033[K")
        if self.tty or self._last_percent.get(key) != p.percent:
            self.line(progress_line(key, p, now))
        if p.phase.terminal:
            verb = {"Completed": "completed", "Cancelled": "cancelled", "Failed": "failed"}
            self.line(f"{key} {verb[p.phase.value]}: {p.done} moved, {p.rolled_back} rolled back"
                      f", {p.never_started} never started, {p.failed} failed; "
                      f"{format_bytes(p.bytes_moved)} copied")
        elif p.phase.value == "Paused" and not p.moving:
            self.line(f"{key} paused, {p.pending} pending ({p.done} done); set spec.paused: "
                      "false and run `kraftsman apply` again to go on")
        else:
            self.line(f"{key} is {p.phase.value.lower()} — {p.moving} moving, {p.pending} "
                      "pending; run `kraftsman apply` again to go on")
        if p.message:
            self.line(f"  {p.message}")
        failed = [d for d in p.details if d.state == "failed"]
        for d in failed[:LIST_LIMIT]:
            self.line(f"  failed {d.tp}: {d.message}")
        if p.failed > LIST_LIMIT:
            self.line(f"  ... and {p.failed - LIST_LIMIT} more")

    def dry_run(self, key: str, r: DryRunReport, limits: Limits) -> None:
        throttle = (f"{format_bytes(limits.throttle_bytes_per_second)}/s"
                    if limits.throttle_bytes_per_second else "unthrottled")
        per_broker = (f", {limits.max_concurrent_moves_per_broker} per broker"
                      if limits.max_concurrent_moves_per_broker else "")
        est = (format_seconds(r.estimated_seconds) if r.estimated_seconds is not None
               else "not estimated")
        self.line(f"{key} (dry run): {counted(r.partitions_moving, 'partition')} would move "
                  f"({r.partitions_unchanged} already in place): {r.replica_moves} replicas "
                  f"added, {r.replicas_removed} removed, {r.leader_moves} leader moves, "
                  f"{format_bytes(r.bytes_to_move)} to copy, estimated {est} "
                  f"({throttle}, {limits.max_concurrent_moves} moves at once{per_broker})")
