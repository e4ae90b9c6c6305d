"""A local stack for development and CI.

Starts moto's server (S3 and DynamoDB) on 127.0.0.1, checks that Redis and
PostgreSQL answer (and MariaDB when asked), prints the settings to use, and
stops what it started when interrupted (or at once with ``--check``).

    python deploy/local_stack.py              # run until Ctrl-C
    python deploy/local_stack.py --check      # start, verify, stop
"""

from __future__ import annotations

import argparse
import socket
import sys
import time


def _answers(host: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class LocalStack:
    """moto for S3/DynamoDB plus checks of the services the machine runs."""

    def __init__(
        self,
        moto_port: int = 0,
        redis_url: str = "redis://127.0.0.1:6379/0",
        postgres_url: str = "postgresql+psycopg://postgres@127.0.0.1:5432/test",
        mysql_url: str | None = None,
    ) -> None:
        self.moto_port = moto_port
        self.redis_url, self.postgres_url, self.mysql_url = redis_url, postgres_url, mysql_url
        self._server = None
        self.endpoint = None

    def start(self) -> LocalStack:
        from moto.server import ThreadedMotoServer

        port = self.moto_port
        if not port:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self._server.start()
        self.endpoint = f"http://127.0.0.1:{port}"
        deadline = time.time() + 20
        while not _answers("127.0.0.1", port, 0.5):
            if time.time() > deadline:
                raise RuntimeError("moto's server did not start")
            time.sleep(0.05)
        return self

    def check(self) -> dict[str, str]:
        """{service: "ok" or the problem}."""
        import redis
        import sqlalchemy as sa

        out = {
            "moto": "ok" if self.endpoint and _answers("127.0.0.1", int(self.endpoint.rsplit(":", 1)[1])) else "down"
        }
        try:
            redis.Redis.from_url(self.redis_url, socket_connect_timeout=2).ping()
            out["redis"] = "ok"
        except Exception as exc:  # noqa: BLE001
            out["redis"] = f"not answering: {exc}"
        for name, url in (("postgres", self.postgres_url), ("mysql", self.mysql_url)):
            if not url:
                continue
            try:
                eng = sa.create_engine(url)
                with eng.connect() as c:
                    c.execute(sa.text("SELECT 1"))
                eng.dispose()
                out[name] = "ok"
            except Exception as exc:  # noqa: BLE001
                out[name] = f"not answering: {exc}"
        return out

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moto-port", type=int, default=0)
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    ap.add_argument("--mysql", default=None, help="also check a MySQL/MariaDB URL")
    ap.add_argument("--check", action="store_true", help="start, verify and stop")
    args = ap.parse_args(argv)
    with LocalStack(args.moto_port, args.redis, args.postgres, args.mysql) as stack:
        status = stack.check()
        for k, v in status.items():
            print(f"{k:9} {v}")
        print(f"S3/DynamoDB endpoint: {stack.endpoint}  (AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing)")
        bad = [k for k, v in status.items() if v != "ok"]
        if args.check:
            return 1 if bad else 0
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
