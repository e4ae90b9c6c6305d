"""Tessera's configuration file: where it is, how it is read, and the
settings that are not a catalog's.

The file is ``~/.tessera.yaml`` (or ``.yml``), ``~/.config/tessera/config.toml``,
or the one file ``TESSERA_CONFIG`` names.  Its ``catalog`` section holds named
catalogs (read by :func:`tessera.connect`); its top-level ``commit_stores``
lists manifest-store URLs (with their credentials) that tables opened by path
may commit through, and ``recorded_stores: false`` forbids following the store
address a table records (see :func:`commit_store_settings`)::

    commit_stores:
      - postgresql+psycopg://app:secret@db.internal:5432/tessera
      - redis://:secret@redis.internal:6379/0
    recorded_stores: true
"""

from __future__ import annotations

import os
import tomllib
from typing import Any

from .errors import CatalogConfigError

DEFAULT_CONFIG = os.path.join(os.path.expanduser("~"), ".config", "tessera", "config.toml")
#: environment variables overriding the file's commit-store settings
COMMIT_STORES_ENV = "TESSERA_COMMIT_STORES"
RECORDED_STORES_ENV = "TESSERA_RECORDED_STORES"
_TRUTH = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def config_files() -> tuple[list[str], bool]:
    """Config files to read, and whether the user named one (TESSERA_CONFIG)."""
    named = os.environ.get("TESSERA_CONFIG")
    if named:
        return [named], True
    home = os.path.expanduser("~")
    return [os.path.join(home, ".tessera.yaml"), os.path.join(home, ".tessera.yml"), DEFAULT_CONFIG], False


def read_config_file(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            if path.endswith((".yaml", ".yml")):
                import yaml

                data = yaml.safe_load(f) or {}
            else:
                data = tomllib.load(f)
    except FileNotFoundError:
        raise CatalogConfigError(f"TESSERA_CONFIG names {path}, which does not exist") from None
    except (OSError, ValueError) as exc:  # yaml.YAMLError and TOMLDecodeError are ValueErrors or similar
        raise CatalogConfigError(f"cannot read the catalog config {path}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - yaml's own error classes
        raise CatalogConfigError(f"cannot read the catalog config {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("catalog", {}), dict):
        raise CatalogConfigError(f"{path}: expected a mapping with a 'catalog' section of named catalogs")
    return data


def commit_store_settings() -> tuple[list[str], bool]:
    """The manifest-store URLs a table opened by path may commit through
    (``TESSERA_COMMIT_STORES``, whitespace-separated, then each config file's
    ``commit_stores`` list), and whether the store address a table records
    may be followed when none of them is its store (``TESSERA_RECORDED_STORES``,
    else the first file that sets ``recorded_stores``; default true).
    CatalogConfigError names a setting of the wrong type."""
    urls = os.environ.get(COMMIT_STORES_ENV, "").split()
    recorded: bool | None = None
    env_recorded = os.environ.get(RECORDED_STORES_ENV)
    if env_recorded is not None:
        recorded = _TRUTH.get(env_recorded.strip().lower())
        if recorded is None:
            raise CatalogConfigError(f"{RECORDED_STORES_ENV} must be true or false, got {env_recorded!r}")
    files, named = config_files()
    for path in files:
        if not named and not os.path.exists(path):
            continue
        data = read_config_file(path)
        listed = data.get("commit_stores", [])
        if not isinstance(listed, list) or not all(isinstance(u, str) and "://" in u for u in listed):
            raise CatalogConfigError(f"{path}: commit_stores must be a list of manifest-store URLs")
        urls.extend(listed)
        flag = data.get("recorded_stores")
        if flag is not None and not isinstance(flag, bool):
            raise CatalogConfigError(f"{path}: recorded_stores must be true or false, got {flag!r}")
        if recorded is None and flag is not None:
            recorded = flag
    return urls, True if recorded is None else recorded
