"""Tessera's errors as a Spark job reports them.

A Tessera error raised where Spark runs the data source's code (planning
workers for ``schema()``/``reader()``/``writer()``/``commit()``, executor
workers for ``read()``/``write()``) reaches the user's process as text inside
a PySpark exception (checked on PySpark 4.3.0)::

    AnalysisException: [PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance:
    Traceback (most recent call last):
      File ".../catalog/spark/__init__.py", line 336, in schema
      ... (7 to 17 lines of the worker's traceback)
    tessera.catalog.errors.SparkOptionError: unknown option 'verison' ... SQLSTATE: 38000

    PythonException: An exception was thrown from the Python worker:
    Traceback (most recent call last): ...
    tessera.catalog.errors.ReplaceWhereMismatchError: ...

Spark writes the first line itself in both cases (the condition's template,
or ``PythonException.__str__``'s fixed heading), so nothing a worker does can
put the Tessera error there.  Two things together do:

* **In the workers** (:func:`reported`, on every method Spark calls): a
  :class:`TesseraError` leaving the data source is reported without the
  worker's traceback, as Spark's own
  ``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` would report it,
  but for Tessera's errors only and without a session-wide setting: the
  worker process sets ``SPARK_HIDE_TRACEBACK``, which PySpark's worker reads
  when it formats the exception it is about to report, and then exits (a
  worker that reported an error is never reused), so no other code ever sees
  the setting.  A typed Tessera error's message says what went wrong and what
  to do; its traceback inside Tessera is noise to the job's author.  With
  ``spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled=false``
  (Spark's setting for full worker tracebacks) the traceback is kept.
  Errors that are not Tessera's (bugs) always keep their traceback.
* **In the driver** (:func:`install`, called by
  :func:`tessera.catalog.spark.register`): PySpark turns every JVM exception
  into a Python one in ``pyspark.errors.exceptions.captured.convert_exception``;
  wrapped, an exception whose text ends with a Tessera error becomes an
  instance of a subclass of *both* the PySpark class (``AnalysisException``,
  ``PythonException``...: everything catching those still does) and the
  Tessera error class (``except SchemaMismatchError`` works on the driver),
  whose ``str()`` starts with ``tessera.errors.SchemaMismatchError: <message>``
  followed by Spark's own text.  Other exceptions are left exactly as they were.

:func:`unwrap` rebuilds the Tessera error from any PySpark exception (or
``Py4JJavaError``) that carries one, whether or not :func:`install` ran: the
class named in the text, looked up in :mod:`tessera.errors` (or a
``tessera`` module already imported; nothing is imported on the text's
word), with the message.  Attributes a constructor sets (``version`` of a
``CommitConflictError``) are not restored.

Spark Connect clients convert the server's errors elsewhere, which is not
wrapped (nor tried): the workers' side applies there too, and :func:`unwrap`
reads whatever text the exception carries.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from tessera.catalog.errors import TesseraError

F = TypeVar("F", bound=Callable[..., Any])

#: set in a Python worker's environment by Spark when simplified tracebacks are on (the default)
_SIMPLIFIED = "SPARK_SIMPLIFIED_TRACEBACK"
#: read by PySpark's worker when it formats the exception it reports (``pyspark.util.handle_worker_exception``)
_HIDE = "SPARK_HIDE_TRACEBACK"


def _in_spark_worker() -> bool:
    """True in a Python worker Spark started (planning or executor), not in
    the user's process (where the variable would reach workers started later)."""
    return os.environ.get("SPARK_PYTHON_RUNTIME") == "PYTHON_WORKER"


def _hide_worker_traceback() -> None:
    """Have this worker report the exception it is raising without its
    traceback (see the module docs); nothing outside a Spark worker."""
    if _in_spark_worker() and os.environ.get(_SIMPLIFIED):
        os.environ[_HIDE] = "1"


def reported(method: F) -> F:
    """Decorate a method Spark calls in a worker: a :class:`TesseraError` it
    raises is reported by the worker as its class and message only (see the
    module docs).  Works for plain methods and generator methods."""
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def gen_wrapper(*args, **kwargs):
            try:
                return (yield from method(*args, **kwargs))
            except TesseraError:
                _hide_worker_traceback()
                raise

        return cast(F, gen_wrapper)

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except TesseraError:
            _hide_worker_traceback()
            raise

    return cast(F, wrapper)


