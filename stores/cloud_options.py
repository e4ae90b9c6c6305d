"""``storage_options`` of Google Cloud Storage and Azure Blob tables, validated
into :class:`GCSOptions` and :class:`AzureOptions`.

Keys are case-insensitive and accept the spellings Lance and the Rust
``object_store`` crate use (``google_service_account``,
``azure_storage_account_name``, ...), so a pylance ``storage_options`` dict
works unchanged.  An unknown key is InvalidStorageOptionError.

GCS: ``service_account`` [``google_service_account``,
``google_service_account_path``, ``service_account_path``,
``google_application_credentials``] (a key file's path),
``service_account_key`` [``google_service_account_key``] (the key's JSON),
``project`` [``google_project_id``, ``project_id``], ``endpoint_url``
[``endpoint``, ``google_endpoint``] (an emulator, or a private endpoint; a
key's ``gcs_base_url`` too, and its ``"disable_oauth": true`` means no
credentials, as in the Rust ``object_store``),
``skip_signature`` [``google_skip_signature``, ``anonymous``] (send no
credentials: public buckets, emulators).  Without credentials the
application-default ones are used (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud,
the metadata server).

Azure: ``account_name`` [``azure_storage_account_name``, ``account``],
``account_key`` [``azure_storage_account_key``, ``azure_storage_access_key``,
``access_key``], ``sas_token`` [``azure_storage_sas_token``,
``azure_storage_sas_key``, ``sas_key``], ``connection_string``
[``azure_storage_connection_string``], ``endpoint_url`` [``endpoint``,
``azure_storage_endpoint``] (the blob endpoint; an emulator's includes the
account: ``http://127.0.0.1:10000/devstoreaccount1``), ``use_emulator``
[``azure_storage_use_emulator``] (Azurite's well-known account, at
``endpoint_url`` or ``http://127.0.0.1:10000``).  Without a key, SAS token or
connection string, ``azure-identity``'s ``DefaultAzureCredential`` is used
when that package is installed.

Both: ``allow_http`` (a bare-host endpoint gets ``http://``; ``false``
refuses a plain-http one), ``connect_timeout`` and ``io_timeout`` [``read_timeout``, ``timeout``]
(seconds, or ``"5s"``/``"500ms"``), ``max_retries`` (how often the SDK repeats
a failed idempotent request; conditional creates are never repeated by the
SDK, see :mod:`stores.cloud_io`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidStorageOptionError
from .s3_options import _as_bool, _as_count, _as_seconds, _canonical, _endpoint

_COMMON: dict[str, str] = {
    "allow_http": "allow_http",
    "connect_timeout": "connect_timeout",
    "io_timeout": "read_timeout",
    "read_timeout": "read_timeout",
    "timeout": "read_timeout",
    "max_retries": "max_retries",
}
_GCS: dict[str, str] = {
    **_COMMON,
    "service_account": "service_account",
    "google_service_account": "service_account",
    "google_service_account_path": "service_account",
    "service_account_path": "service_account",
    "google_application_credentials": "service_account",
    "service_account_key": "service_account_key",
    "google_service_account_key": "service_account_key",
    "project": "project",
    "project_id": "project",
    "google_project_id": "project",
    "endpoint_url": "endpoint_url",
    "endpoint": "endpoint_url",
    "google_endpoint": "endpoint_url",
    "skip_signature": "skip_signature",
    "google_skip_signature": "skip_signature",
    "anonymous": "skip_signature",
}
_AZURE: dict[str, str] = {
    **_COMMON,
    "account_name": "account_name",
    "account": "account_name",
    "azure_storage_account_name": "account_name",
    "account_key": "account_key",
    "access_key": "account_key",
    "azure_storage_account_key": "account_key",
    "azure_storage_access_key": "account_key",
    "sas_token": "sas_token",
    "sas_key": "sas_token",
    "azure_storage_sas_token": "sas_token",
    "azure_storage_sas_key": "sas_token",
    "connection_string": "connection_string",
    "azure_storage_connection_string": "connection_string",
    "endpoint_url": "endpoint_url",
    "endpoint": "endpoint_url",
    "azure_storage_endpoint": "endpoint_url",
    "use_emulator": "use_emulator",
    "azure_storage_use_emulator": "use_emulator",
}
_CONVERT: dict[str, Callable[[str, Any], Any]] = {
    "connect_timeout": _as_seconds,
    "read_timeout": _as_seconds,
    "max_retries": lambda k, v: _as_count(k, v, 0),
    "skip_signature": _as_bool,
    "use_emulator": _as_bool,
    "allow_http": _as_bool,
}

#: Azurite's well-known development account (public, in Microsoft's documentation)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass(frozen=True)
class GCSOptions:
    """Resolved GCS settings; ``None`` means "let google-cloud-storage decide"."""

    service_account: str | None = None
    service_account_key: str | None = None
    project: str | None = None
    endpoint_url: str | None = None
    skip_signature: bool = False
    connect_timeout: float | None = None
    read_timeout: float | None = None
    max_retries: int | None = None

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> GCSOptions:
        """Validate ``storage_options``; unknown keys raise InvalidStorageOptionError."""
        values = _canonical(options, _GCS, "GCS", _CONVERT)
        if "service_account" in values and "service_account_key" in values:
            raise InvalidStorageOptionError("give service_account (a path) or service_account_key (JSON), not both")
        if values.get("skip_signature") and ("service_account" in values or "service_account_key" in values):
            raise InvalidStorageOptionError("skip_signature sends no credentials: drop the service account")
        allow_http = values.pop("allow_http", None)
        if "endpoint_url" in values:
            values["endpoint_url"] = _endpoint(values["endpoint_url"], allow_http)
        return cls(**values)

    @property
    def timeout(self) -> tuple[float, float]:
        """(connect, read) seconds for every request (google-cloud-storage's 60 s when not given)."""
        return (self.connect_timeout or 60.0, self.read_timeout or 60.0)


@dataclass(frozen=True)
class AzureOptions:
    """Resolved Azure Blob settings; ``None`` means "let azure-storage-blob decide"."""

    account_name: str | None = None
    account_key: str | None = None
    sas_token: str | None = None
    connection_string: str | None = None
    endpoint_url: str | None = None
    use_emulator: bool = False
    connect_timeout: float | None = None
    read_timeout: float | None = None
    max_retries: int | None = None

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> AzureOptions:
        """Validate ``storage_options``; unknown keys raise InvalidStorageOptionError."""
        values = _canonical(options, _AZURE, "Azure", _CONVERT)
        if "connection_string" in values and {"account_key", "sas_token", "endpoint_url"} & set(values):
            raise InvalidStorageOptionError(
                "connection_string already names the endpoint and credentials: drop account_key, sas_token, endpoint"
            )
        if "account_key" in values and "sas_token" in values:
            raise InvalidStorageOptionError("give account_key or sas_token, not both")
        if values.get("use_emulator"):
            values.setdefault("account_name", AZURITE_ACCOUNT)
            if "sas_token" not in values:
                values.setdefault("account_key", AZURITE_KEY)
            values.setdefault("endpoint_url", f"http://127.0.0.1:10000/{values['account_name']}")
        allow_http = values.pop("allow_http", None)
        if "endpoint_url" in values:
            values["endpoint_url"] = _endpoint(values["endpoint_url"], allow_http)
        return cls(**values)
