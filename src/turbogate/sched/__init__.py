"""Pure, sans-I/O scheduling core shared by the gateway and the simulator.

``flow`` (a request's whole life as one state machine: events in, actions out; its vocabulary in
``actions``, tier resolution in ``tiering``), ``policy`` (its settings as plain values),
``tiers`` (names and aliases), ``admission`` (L1; its values in ``ticket``, a tier's fair queue
in ``tier_queue``, the holdback's headroom in ``headroom``), ``picker`` (L2; what each replica
offers in ``replica_book``, ejection and re-probing in ``health``), ``load`` (engine metric
names → one load value).  Nothing here reads a clock or a socket: callers pass ``now``.
"""

from turbogate.sched.actions import Cancel, Dispatch, Failure, FlowRequest, Phase, Probe, Respond
from turbogate.sched.admission import Admission
from turbogate.sched.flow import Flow
from turbogate.sched.load import ReplicaLoad, load_from_samples
from turbogate.sched.picker import Picker
from turbogate.sched.policy import FlowPolicy, PoolSpec, ReplicaSpec, TenantSpec
from turbogate.sched.replica import Band, Health, HealthChange, MetricsDoubt, PickerConfig, Replica, ScrapeFailed
from turbogate.sched.ticket import Admitted, Shed, TenantPolicy, Ticket, TierPolicy
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
