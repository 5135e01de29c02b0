"""One small error hierarchy.  HTTP shells map these onto OpenAI-style error bodies.

Every error turbogate raises on purpose derives from ``TurbogateError``::

    TurbogateError
    ├── BadInput             a command's option or argument is wrong (``hint``: what to do instead)
    ├── ConfigError          a config value is missing or invalid (the message names the field)
    ├── CatalogError         an unknown GPU or model name
    ├── InvalidRequest       a request body is invalid (``param`` names the field)
    ├── UpstreamError        the upstream connection failed or broke (also a ``ConnectionError``)
    ├── StoreUnavailable     store/base.py: the shared store did not answer
    ├── LeaseError           sched/leases.py: UnknownLease, LeaseExpired, TooManyLeases
    ├── RefNotFound          sched/jobrun.py: a step's reference names a value the answer lacks
    ├── CalibrationError     emulator/calibrate.py: a bench run that cannot be fitted
    ├── WorkerFailed         bench/workers.py: a bench worker process failed
    ├── BenchFailed          bench/failures.py: a run stopped because its requests failed
    ├── BodyTooLarge         asgi.py: a request body over the size limit (413)
    ├── BadHeader, BadParam  gateway/regions.py, gateway/usage_api.py: a header or query value refused (400;
    │                        also ``ValueError``s)
    ├── XlError              plan/formula_functions.py: a spreadsheet error value (``#DIV/0!``) in a formula
    └── Aborted              emulator/runner.py: a request that left the engine before it finished
"""

from __future__ import annotations


class TurbogateError(Exception):
    """Base of every error turbogate raises on purpose; ``hint``, when set, says what to do about it
    (the command line prints ``<what> (<hint>)``, clierrors.py)."""

    hint: str | None = None


class BadInput(TurbogateError):
    """A command's option, argument or file is wrong: the message names it, ``hint`` says what to do."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class ConfigError(TurbogateError):
    """A configuration value is missing or invalid; the message names the field."""


class CatalogError(TurbogateError):
    """An unknown GPU or model name, or a model config that cannot be read."""


class InvalidRequest(TurbogateError):
    """A request body is invalid; ``param`` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class UpstreamError(TurbogateError, ConnectionError):
    """The connection failed or broke; ``before_response`` tells whether any byte had come,
    ``connect_failed`` whether no connection could be made at all (the replica is down),
    ``timed_out`` whether the request's total timeout ran out."""

    def __init__(self, message: str, before_response: bool, connect_failed: bool = False,
                 timed_out: bool = False) -> None:
        super().__init__(message)
        self.before_response = before_response
        self.connect_failed = connect_failed
        self.timed_out = timed_out