# -- reading a Tessera error back from Spark's text ------------------------------------------------

#: ``tessera.<module>.<Class>`` at a line's start, or right after Spark's heading ("...instance: ")
_ERROR_LINE = re.compile(r"(?:^|(?<=: ))(tessera(?:\.[A-Za-z_]\w*)+)\.([A-Z]\w*)(?::[ ]?|[ ]*$)", re.M)
#: what Spark appends after the worker's text: SQLSTATE, query context, a JVM stack
_SPARK_TAIL = re.compile(
    r"\n\s*(?:SQLSTATE: |JVM stacktrace:|== SQL|== DataFrame|at [\w$.<>]+\()|[ \t]+SQLSTATE: \w{5}\s*$"
)
#: a later exception in the text: the Tessera error was only its cause or context
_LATER = ("Traceback (most recent call last):", "During handling of the above exception", "The above exception was")


@dataclass(frozen=True)
class FoundError:
    """A Tessera error named in a Spark exception's text."""

    cls: type[TesseraError]
    message: str
    #: the class as the text names it (where it is defined: ``tessera.catalog.errors.SparkOptionError``)
    named: str = ""

    @property
    def name(self) -> str:
        """The class as users import it: ``tessera.errors.X`` where it is exported there."""
        import tessera.errors as public

        if getattr(public, self.cls.__name__, None) is self.cls:
            return f"tessera.errors.{self.cls.__name__}"
        return f"{self.cls.__module__}.{self.cls.__qualname__}"

    def rebuild(self) -> TesseraError:
        """An instance of the class with the message (the constructor's other attributes are not restored)."""
        try:
            exc = self.cls(self.message)
            if str(exc) == self.message:
                return exc
        except Exception:  # noqa: BLE001 - a constructor taking other arguments: bypass it
            pass
        exc = self.cls.__new__(self.cls)
        exc.args = (self.message,)
        return exc


def _error_class(module: str, name: str) -> type[TesseraError] | None:
    """The Tessera error class ``module.name``: from :mod:`tessera.errors`, or
    from ``module`` if it is already imported (nothing is imported here)."""
    import tessera.errors as public

    for candidate in (getattr(sys.modules.get(module), name, None), getattr(public, name, None)):
        if isinstance(candidate, type) and issubclass(candidate, TesseraError):
            return candidate
    return None


def find_error(text: str) -> FoundError | None:
    """The Tessera error a Spark exception's text (``str(exc)``) ends with:
    the last ``tessera.<module>.<Class>: message`` line that no other
    exception follows, with its message (up to what Spark appends: SQLSTATE,
    query context, JVM stack); None when there is none."""
    text = text.split("\n\nJVM stacktrace:", 1)[0]
    matches = list(_ERROR_LINE.finditer(text))
    if not matches:
        return None
    last = matches[-1]
    rest = text[last.end() :]
    if any(marker in rest for marker in _LATER):
        return None
    cls = _error_class(last.group(1), last.group(2))
    if cls is None:
        return None
    tail = _SPARK_TAIL.search(rest)
    message = (rest[: tail.start()] if tail else rest).strip()
    return FoundError(cls, message, f"{last.group(1)}.{last.group(2)}")


def unwrap(exc: BaseException) -> TesseraError | None:
    """The Tessera error a PySpark exception carries, rebuilt on the driver
    (its class and message), or None when it carries none::

        try:
            df.write.format("tessera").mode("append").save(uri)
        except Exception as exc:
            err = unwrap(exc)
            if isinstance(err, SchemaMismatchError):
                ...

    ``exc`` itself when it is already a Tessera error (as the driver's
    translation makes Spark's exceptions: see :func:`install`)."""
    found = getattr(exc, "_tessera_error", None)
    if isinstance(found, TesseraError):
        return found
    if isinstance(exc, TesseraError):
        return exc
    try:
        error = find_error(str(exc))
    except Exception:  # noqa: BLE001 - a PySpark exception whose str() needs a JVM that is gone
        return None
    if error is None:
        return None
    rebuilt = error.rebuild()
    rebuilt.__cause__ = exc
    return rebuilt


