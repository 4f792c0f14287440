"""One error base for every layer. Each error carries a stable ``code`` (mapped to an HTTP status
by the server later) and a message that says what went wrong, the value, and how to fix it."""

from __future__ import annotations


class RlcockpitError(Exception):
    """Base of every error rlcockpit raises on purpose."""

    code = "error"
    http_status = 500

    def __init__(self, message: str, *, details: dict | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = dict(details or {})

    def to_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "details": self.details}


class ConfigError(RlcockpitError):
    """A configuration key is unknown, has the wrong type or is out of range."""

    code = "config_error"
    http_status = 422


class StoreError(RlcockpitError):
    """The store URI is invalid, the database cannot be opened, or a query failed."""

    code = "store_error"
    http_status = 500


class NotFoundError(RlcockpitError):
    """A run, sample, finding or other object does not exist."""

    code = "not_found"
    http_status = 404


class RewardFunctionError(RlcockpitError):
    """A user reward function cannot be imported or returned something unusable."""

    code = "reward_function_error"
    http_status = 422


class ImportFormatError(RlcockpitError):
    """A foreign log file (TRL, verl, TensorBoard...) could not be read."""

    code = "import_format_error"
    http_status = 422


class PhaseTimeoutError(RlcockpitError):
    """A trainer phase ran longer than its timeout."""

    code = "phase_timeout"
    http_status = 500


class QueryTimeoutError(RlcockpitError):
    """A read query ran past its time limit and was interrupted (the server answers 504)."""

    code = "query_timeout"
    http_status = 504


class RunLeasedError(RlcockpitError):
    """Another live process holds the run's lease: it is writing the run (docs/store.md, "One
    writer per run")."""

    code = "run_leased"
    http_status = 409
