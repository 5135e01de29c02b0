"""DSCP values by number or by name, and the IP TOS byte that carries them (RFC 2474, 4594, 8622).

A tier's upstream connections can be marked so the network can tell Turbo traffic apart
(``tiers.turbo.dscp: EF`` in the gateway config); the socket option ``IP_TOS`` takes the DSCP
in its upper six bits, the lower two being ECN's, which the kernel owns.
"""

from __future__ import annotations

#: Standard code-point names (class selectors, assured forwarding, expedited forwarding, …).
DSCP_NAMES: dict[str, int] = {
    "DF": 0, "CS0": 0, "LE": 1,
    "CS1": 8, "AF11": 10, "AF12": 12, "AF13": 14,
    "CS2": 16, "AF21": 18, "AF22": 20, "AF23": 22,
    "CS3": 24, "AF31": 26, "AF32": 28, "AF33": 30,
    "CS4": 32, "AF41": 34, "AF42": 36, "AF43": 38,
    "CS5": 40, "VA": 44, "EF": 46, "CS6": 48, "CS7": 56,
}


def parse_dscp(value: object) -> int:
    """A DSCP code point (0–63) from a number or a name such as ``EF`` or ``af41``."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"a DSCP value is a number 0-63 or a name such as EF or AF41, not {value!r}")
    if isinstance(value, int):
        if not 0 <= value <= 63:
            raise ValueError(f"DSCP {value} is out of range: a code point is 0-63 (EF is 46)")
        return value
    name = value.strip().upper()
    if name.isdigit():
        return parse_dscp(int(name))
    if name not in DSCP_NAMES:
        raise ValueError(f"unknown DSCP name {value!r}; use 0-63 or one of {', '.join(DSCP_NAMES)}")
    return DSCP_NAMES[name]


def tos_byte(dscp: int) -> int:
    """The ``IP_TOS`` / ``IPV6_TCLASS`` value for a DSCP code point (ECN bits zero)."""
    return dscp << 2
