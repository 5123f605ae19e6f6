"""The peers' side of the comparison: the same no-op workload through pgqueuer or procrastinate.

This file runs in the SEPARATE benchmark virtualenv (``.venv-bench/``, made by ``peers.ensure_env``), never in the
project's: it imports only the standard library, the peer under test and its driver. ``peers.py`` calls it as

    .venv-bench/bin/python load/peers/peer_runner.py SYSTEM MODE --url URL [...]

and reads one JSON object from its stdout. Each run spawns its worker processes (this file again, ``worker``
mode), produces the load in this process, waits for the queue to empty, stops the workers with SIGTERM and
reads back what their handlers recorded: for every job, when it was due and when its handler started.

Modes (all bounded in time and count):
  lag       RATE jobs/s enqueued at their due time for SECONDS; fire lag = handler start - due time
  saturate  the queue kept >= SATURATE_DEPTH deep for SECONDS; executions/s
  drain     BACKLOG jobs enqueued in one statement while the workers idle; executions/s until empty

Both peers get their most favourable path: jobs are enqueued when due (LISTEN/NOTIFY wakes the workers), not
scheduled ahead -- procrastinate polls scheduled jobs only every few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PRODUCER_TICK_SECONDS = 0.005
SATURATE_DEPTH = 2_000
SATURATE_CHUNK = 1_000
WORKER_START_SECONDS = 3.0
EMPTY_TIMEOUT_SECONDS = 300.0


# -- one module per peer: install, enqueue, depth, run a worker -------------------------------------------------
class PgQueuer:
    name = "pgqueuer"

    def __init__(self, url: str):
        self.url = url

    async def connect(self):
        import asyncpg
        from pgqueuer import Queries
        from pgqueuer.db import AsyncpgDriver

        self.conn = await asyncpg.connect(self.url)
        self.queries = Queries(AsyncpgDriver(self.conn))

    async def install(self) -> None:
        await self.queries.install()

    async def enqueue(self, due: list[float]) -> None:
        n = len(due)
        await self.queries.enqueue(["noop"] * n, [repr(d).encode() for d in due], [0] * n)

    async def depth(self) -> int:
        return await self.conn.fetchval("SELECT count(*) FROM pgqueuer")

    async def work(self, batch: int, concurrency: int, record) -> None:
        from datetime import timedelta

        import asyncpg
        from pgqueuer import Queries, QueueManager
        from pgqueuer.db import AsyncpgDriver

        conn = await asyncpg.connect(self.url)
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint("noop")
        async def noop(job) -> None:
            record(float(job.payload.decode()))

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, qm.shutdown.set)
        await qm.run(batch_size=batch, dequeue_timeout=timedelta(seconds=1))


class Procrastinate:
    name = "procrastinate"

    def __init__(self, url: str):
        import procrastinate

        self.app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
        self.recorder = None

        @self.app.task(name="noop")
        def noop(due: float) -> None:
            self.recorder(due)

        self.task = noop

    async def connect(self):
        await self.app.open_async()

    async def install(self) -> None:
        await self.app.schema_manager.apply_schema_async()

    async def enqueue(self, due: list[float]) -> None:
        await self.task.batch_defer_async(*({"due": d} for d in due))

    async def depth(self) -> int:
        rows = await self.app.connector.execute_query_all_async(
            "SELECT count(*) AS n FROM procrastinate_jobs WHERE status IN ('todo', 'doing')")
        return rows[0]["n"]

    async def work(self, batch: int, concurrency: int, record) -> None:
        self.recorder = record
        # SIGTERM: procrastinate's own handlers stop the worker gracefully.
        await self.app.run_worker_async(concurrency=concurrency, wait=True)


PEERS = {"pgqueuer": PgQueuer, "procrastinate": Procrastinate}


# -- worker process ---------------------------------------------------------------------------------------------
def run_worker(system: str, url: str, batch: int, concurrency: int, out: Path) -> None:
    records: list[tuple[float, float]] = []  # (due, handler start), wall clock of this host

    def record(due: float) -> None:
        records.append((due, time.time()))

    async def main() -> None:
        peer = PEERS[system](url)
        await peer.connect()
        await peer.work(batch, concurrency, record)

    wall0, cpu0 = time.monotonic(), time.process_time()
    asyncio.run(main())
    out.write_text(json.dumps({"records": records, "cpu_seconds": time.process_time() - cpu0,
                               "wall_seconds": time.monotonic() - wall0}))


# -- orchestration (one measurement) ------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def produce(peer, args) -> tuple[float, float]:
    """Returns (start, end) of the offered window, wall clock."""
    if args.mode == "drain":
        due = [time.time()] * args.backlog
        await peer.enqueue(due)  # one statement, one commit: the backlog appears at once
        start = time.time()
        return start, start
    start = time.time()
    end = start + args.seconds
    sent = 0
    total = int(args.rate * args.seconds)
    while time.time() < end:
        if args.mode == "lag":
            now = time.time()
            want = min(total, int((now - start) * args.rate))
            if want > sent:
                await peer.enqueue([start + i / args.rate for i in range(sent, want)])
                sent = want
            await asyncio.sleep(PRODUCER_TICK_SECONDS)
        else:  # saturate
            if await peer.depth() < SATURATE_DEPTH:
                now = time.time()
                await peer.enqueue([now] * SATURATE_CHUNK)
            await asyncio.sleep(PRODUCER_TICK_SECONDS)
    if args.mode == "lag" and sent < total:  # the last tick's share
        await peer.enqueue([start + i / args.rate for i in range(sent, total)])
    return start, end


async def wait_empty(peer, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if await peer.depth() == 0:
            return True
        await asyncio.sleep(0.1)
    return False


def measure(args) -> dict:
    peer = PEERS[args.system](args.url)
    workdir = Path(tempfile.mkdtemp(prefix=f"d2peer-{args.system}-"))

    async def setup() -> None:
        await peer.connect()
        await peer.install()

    asyncio.run(setup())
    workers = []
    for i in range(args.workers):
        out = workdir / f"worker-{i}.json"
        cmd = [sys.executable, __file__, args.system, "worker", "--url", args.url, "--batch", str(args.batch),
               "--concurrency", str(args.concurrency), "--out", str(out)]
        workers.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(workdir / f"worker-{i}.log", "wb"),
                                         start_new_session=True), out))
    time.sleep(WORKER_START_SECONDS)

    async def drive() -> tuple[float, float, bool]:
        await peer.connect()
        start, end = await produce(peer, args)
        emptied = await wait_empty(peer, EMPTY_TIMEOUT_SECONDS)
        return start, end, emptied

    start, end, emptied = asyncio.run(drive())
    for popen, _ in workers:
        popen.send_signal(signal.SIGTERM)
    records, cpu = [], 0.0
    for popen, out in workers:
        try:
            popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            popen.kill()
        if out.exists():
            data = json.loads(out.read_text())
            records += data["records"]
            cpu += data["cpu_seconds"]
    result = {"system": args.system, "mode": args.mode, "workers": args.workers, "batch": args.batch,
              "concurrency": args.concurrency, "emptied": emptied, "executions": len(records),
              "worker_cpu_seconds": round(cpu, 2)}
    starts = [s for _, s in records]
    if args.mode == "drain":
        seconds = max(starts) - start if starts else float("nan")
        result.update(backlog=args.backlog, seconds=round(seconds, 2),
                      executions_per_second=round(len(records) / seconds, 1) if starts else 0.0,
                      lost=args.backlog - len(records))
    elif args.mode == "saturate":
        steady = [s for s in starts if start + 2 <= s < end]
        result.update(seconds=args.seconds, executions_per_second=round(len(steady) / (args.seconds - 2), 1))
    else:
        lags = [(s - d) * 1000 for d, s in records]
        result.update(offered_per_second=args.rate, seconds=args.seconds,
                      executions_per_second=round(len(records) / args.seconds, 1),
                      lost=int(args.rate * args.seconds) - len(records),
                      fire_lag_ms={"p50": _r(percentile(lags, 0.5)), "p95": _r(percentile(lags, 0.95)),
                                   "p99": _r(percentile(lags, 0.99)), "max": _r(max(lags, default=None))},
                      fire_lag_ms_mean=_r(statistics.fmean(lags)) if lags else None)
    return result


def _r(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("system", choices=sorted(PEERS))
    parser.add_argument("mode", choices=["lag", "saturate", "drain", "worker"])
    parser.add_argument("--url", required=True, help="PostgreSQL URL of a scratch database")
    parser.add_argument("--rate", type=float, default=833.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--backlog", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--batch", type=int, default=10, help="jobs per dequeue (pgqueuer)")
    parser.add_argument("--concurrency", type=int, default=32, help="concurrent jobs per worker (procrastinate)")
    parser.add_argument("--out", type=Path, help="worker mode: where to write what the handlers recorded")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if args.mode == "worker":
        run_worker(args.system, args.url, args.batch, args.concurrency, args.out)
    else:
        print(json.dumps(measure(args)))


if __name__ == "__main__":
    main()
