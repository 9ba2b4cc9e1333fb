"""Audit and loops health: scrape, replicas (guard leader, mode sync), audit writer,
scheduler jobs, Slack delivery."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import units

from slaguard.dashboards.panels import SEL, dashboard, gauge, quantile, rate, single_stat, ts

UID = "slaguard-ops"

_RUNS = "slaguard_scheduler_job_runs_total"
_OVERRUNS = "slaguard_scheduler_job_overruns_total"


def build() -> db.Dashboard:
    """Is slaguard itself healthy: scraped, auditing, looping on time, notifying?"""
    instances = [
        single_stat(
            "Instances up",
            "slaguard instances Prometheus scrapes successfully.",
            units.Short,
            [(f"sum(up{{{SEL}}})", "up")],
            span=12,
        ),
        single_stat(
            "Versions running",
            "Instances per slaguard version.",
            units.Short,
            [(f"count by (version) (slaguard_build_info{{{SEL}}})", "{{version}}")],
            span=12,
        ),
    ]
    audit = [
        ts(
            "Audit queue depth",
            "Records not yet confirmed in the database. Dashed line: the 10,000 alert.",
            units.Short,
            [(gauge("slaguard_audit_queue_depth", "instance"), "{{instance}}")],
            thresholds=[(10000, "red")],
        ),
        ts(
            "Audit spill",
            "Bytes in the spill journal not yet confirmed in the database.",
            units.BytesIEC,
            [(gauge("slaguard_audit_spill_bytes", "instance"), "{{instance}}")],
        ),
        ts(
            "Audit rows written/s vs decisions/s",
            "Rows committed per second should track about 2x decisions per second: each "
            "request writes its decision and, once it ends, its outcome.",
            units.RowsPerSecond,
            [
                (rate("slaguard_audit_rows_written_total", "instance"), "written {{instance}}"),
                (rate("slaguard_decisions_total", "instance"), "decisions {{instance}}"),
            ],
        ),
        ts(
            "Audit write errors, refusals and unreadable records/s",
            "Failed batch write attempts (retried); records refused because the spill "
            "journal was full or not writable, and journalled records the writer could not "
            "read back (both lost: never audited).",
            units.OpsPerSecond,
            [
                (rate("slaguard_audit_write_errors_total", "instance"), "errors {{instance}}"),
                (rate("slaguard_audit_records_refused_total", "instance"), "refused {{instance}}"),
                (
                    rate("slaguard_audit_records_unreadable_total", "instance"),
                    "unreadable {{instance}}",
                ),
            ],
        ),
    ]
    replicas = [
        ts(
            "Guard leader",
            "1 on the replica that holds the guard lease (runs the detectors, sends Slack). "
            "Exactly one should; none for 2 minutes is the leaderless alert.",
            units.Short,
            [(gauge("slaguard_guard_leader", "instance"), "{{instance}}")],
            span=8,
        ),
        ts(
            "Fleet mode read ago",
            "Seconds since each replica last read the shared fleet mode (every 500 ms when "
            "healthy). Dashed line: 30 s, the mode-sync alert: past it the replica routes "
            "on a mode the fleet may have left.",
            units.Seconds,
            [
                (
                    f"time() - {gauge('slaguard_fleet_mode_synced_timestamp_seconds', 'instance')}",
                    "{{instance}}",
                )
            ],
            thresholds=[(30, "red")],
            span=8,
        ),
        ts(
            "Mode sync errors/s",
            "Mode syncs that could not read the shared mode (database refused, timed out "
            "or gave no answer); the sync job itself does not fail on these.",
            units.OpsPerSecond,
            [(rate("slaguard_guard_sync_errors_total", "instance"), "{{instance}}")],
            span=8,
        ),
    ]
    runs, overruns = rate(_RUNS, "scheduler_job"), rate(_OVERRUNS, "scheduler_job")
    jobs = [
        ts(
            "Job runs/s",
            "Runs started per second per job (100 ms loops: about 10/s).",
            units.OpsPerSecond,
            [(runs, "{{scheduler_job}}")],
        ),
        ts(
            "Job overrun ratio",
            "Share of runs skipped because the previous run was still going. Dashed "
            "line: 10 %, the overrun alert.",
            units.PercentUnit,
            [(f"{overruns} / ({runs} + {overruns})", "{{scheduler_job}}")],
            thresholds=[(0.1, "red")],
        ),
        ts(
            "Job failures/s",
            "Runs that raised, per job.",
            units.OpsPerSecond,
            [(rate("slaguard_scheduler_job_failures_total", "scheduler_job"), "{{scheduler_job}}")],
        ),
        ts(
            "Job duration p99",
            "99th percentile run time per job. Dashed line: the 100 ms loop period.",
            units.Seconds,
            [
                (
                    quantile(0.99, "slaguard_scheduler_job_duration_seconds", "scheduler_job"),
                    "{{scheduler_job}}",
                )
            ],
            thresholds=[(0.1, "red")],
        ),
    ]
    slack = [
        ts(
            "Slack messages/s",
            "Messages delivered, and messages given up on after retries by reason.",
            units.MessagesPerSecond,
            [
                (rate("slaguard_slack_deliveries_total", ""), "delivered"),
                (rate("slaguard_slack_delivery_failures_total", "reason"), "lost {{reason}}"),
            ],
            span=24,
        ),
    ]
    return dashboard(
        UID,
        "slaguard / Audit and loops",
        "Scrape health, replicas (guard leader, fleet mode sync), the audit writer "
        "(backlog, spill, rows, errors), scheduler "
        "jobs (runs, overruns, failures, durations) and Slack delivery.",
        [
            ("Instances", instances),
            ("Replicas", replicas),
            ("Audit writer", audit),
            ("Scheduler jobs", jobs),
            ("Slack", slack),
        ],
    )
