"""What durable turns cost: per-turn latency plain vs durable, and throughput with N workers.

Two tables, both with an instant ``FunctionModel`` (so only shipagent + DBOS + the database are
measured):

1. **Per-turn cost** — ``agent.run`` one turn at a time in one process: plain (no durable), durable
   on SQLite, durable on Postgres. In durable mode the process is also the worker, so a turn is:
   enqueue → the queue dequeues it (polling) → workflow with model and commit steps → result read
   back (polling). Mean and p50 per turn, and the overhead against plain.
2. **Throughput** — 1, 2 and 4 ``shipagent worker`` processes on Postgres; a client (an agent
   started without a worker, as ``shipagent serve --no-worker`` runs) drives 100 chats at once,
   each chat's 3 turns one after another, and waits for every result. Turns per second and the
   speed-up over one worker. (Each worker is a separate process; the machine's cores bound the
   speed-up.)

Postgres: ``SHIPAGENT_BENCH_DATABASE_URL`` (a server URL; a database per run is created on it),
else a throwaway cluster (``initdb``/``pg_ctl``, as the ``postgres`` user when root).

Table 2 also gives the CPU each part used per turn (the workers together, the client process,
the Postgres backends serving the run's database), read from ``/proc``: on a shared machine the
turns per second say how much CPU the run got, the CPU per turn says what a turn costs.

Run: ``python bench/durable.py`` (prints markdown tables). ``--turns N`` changes table 1's count;
``--workers 1,2 --repeat 3`` interleaves table 2's runs; ``--concurrency N`` is passed to the
workers; ``--skip-per-turn`` runs table 2 only.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
SHIPAGENT = str(Path(sys.executable).parent / "shipagent")


def instant_model() -> Any:
    """The ``--model-factory`` target for bench workers: answers at once, or after
    ``SHIPAGENT_BENCH_MODEL_LATENCY`` seconds (an idle wait, like a remote model's)."""
    import asyncio

    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    latency = float(os.environ.get("SHIPAGENT_BENCH_MODEL_LATENCY") or 0)

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if latency:
            await asyncio.sleep(latency)
        return ModelResponse(parts=[TextPart("ok")])

    return FunctionModel(respond, model_name="instant")


# -- Postgres --------------------------------------------------------------------------------------


@contextmanager
def postgres_server() -> Iterator[str]:
    given = os.environ.get("SHIPAGENT_BENCH_DATABASE_URL")
    if given:
        yield given
        return
    pg_ctl = shutil.which("pg_ctl") or (sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")) or [None])[-1]
    if pg_ctl is None:
        raise SystemExit("no Postgres: set SHIPAGENT_BENCH_DATABASE_URL or apt-get install postgresql")
    bindir = Path(pg_ctl).parent
    base = Path(tempfile.mkdtemp(prefix="ship-bench-pg-"))
    base.chmod(0o755)
    data = base / "data"
    data.mkdir()
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if prefix:
        shutil.chown(data, "postgres", "postgres")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run = dict(check=True, capture_output=True, timeout=120)
    subprocess.run([*prefix, str(bindir / "initdb"), "-A", "trust", "-U", "postgres", "-D", str(data)], **run)
    opts = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c max_connections=300"
    subprocess.run(
        [
            *prefix,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            opts,
            "-l",
            str(data / "log"),
            "-w",
            "start",
        ],
        **run,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], capture_output=True
        )
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def database(server: str) -> Iterator[str]:
    import psycopg

    name = f"ship_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server.rpartition('/')[0]}/{name}"
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_project(durable: str | None) -> Path:
    root = Path(tempfile.mkdtemp(prefix="ship-bench-durable-"))
    config: dict[str, Any] = {"name": "bench"}
    if durable is not None:
        config["durable"] = {"enabled": True, "database": durable}
    (root / "ship.json").write_text(json.dumps(config))
    return root


# -- table 1: per-turn cost (each mode in its own process: DBOS is one per process) ---------------


def per_turn_child(durable: str | None, turns: int) -> None:
    import anyio

    from shipagent import ShipAgent

    async def main() -> list[float]:
        agent = ShipAgent.from_project(make_project(durable), model=instant_model())
        times: list[float] = []
        async with agent:
            for i in range(turns + 5):
                start = time.perf_counter()
                result = await agent.run(f"bench:{i % 10}", f"turn {i}")
                assert result.success, result.output
                if i >= 5:  # warm-up excluded
                    times.append(time.perf_counter() - start)
        return times

    print(json.dumps(anyio.run(main)))


def per_turn(mode: str, durable: str | None, turns: int) -> list[float]:
    args = [sys.executable, __file__, "--child", mode, "--turns", str(turns)]
    if durable:
        args += ["--database", durable]
    out = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{out.stderr[-3000:]}")
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


# -- table 2: throughput with N worker processes ----------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _backends(dbname: str) -> list[int]:
    """Local Postgres backends serving ``dbname`` (their command line names the database)."""
    found = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            text = Path(cmdline).read_bytes().decode(errors="replace")
        except OSError:
            continue
        if text.startswith("postgres:") and f" {dbname} " in text:
            found.append(int(cmdline.split("/")[2]))
    return found


class CpuProbe:
    """CPU seconds used by the workers, the client (this process) and the database's backends."""

    def __init__(self, workers: list[int], dbname: str) -> None:
        self.workers, self.dbname = workers, dbname
        self.start: dict[str, float] = {}
        self.used: dict[str, float] = {}
        self._pg_start: dict[int, float] = {}

    def _now(self) -> dict[str, float]:
        return {
            "workers": sum(_cpu_seconds(pid) for pid in self.workers),
            "client": time.process_time(),
        }

    def begin(self) -> None:
        self.start = self._now()
        self._pg_start = {pid: _cpu_seconds(pid) for pid in _backends(self.dbname)}

    def end(self) -> None:
        now = self._now()
        self.used = {key: now[key] - self.start[key] for key in now}
        self.used["postgres"] = sum(
            _cpu_seconds(pid) - self._pg_start.get(pid, 0.0) for pid in _backends(self.dbname)
        )


async def _drive(project: Path, chats: int, turns: int, probe: CpuProbe) -> float:
    """The client: a ``--no-worker`` agent (as ``shipagent serve --no-worker`` runs) submits every
    chat's turns, one chat after another in order, all chats at once; seconds until the last result."""
    from shipagent import ShipAgent

    agent = ShipAgent.from_project(project, model=instant_model())
    agent.turn_executor_options = {"worker": False}

    async def chat(c: int) -> None:
        for t in range(turns):
            result = await agent.run(f"bench:{c}", f"turn {t}")
            assert result.success, result.output

    async with agent:
        probe.begin()
        start = time.perf_counter()
        async with anyio.create_task_group() as group:
            for c in range(chats):
                group.start_soon(chat, c)
        elapsed = time.perf_counter() - start
        probe.end()  # before the client's connections (and their backends) close
        return elapsed


def throughput(
    url: str, workers: int, chats: int, turns: int, concurrency: int | None = None
) -> tuple[float, dict[str, float]]:
    """Turns per second, and CPU milliseconds per turn of the workers, the client and Postgres."""
    project = make_project(url)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    logs = [open(project / f"worker-{n}.log", "w+") for n in range(workers)]  # noqa: SIM115
    procs = [
        subprocess.Popen(
            [
                SHIPAGENT,
                "worker",
                "-C",
                str(project),
                "--executor-id",
                f"bench-{n}",
                "--model-factory",
                "durable:instant_model",
                *(["--concurrency", str(concurrency)] if concurrency else []),
            ],
            stdout=logs[n],
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for n in range(workers)
    ]
    try:
        deadline = time.monotonic() + 120
        while not all(" ready on " in (project / f"worker-{n}.log").read_text() for n in range(workers)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise SystemExit("a worker did not start")
            time.sleep(0.1)
        time.sleep(1.5)  # the queue thread notices a newly registered queue within a second
        probe = CpuProbe([p.pid for p in procs], url.rpartition("/")[2])
        elapsed = anyio.run(_drive, project, chats, turns, probe)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)
        for n, log in enumerate(logs):
            log.seek(0)
            noisy = [line for line in log.read().splitlines() if "WARNING" in line or "ERROR" in line]
            if noisy:
                print(f"worker {n}: " + "\n".join(noisy[-5:]), file=sys.stderr)
            log.close()
        shutil.rmtree(project, ignore_errors=True)
    total = chats * turns
    return total / elapsed, {key: used * 1000 / total for key, used in probe.used.items()}


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--chat-turns", type=int, default=3)
    parser.add_argument("--workers", default="1,2,4", help="worker counts for table 2, in order")
    parser.add_argument("--repeat", type=int, default=1, help="run table 2's worker counts this many times")
    parser.add_argument("--concurrency", type=int, default=None, help="shipagent worker --concurrency")
    parser.add_argument("--skip-per-turn", action="store_true")
    parser.add_argument(
        "--model-latency", type=float, default=0.0, help="seconds the workers' model waits before answering"
    )
    parser.add_argument("--child")
    parser.add_argument("--database")
    args = parser.parse_args()
    if args.child:
        per_turn_child(args.database, args.turns)
        return
    print(f"machine: {os.cpu_count()} cores, load average {_load()} at start\n")
    if args.model_latency:
        os.environ["SHIPAGENT_BENCH_MODEL_LATENCY"] = str(args.model_latency)  # inherited by workers
    with postgres_server() as server:
        if not args.skip_per_turn:
            rows: list[tuple[str, list[float], str]] = [
                ("plain", per_turn("plain", None, args.turns), _load())
            ]
            rows.append(("durable, SQLite", per_turn("sqlite", "sqlite", args.turns), _load()))
            with database(server) as url:
                rows.append(("durable, Postgres", per_turn("postgres", url, args.turns), _load()))
            base = statistics.mean(rows[0][1])
            print(f"Per-turn cost, instant model, {args.turns} turns one at a time:\n")
            print("| mode | mean ms | p50 ms | overhead vs plain | load after |")
            print("|---|---:|---:|---:|---:|")
            for name, times, load in rows:
                mean = statistics.mean(times)
                extra = "—" if name == "plain" else f"+{(mean - base) * 1000:.1f} ms"
                print(
                    f"| {name} | {mean * 1000:.1f} | {statistics.median(times) * 1000:.1f} | {extra} | {load} |"
                )
        total = args.chats * args.chat_turns
        model = (
            f"model answering after {args.model_latency * 1000:.0f} ms"
            if args.model_latency
            else "instant model"
        )
        workers = f", workers --concurrency {args.concurrency}" if args.concurrency else ""
        print(
            f"\nThroughput on Postgres, {args.chats} chats × {args.chat_turns} turns ({total} turns), "
            f"{model}{workers}:\n"
        )
        print("| workers | turns/s | vs 1 worker | CPU ms/turn: workers | client | Postgres | load before |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        one = 0.0
        for _ in range(args.repeat):
            for n in (int(w) for w in args.workers.split(",")):
                load = _load()
                with database(server) as url:
                    rate, cpu = throughput(url, n, args.chats, args.chat_turns, args.concurrency)
                if n == 1:
                    one = rate
                ratio = f"{rate / one:.2f}×" if one else "—"
                print(
                    f"| {n} | {rate:.1f} | {ratio} | {cpu['workers']:.1f} | {cpu['client']:.1f} "
                    f"| {cpu['postgres']:.1f} | {load} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
