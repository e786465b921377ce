"""Cold start-up: ``shipagent --help``, ``import shipagent``, ``import pydantic_ai``, ``shipagent run``.

Every figure is the median of ``--runs`` fresh processes (default 11), so nothing is cached in the
interpreter; the OS page cache is warm after the first run, as it is for a user typing commands.

``shipagent run`` is measured up to the moment its model request arrives: the bench serves an
OpenAI-compatible ``/v1/chat/completions`` on 127.0.0.1 that notes the arrival time and answers
"ok", and ship.json points ``llm.baseUrl`` at it — the real command, the real ``openai`` client.

Every child runs with Python's bytecode cache on (``PYTHONDONTWRITEBYTECODE`` removed from its
environment) after one warm-up process of each command, as for a user: pip compiles an installed
package's modules, and a checkout writes ``__pycache__`` on its first run. With the variable set
and no ``__pycache__`` (an editable install on a machine that exports it), every process compiles
shipagent's ~100 modules from source again — about 0.15–0.2 s of CPU that pydantic-ai, compiled
at install time, does not pay — and ``from shipagent import ShipAgent`` looked 1.4–1.55× ``import
pydantic_ai`` instead of ~1.2×.

Besides wall time the table gives CPU time (user + system of the child), which another job on a
shared machine disturbs less; the ratio to ``import pydantic_ai`` is what the target reads.

Run: ``python bench/startup.py [--runs 11]`` (prints a markdown table). ``python -X importtime -c
"from shipagent import ShipAgent" 2>&1 | sort -t'|' -k2 -n | tail`` shows where import time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

REPLY = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 0,
    "model": "bench",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


class _Model(BaseHTTPRequestHandler):
    arrivals: ClassVar[list[float]] = []

    def do_POST(self) -> None:
        _Model.arrivals.append(time.perf_counter())
        self.rfile.read(int(self.headers.get("content-length", "0")))
        body = json.dumps(REPLY).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _cli() -> list[str]:
    script = Path(sys.executable).parent / "shipagent"
    found = str(script) if script.exists() else shutil.which("shipagent")
    return [found] if found else [sys.executable, "-c", "from shipagent.hosts.cli._app import main; main()"]


def _child_env() -> dict[str, str]:
    """The environment of every measured process: the bytecode cache on (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["OPENAI_API_KEY"] = env.get("OPENAI_API_KEY", "bench")
    return env


def cold_run(argv: list[str], *, cwd: Path | None = None) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one fresh process running ``argv`` to completion."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        argv, cwd=cwd, env=_child_env(), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_to_request(runs: int) -> tuple[float, float, float]:
    """Median time from spawning ``shipagent run`` to its model request and to its exit, and its CPU."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Model)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = Path(tempfile.mkdtemp(prefix="ship-startup-"))
    llm = {
        "provider": "openai-compatible",
        "model": "bench",
        "baseUrl": f"http://127.0.0.1:{server.server_port}/v1",
    }
    (root / "ship.json").write_text(json.dumps({"name": "bench", "llm": llm}))
    to_request, to_exit, cpu = [], [], []
    env = {**_child_env(), "OPENAI_API_KEY": "bench"}
    try:
        for _ in range(runs):
            _Model.arrivals.clear()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run(
                [*_cli(), "run", "hello", "-C", str(root)], env=env, capture_output=True, text=True
            )
            end = time.perf_counter()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if done.returncode != 0 or not _Model.arrivals:
                raise SystemExit(f"shipagent run failed ({done.returncode}): {done.stderr[-2000:]}")
            to_request.append(_Model.arrivals[0] - start)
            to_exit.append(end - start)
    finally:
        server.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    return statistics.median(to_request), statistics.median(to_exit), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    py = sys.executable
    commands = {
        "baseline": [py, "-c", "pass"],
        "help": [*_cli(), "--help"],
        "ship": [py, "-c", "import shipagent"],
        "pai": [py, "-c", "import pydantic_ai"],
        "agent": [py, "-c", "from shipagent import ShipAgent"],
        "provider": [py, "-c", "import pydantic_ai.models.openai"],
    }
    # Round-robin, one process of each per round, so load drift on a shared machine hits all alike;
    # run from a temp dir so `python -c` imports the installed shipagent, not a checkout's.
    wall: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory() as cwd:
        for argv in commands.values():  # warm-up: writes the bytecode cache, fills the page cache
            cold_run(argv, cwd=Path(cwd))
        for _ in range(args.runs):
            for name, argv in commands.items():
                w, c = cold_run(argv, cwd=Path(cwd))
                wall[name].append(w)
                cpu[name].append(c)
    run_to_request(1)  # warm-up of the `shipagent run` modules
    request, exit_, run_cpu = run_to_request(args.runs)
    w = {name: statistics.median(times) for name, times in wall.items()}
    c = {name: statistics.median(times) for name, times in cpu.items()}
    load = os.getloadavg()[0]
    print(
        f"median of {args.runs} cold processes (bytecode cached); bare `python -c pass` takes "
        f"{w['baseline'] * 1000:.0f} ms; load average {load:.1f}\n"
    )
    print("| what | wall | CPU | CPU ÷ `import pydantic_ai` | target |")
    print("|---|---:|---:|---:|---|")

    def row(label: str, name: str, target: str = "") -> None:
        print(f"| {label} | {w[name]:.2f} s | {c[name]:.2f} s | {c[name] / c['pai']:.2f}× | {target} |")

    row("`shipagent --help`", "help", "≤ 0.8 s")
    row("`import pydantic_ai`", "pai")
    row("`import shipagent` (names load on first use)", "ship")
    row("`from shipagent import ShipAgent`", "agent", "≤ 1.3× `import pydantic_ai`")
    row("`import pydantic_ai.models.openai` (any pydantic-ai program using OpenAI)", "provider")
    print(f"| `shipagent run` until the model request | {request:.2f} s | | | |")
    print(
        f"| `shipagent run` until the model request, beyond `import pydantic_ai.models.openai` "
        f"| {request - w['provider']:.2f} s | | | ≤ 1.5 s |"
    )
    print(
        f"| `shipagent run` whole command (instant model) | {exit_:.2f} s | {run_cpu:.2f} s "
        f"| {run_cpu / c['pai']:.2f}× | |"
    )
    print(
        f"| `shipagent run` whole command, beyond `import pydantic_ai.models.openai` | "
        f"{exit_ - w['provider']:.2f} s | {run_cpu - c['provider']:.2f} s | | ≤ 1.5 s (until the request) |"
    )


if __name__ == "__main__":
    main()
