"""The simulator's inputs: real traces, workload assignment, latency model, fault scenarios.

The discrete-event engine and the report build on these; nothing here depends on the
scheduler.
"""

from slaguard.sim.arrival_faults import apply_arrival_faults
from slaguard.sim.faults import (
    FaultError,
    FaultSchedule,
    load_faults,
    parse_faults,
)
from slaguard.sim.latency import LatencyModel, TargetLatency
from slaguard.sim.paths import (
    data_dir,
    default_trace_path,
    mooncake_trace_path,
    perf_model_path,
)
from slaguard.sim.synthetic import ArrivalProcess, synthetic_trace
from slaguard.sim.trace import Trace, TraceError
from slaguard.sim.traces import TraceFormat, detect_format, load_trace
from slaguard.sim.workload import Workload, WorkloadError, assign_workload, iter_requests

__all__ = [
    "ArrivalProcess",
    "FaultError",
    "FaultSchedule",
    "LatencyModel",
    "TargetLatency",
    "Trace",
    "TraceError",
    "TraceFormat",
    "Workload",
    "WorkloadError",
    "apply_arrival_faults",
    "assign_workload",
    "data_dir",
    "default_trace_path",
    "detect_format",
    "iter_requests",
    "load_faults",
    "load_trace",
    "mooncake_trace_path",
    "parse_faults",
    "perf_model_path",
    "synthetic_trace",
]
