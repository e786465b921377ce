"""Cold start-up: ``shipagent --help``, ``import shipagent``, ``import pydantic_ai``, ``shipagent run``.

Every figure is the median of ``--runs`` fresh processes (default 7), so nothing is cached in the
interpreter; the OS page cache is warm after the first run, as it is for a user typing commands.

``shipagent run`` is measured up to the moment its model request arrives: the bench serves an
OpenAI-compatible ``/v1/chat/completions`` on 127.0.0.1 that notes the arrival time and answers
"ok", and ship.json points ``llm.baseUrl`` at it — the real command, the real ``openai`` client.

Run: ``python bench/startup.py [--runs 7]`` (prints a markdown table). ``python -X importtime -c
"import shipagent" 2>&1 | sort -t'|' -k2 -n | tail`` shows where import time goes.
"""

from __future__ import annotations

import argparse
import json
import os
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
    return [found] if found else [sys.executable, "-c", "from shipagent.cli import main; main()"]


def cold_times(argv: list[str], runs: int, *, cwd: Path | None = None) -> list[float]:
    """Wall times of ``runs`` fresh processes running ``argv`` to completion."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def run_to_request(runs: int) -> tuple[float, float]:
    """Median time from spawning ``shipagent run`` to its model request, and to its exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Model)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = Path(tempfile.mkdtemp(prefix="ship-startup-"))
    llm = {
        "provider": "openai-compatible",
        "model": "bench",
        "baseUrl": f"http://127.0.0.1:{server.server_port}/v1",
    }
    (root / "ship.json").write_text(json.dumps({"name": "bench", "llm": llm}))
    to_request, to_exit = [], []
    env = {**os.environ, "OPENAI_API_KEY": "bench"}
    try:
        for _ in range(runs):
            _Model.arrivals.clear()
            start = time.perf_counter()
            done = subprocess.run(
                [*_cli(), "run", "hello", "-C", str(root)], env=env, capture_output=True, text=True
            )
            end = time.perf_counter()
            if done.returncode != 0 or not _Model.arrivals:
                raise SystemExit(f"shipagent run failed ({done.returncode}): {done.stderr[-2000:]}")
            to_request.append(_Model.arrivals[0] - start)
            to_exit.append(end - start)
    finally:
        server.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    return statistics.median(to_request), statistics.median(to_exit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
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
    samples: dict[str, list[float]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory() as cwd:
        for _ in range(args.runs):
            for name, argv in commands.items():
                samples[name].extend(cold_times(argv, 1, cwd=Path(cwd)))
    baseline, help_time, ship, pai, agent, provider = (statistics.median(samples[n]) for n in commands)
    request, exit_ = run_to_request(args.runs)
    print(f"median of {args.runs} cold processes; bare `python -c pass` takes {baseline * 1000:.0f} ms\n")
    print("| what | time | target |")
    print("|---|---:|---|")
    print(f"| `shipagent --help` | {help_time:.2f} s | ≤ 0.8 s |")
    print(f"| `import pydantic_ai` | {pai:.2f} s | |")
    print(f"| `import shipagent` (names load on first use) | {ship:.2f} s | |")
    print(
        f"| `from shipagent import ShipAgent` | {agent:.2f} s | ≤ 1.3 × `import pydantic_ai` = {1.3 * pai:.2f} s |"
    )
    print(
        f"| `import pydantic_ai.models.openai` (any pydantic-ai program using OpenAI) | {provider:.2f} s | |"
    )
    print(f"| `shipagent run` until the model request | {request:.2f} s | |")
    print(
        f"| `shipagent run` until the model request, beyond `import pydantic_ai.models.openai` "
        f"| {request - provider:.2f} s | ≤ 1.5 s |"
    )
    print(f"| `shipagent run` whole command (instant model) | {exit_:.2f} s | |")


if __name__ == "__main__":
    main()
