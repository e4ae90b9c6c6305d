"""Spark Structured Streaming into a Tessera table, exactly once.

``df.writeStream.format("tessera").option("checkpointLocation", ...)`` commits
each micro-batch as one version (an append; an overwrite in ``complete``
output mode), through :class:`tessera.catalog.spark.write.TesseraWriter`: the
tasks write data files, the driver commits them.  Each commit is an
idempotent write (:mod:`tessera.commit.app_txn`): application id the
query's (``spark-query-<id>``, the id Spark keeps in the checkpoint's
``metadata`` file, the same across restarts; or the ``txnAppId`` option),
version the batch id.  A batch Spark runs again after a crash (its commit
not yet in the checkpoint) finds its write already in the table and commits
nothing, and its files are removed: every batch is in the table exactly once.

A checkpoint the driver cannot read as a local path (``file:`` or a plain
path) needs ``txnAppId``, or the sink refuses to start (a query id Tessera
cannot read would make every restart a new application).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterator
from urllib.parse import urlparse

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from tessera.catalog.errors import SparkOptionError

from .errors import reported
from .write import TesseraCommitMessage, TesseraWriter, WritePlan

log = logging.getLogger(__name__)

__all__ = ["TesseraStreamWriter", "query_app_id", "stream_writer"]


def stream_writer(location, schema, overwrite: bool, options) -> TesseraStreamWriter:
    """The sink of a streaming query: a write planned as a batch job's, its
    idempotent write named per batch (``txnAppId`` alone names the query;
    ``txnVersion`` is the batch id, and is refused here)."""
    from .write import plan_write, write_options

    opts = write_options(options)
    if opts.get("txnVersion") is not None:
        raise SparkOptionError("a streaming write takes txnAppId only: each micro-batch's id is its txnVersion")
    app_id = opts.get("txnAppId")
    if app_id is not None:
        from tessera.commit import InvalidAppTransactionError, check_app_transaction

        try:
            check_app_transaction(app_id, 0)
        except InvalidAppTransactionError as exc:
            raise SparkOptionError(f"option txnAppId: {exc}") from None
    rest = {k: v for k, v in options.items() if k.lower() not in ("txnappid",)}
    plan = plan_write(location, schema, overwrite, rest).plan
    return TesseraStreamWriter(plan, opts.get("checkpointLocation"), app_id)


def query_app_id(checkpoint: str | None) -> str:
    """``spark-query-<id>`` for the query whose checkpoint is ``checkpoint``."""
    if not checkpoint:
        raise SparkOptionError("a streaming write to tessera needs option checkpointLocation (or txnAppId)")
    parsed = urlparse(checkpoint)
    if parsed.scheme not in ("", "file"):
        raise SparkOptionError(
            f"the checkpoint {checkpoint} is not on a local path the driver can read: give option txnAppId "
            "(a name of the query, the same across its restarts) to write exactly once"
        )
    path = os.path.join(parsed.path if parsed.scheme else checkpoint, "metadata")
    try:
        with open(path, encoding="utf-8") as f:
            query = json.load(f)["id"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SparkOptionError(f"cannot read the streaming query's id from {path}: {exc}") from None
    return f"spark-query-{query}"


class TesseraStreamWriter(DataSourceStreamArrowWriter):
    """Writes each micro-batch's rows in tasks; commits each batch once."""

    def __init__(self, plan: WritePlan, checkpoint: str | None, app_id: str | None) -> None:
        self.plan = plan
        self.checkpoint = checkpoint
        self.app_id = app_id

    @reported
    def write(self, iterator: Iterator[pa.RecordBatch]) -> TesseraCommitMessage:
        return TesseraWriter(self.plan).write(iterator)

    def _batch_writer(self, batch_id: int) -> TesseraWriter:
        from tessera.commit.errors import TableNotFoundError
        from tessera.stores.registry import open_object_store

        app_id = self.app_id or query_app_id(self.checkpoint)
        p = self.plan
        try:  # each batch builds on the latest version (the one planned at the query's start is long gone)
            base: int | None = p.handler().load(open_object_store(p.uri, p.storage_options)).version
        except TableNotFoundError:  # no table yet: the batch creates it
            base = None
        return TesseraWriter(dataclasses.replace(p, app=(app_id, batch_id), base_version=base))

    @reported
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        self._batch_writer(batchId).commit(messages)

    @reported
    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        TesseraWriter(self.plan).abort(messages)
