"""Pure, sans-I/O scheduling core shared by the gateway and the simulator.

``flow`` (a request's whole life as one state machine: events in, actions out; its vocabulary in
``actions``, tier resolution in ``tiering``), ``policy``
(its settings as plain values), ``tiers`` (names and aliases), ``admission`` (L1), ``picker``
(L2), ``load`` (engine metric names → one load value).  Nothing here reads a clock or a
socket: callers pass ``now``.
"""

from turbogate.sched.actions import Cancel, Dispatch, Failure, FlowRequest, Phase, Probe, Respond
from turbogate.sched.admission import Admission, Admitted, Shed, TenantPolicy, Ticket, TierPolicy
from turbogate.sched.flow import Flow
from turbogate.sched.load import ReplicaLoad, load_from_samples
from turbogate.sched.picker import (
    Band,
    Health,
    HealthChange,
    MetricsDoubt,
    Picker,
    PickerConfig,
    Replica,
    ScrapeFailed,
)
from turbogate.sched.policy import FlowPolicy, PoolSpec, ReplicaSpec, TenantSpec
from turbogate.sched.tiers import TIERS, Tier, parse_tier, resolve_tier

__all__ = [
    "TIERS",
    "Admission",
    "Admitted",
    "Band",
    "Cancel",
    "Dispatch",
    "Failure",
    "Flow",
    "FlowPolicy",
    "FlowRequest",
    "Health",
    "HealthChange",
    "MetricsDoubt",
    "Phase",
    "Picker",
    "PickerConfig",
    "PoolSpec",
    "Probe",
    "Replica",
    "ReplicaLoad",
    "ReplicaSpec",
    "Respond",
    "ScrapeFailed",
    "Shed",
    "TenantPolicy",
    "TenantSpec",
    "Ticket",
    "Tier",
    "TierPolicy",
    "load_from_samples",
    "parse_tier",
    "resolve_tier",
]
