"""Tessera's typed errors as the Lance Namespace's (the code travels to pylance and over REST)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from lance_namespace import errors as nserr

from tessera.commit.errors import (
    CommitConflictError,
    CommitError,
    CoordinatorMismatchError,
    ServedCommitRequestError,
    StagedManifestError,
    TableNotFoundError,
    VersionNotFoundError,
)
from tessera.format.errors import FormatError
from tessera.stores.errors import IncarnationMismatchError, StoreError

from .. import errors as E


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Tessera's typed errors as the namespace's (the code travels to pylance and over REST)."""
    try:
        yield
    except nserr.LanceNamespaceError:
        raise
    except E.NoSuchTableError as exc:
        raise nserr.TableNotFoundError(str(exc)) from exc
    except TableNotFoundError as exc:
        raise nserr.TableNotFoundError(str(exc)) from exc
    except VersionNotFoundError as exc:
        raise nserr.TableVersionNotFoundError(str(exc)) from exc
    except E.TableExistsError as exc:
        raise nserr.TableAlreadyExistsError(str(exc)) from exc
    except E.NamespaceNotFoundError as exc:
        raise nserr.NamespaceNotFoundError(str(exc)) from exc
    except E.NamespaceExistsError as exc:
        raise nserr.NamespaceAlreadyExistsError(str(exc)) from exc
    except E.NamespaceNotEmptyError as exc:
        raise nserr.NamespaceNotEmptyError(str(exc)) from exc
    except E.TagError as exc:
        text = str(exc)
        if "already exists" in text:
            raise nserr.TableTagAlreadyExistsError(text) from exc
        if text.startswith("tag ") and "does not exist" in text:
            raise nserr.TableTagNotFoundError(text) from exc
        raise nserr.InvalidInputError(text) from exc
    except (E.InvalidNameError, E.InvalidArgumentError, StagedManifestError, ServedCommitRequestError) as exc:
        raise nserr.InvalidInputError(str(exc)) from exc
    except CommitConflictError as exc:
        raise nserr.ConcurrentModificationError(str(exc)) from exc
    except (CoordinatorMismatchError, IncarnationMismatchError) as exc:
        raise nserr.InvalidTableStateError(str(exc)) from exc
    except FormatError as exc:
        raise nserr.InvalidInputError(str(exc)) from exc
    except (StoreError, CommitError) as exc:
        raise nserr.ServiceUnavailableError(str(exc)) from exc


def namespace_error(exc: BaseException) -> nserr.LanceNamespaceError | None:
    """The namespace's error that :func:`translated` makes of ``exc`` (None: none)."""
    try:
        with translated():
            raise exc
    except nserr.LanceNamespaceError as out:
        return out
    except BaseException:  # noqa: BLE001 - not one the namespace names
        return None