# -- the driver: PySpark's exceptions that carry a Tessera error -------------------------------------


class _SparkTesseraError:
    """Mixed into the class of a PySpark exception carrying a Tessera error
    (built by :func:`translate`): ``str()`` names the Tessera error first."""

    _tessera_found: FoundError
    _tessera_error: TesseraError

    def __str__(self) -> str:
        found = self._tessera_found
        spark_text = super().__str__()  # the PySpark class's, after this mixin in the MRO
        # Spark's text ends with the same error (before the JVM's stack, when that is shown):
        # name it there, the message is on the first line
        jvm = spark_text.find("\n\nJVM stacktrace:")
        head, tail = (spark_text, "") if jvm < 0 else (spark_text[:jvm], spark_text[jvm:])
        repeated = f"{found.named}: {found.message}"
        at = head.rfind(repeated)
        if found.message and at >= 0:
            head = f"{head[:at]}{found.named} (the message above){head[at + len(repeated) :]}"
        spark_text = head + tail
        return f"{found.name}: {found.message}\n{spark_text}"


_CLASSES: dict[tuple[type, type], type[BaseException]] = {}
_CLASSES_LOCK = threading.Lock()


def _combined(spark_cls: type[BaseException], tessera_cls: type[TesseraError]) -> type[BaseException]:
    with _CLASSES_LOCK:
        cls = _CLASSES.get((spark_cls, tessera_cls))
        if cls is None:
            cls = type(
                spark_cls.__name__,
                (_SparkTesseraError, spark_cls, tessera_cls),
                {
                    "__module__": __name__,
                    "__qualname__": spark_cls.__qualname__,
                    "__doc__": f"PySpark's {spark_cls.__name__} carrying a {tessera_cls.__name__} "
                    "(an instance of both; see tessera.catalog.spark.errors).",
                },
            )
            _CLASSES[(spark_cls, tessera_cls)] = cls
        return cls


def translate(exc: BaseException) -> BaseException:
    """``exc`` (a PySpark exception) as an instance of both its class and the
    Tessera error its text ends with, ``str()`` starting with that error
    (``tessera.errors.SparkOptionError: unknown option ...``) followed by
    Spark's text; ``exc`` itself when it carries no Tessera error (or is
    Spark's ``UnknownException``, which PySpark re-raises as the original
    ``Py4JJavaError``)."""
    if isinstance(exc, (_SparkTesseraError, TesseraError)) or type(exc).__name__ == "UnknownException":
        return exc
    found = find_error(str(exc))
    if found is None:
        return exc
    cls = _combined(type(exc), found.cls)
    new: Any = cls.__new__(cls)
    new.__dict__.update(exc.__dict__)
    new.args = exc.args
    new._tessera_found = found
    new._tessera_error = found.rebuild()
    return new.with_traceback(exc.__traceback__)


def _translating(convert: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(convert)
    def convert_exception(*args, **kwargs):
        converted = convert(*args, **kwargs)
        try:
            return translate(converted)
        except Exception:  # noqa: BLE001 - never make an error worse: Spark's exception as it was
            return converted

    convert_exception._tessera_wraps = convert  # type: ignore[attr-defined]
    return convert_exception


def install() -> bool:
    """Translate, in this process, PySpark exceptions that carry a Tessera
    error (:func:`translate`): wraps
    ``pyspark.errors.exceptions.captured.convert_exception``, through which
    classic (py4j) PySpark turns every JVM exception into a Python one.
    Idempotent; False when this PySpark has no such function (nothing done)."""
    try:
        from pyspark.errors.exceptions import captured
    except ImportError:  # pragma: no cover - pyspark is an optional dependency
        return False
    current = getattr(captured, "convert_exception", None)
    if current is None:
        return False
    if getattr(current, "_tessera_wraps", None) is None:
        captured.convert_exception = _translating(current)
    return True


def uninstall() -> None:
    """Undo :func:`install` (PySpark's exceptions reach the user as Spark made them)."""
    from pyspark.errors.exceptions import captured

    original = getattr(captured.convert_exception, "_tessera_wraps", None)
    if original is not None:
        captured.convert_exception = original


__all__ = ["FoundError", "find_error", "install", "reported", "translate", "uninstall", "unwrap"]
