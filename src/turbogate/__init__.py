"""turbogate: a tiered-latency gateway and capacity lab for self-hosted generative-AI inference."""

__version__ = "0.1.0"
