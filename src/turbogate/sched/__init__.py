"""Pure, sans-I/O scheduling core shared by the gateway and the simulator.

``tiers`` (names and aliases), ``admission`` (L1), ``picker`` (L2), ``load`` (engine metric
names → one load value).  Nothing here reads a clock or a socket: callers pass ``now``.
"""

from turbogate.sched.admission import Admission, Admitted, Shed, TenantPolicy, Ticket, TierPolicy
from turbogate.sched.load import ReplicaLoad, load_from_samples
from turbogate.sched.picker import Band, Health, Picker, PickerConfig, Replica
from turbogate.sched.tiers import TIERS, Tier, parse_tier, resolve_tier

__all__ = [
    "TIERS",
    "Admission",
    "Admitted",
    "Band",
    "Health",
    "Picker",
    "PickerConfig",
    "Replica",
    "ReplicaLoad",
    "Shed",
    "TenantPolicy",
    "Ticket",
    "Tier",
    "TierPolicy",
    "load_from_samples",
    "parse_tier",
    "resolve_tier",
]
