"""What a database driver's error means for a store operation: rolled back
and worth retrying, a schema problem, refused (not applied), timed out or
lost (outcome unknown), per backend (SQLite's messages, PostgreSQL's
SQLSTATE, MySQL's error numbers)."""

from __future__ import annotations

from sqlalchemy import exc as sa_exc


def orig(exc: BaseException) -> BaseException:
    """The driver's own exception under SQLAlchemy's wrapper (``exc`` when there is none)."""
    return getattr(exc, "orig", None) or exc


def classify(backend: str, exc: sa_exc.DBAPIError) -> str:
    """'retry' (rolled back, try again), 'schema', 'refused' (the server
    answered with an error: not applied), 'timeout' (no answer within
    io_timeout: unknown, and not worth retrying) or 'lost' (no answer:
    unknown).  PostgreSQL's client-side deadline is recognised by the
    caller (the watchdog marks the attempt), and reported as 'timeout'."""
    err = orig(exc)
    text = str(err).lower()
    if backend == "sqlite":
        if "locked" in text or "busy" in text:
            return "retry"
        if "no such table" in text or "no such column" in text or "has no column" in text:
            return "schema"
        if "i/o error" in text or "malformed" in text or "disk is full" in text:
            return "lost"
        return "refused"
    if backend == "postgresql":
        code = getattr(err, "sqlstate", None)
        if code in ("40P01", "40001", "55P03"):
            return "retry"
        if code in ("42P01", "42703"):
            return "schema"
        if code == "57014":
            # query_canceled: statement_timeout (or a cancel request) stopped the
            # statement; in autocommit it was rolled back, so a write was not applied
            return "refused"
        # 08xxx connection exceptions and 57Pxx (server shutting down, connection
        # terminated): the statement may have committed before the connection died
        return "lost" if code is None or code.startswith("08") or code.startswith("57P") else "refused"
    code = err.args[0] if getattr(err, "args", None) and isinstance(err.args[0], int) else None
    if code in (1213, 1205):
        return "retry"
    if code in (1146, 1054):
        return "schema"
    if code == 2013 and "timed out" in text:  # pymysql's read_timeout/write_timeout (= io_timeout)
        return "timeout"
    return "refused" if code is not None and 0 < code < 2000 else "lost"
