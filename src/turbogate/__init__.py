"""turbogate: a tiered-latency gateway and capacity lab for self-hosted generative-AI inference."""

__version__ = "0.1.0"


def build() -> str:
    """``"compiled"`` when this install's request path is mypyc-compiled (built with
    ``TURBOGATE_COMPILE=1``, setup.py), else ``"pure Python"``."""
    from turbogate.sched import flow  # one of the compiled modules; imported on demand

    return "pure Python" if flow.__file__.endswith(".py") else "compiled"
