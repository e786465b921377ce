"""The ship.json model: every key the runtime reads, validated once at load time.

JSON keys are camelCase (``inMemoryMaxMessages``); Python attributes are snake_case. Unknown keys are
rejected with the key path and the closest valid key, because a misspelt option that silently does
nothing is the worst kind of configuration bug.

Scalar types are strict where a user would expect it (see :mod:`shipagent._strict`): a boolean is
``true``/``false`` (or that string, from a ``${VAR}``), never a number; a number is a JSON number or
a string of one (again for ``${VAR}``), never a boolean, and always finite; a string is never a
number or a boolean.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from ._channel_keys import group_section_hint
from ._channels_config import ChannelsConfig
from ._config_base import ConfigModel as _Model
from ._context_config import (
    AgentContextConfig,
    BudgetConfig,
    BudgetSectionsConfig,
    CacheConfig,
    ChatBudgetsConfig,
    ChatHistoryConfig,
    ContextConfig,
    FilesConfig,
    InjectionConfig,
    LedgerConfig,
    ModelPrice,
    PinsConfig,
)
from ._env import MAX_DEPTH, check_depth, expand_tree, merged_environment
from ._hosts_config import DurableConfig, ServeApiKey, ServeConfig
from .errors import ConfigError

__all__ = [
    "AgentContextConfig",
    "AgentMetaConfig",
    "BudgetConfig",
    "BudgetSectionsConfig",
    "CacheConfig",
    "ChatBudgetsConfig",
    "ChatHistoryConfig",
    "ChatSendFileConfig",
    "ContextConfig",
    "DurableConfig",
    "ExecShellPermission",
    "FilesConfig",
    "HandoverConfig",
    "InjectionConfig",
    "LedgerConfig",
    "LlmConfig",
    "McpConfig",
    "McpHttpServer",
    "McpServerConfig",
    "McpStdioServer",
    "ModelPrice",
    "ObservabilityConfig",
    "PermissionsConfig",
    "PinsConfig",
    "ProfileConfig",
    "ServeApiKey",
    "ServeConfig",
    "ShipConfig",
    "SkillsConfig",
    "ToolsConfig",
    "load_config",
    "parse_config",
]


class LlmConfig(_Model):
    """``llm``: which model to talk to and how. Every field is applied to the model."""

    model: str | None = None
    """A pydantic-ai model string (``openai:gpt-5-mini``) or a bare name used with ``provider``."""
    provider: str | None = None
    """``openai`` | ``openai-compatible`` | ``anthropic`` | any provider pydantic-ai knows | ``local``
    (the embedded model of ``shipagent[local]``, started and stopped with the agent)."""
    model_path: str | None = None
    """With ``provider: "local"``: the GGUF file to run (relative to the project); default: the
    SmolLM2-135M-Instruct demo model that ``shipagent[local]`` installs."""
    base_url: str | None = None
    api_key: str | None = Field(default=None, repr=False)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)
    timeout_seconds: float | None = Field(default=None, gt=0)
    """The longest a user waits for one model request, retries included (``None``: the SDK's own)."""
    max_retries: int = Field(default=1, ge=0, le=10)
    """Retries of a model request that failed for a passing reason (connection, 429, 5xx, timeout of
    one attempt); each retry is a ``retry`` step event. The provider SDK's own retries are off."""


class SkillsConfig(_Model):
    paths: list[str] = Field(default_factory=list)
    allow_external_paths: bool = False


class ExecShellPermission(_Model):
    mode: Literal["allow", "deny", "ask"] = "ask"
    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)
    sandbox: Literal["auto", "required", "off"] = "auto"
    """Run every command in a bubblewrap sandbox: when ``bwrap`` works (``auto``), always
    (``required``: refuse commands without it), or never (``off``)."""
    writable_paths: list[str] = Field(default_factory=list)
    """Extra paths the sandboxed command may write: relative to the project, or absolute."""
    network: bool = False
    """Whether a sandboxed command keeps the network (off: a private, empty network namespace)."""
    hide: list[str] = Field(default_factory=list)
    """More paths the sandboxed command must not see (relative to the project, or absolute), beside
    ``.ship/``, ``.env`` and the host's secrets, which are always hidden."""
    env: list[str] = Field(default_factory=list)
    """Variables a command gets besides PATH, HOME, LANG and TERM: ``NAME`` passes the server's
    value through, ``NAME=VALUE`` sets one. Nothing else of the server's environment reaches it."""
    max_output_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    """What one command's stdout (and, separately, stderr) may store: head and tail are kept."""
    max_processes: int = Field(default=1024, ge=16)
    """Processes and threads a sandboxed command may run at once (as root: at least the kernel's
    minimum ``pid_max``, 300 or 8 per CPU)."""
    max_file_bytes: int | None = Field(default=1024**3, ge=1024)
    """The largest file a sandboxed command may write (``null``: no limit)."""

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: list[str]) -> list[str]:
        for item in value:
            name = item.partition("=")[0]
            if not (name.isidentifier() and name.isascii()):
                raise ValueError(f"{item!r} is not NAME or NAME=VALUE (NAME: letters, digits, _)")
        return value


class PermissionsConfig(_Model):
    exec_shell: ExecShellPermission = Field(default_factory=ExecShellPermission)


class ChatSendFileConfig(_Model):
    """``tools.chatSendFile``: the builtin tool that sends a project file into the chat."""

    max_bytes: int = Field(default=20 * 1024 * 1024, ge=1)
    """The largest file it sends. The file is read into memory to be sent; Telegram's Bot API
    takes uploads up to 50 MB (a Local Bot API Server, up to 2,000 MB)."""


class ToolsConfig(_Model):
    modules: list[str] = Field(default_factory=list)
    """Importable modules that expose a pydantic-ai ``toolset``; added beside the builtins."""
    chat_send_file: ChatSendFileConfig = Field(default_factory=ChatSendFileConfig)


class _McpCommon(_Model):
    enabled: bool = True
    timeout_seconds: float = Field(default=60, gt=0)
    init_timeout_seconds: float = Field(default=20, gt=0)
    allowed_tools: list[str] | None = None


class McpStdioServer(_McpCommon):
    type: Literal["stdio"] = "stdio"
    command: str
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None


class McpHttpServer(_McpCommon):
    type: Literal["http", "sse"]
    url: str
    headers: dict[str, str] = Field(default_factory=dict)


def _server_kind(value: Any) -> str:
    kind = value.get("type", "stdio") if isinstance(value, dict) else getattr(value, "type", "stdio")
    return "stdio" if kind == "stdio" else "http"


McpServerConfig = Annotated[
    Annotated[McpStdioServer, Tag("stdio")] | Annotated[McpHttpServer, Tag("http")],
    Discriminator(_server_kind),
]
"""A stdio server (``type`` may be omitted) or a remote ``http`` / ``sse`` one."""


class McpConfig(_Model):
    servers: dict[str, McpServerConfig] = Field(default_factory=dict)


class AgentMetaConfig(_Model):
    """``agent``: what kind of agent this is: it decides which context-provider tools the agent gets (their scope)."""

    archetype: Literal["repo", "service", "employee"] = "repo"
    backend_type: str = "shipagent"
    workspace_policy: str = "persistent"
    launch_mode: str = "direct"


class ProfileConfig(_Model):
    """``profiles.<name>``: another agent profile this agent may hand work to."""

    instructions: str | None = None
    agent_md: str | None = None
    model: str | None = None
    tools: list[str] | None = None
    skills: list[str] | None = None


class HandoverConfig(_Model):
    max_depth: int = Field(default=3, ge=1)
    max_subagents_per_run: int = Field(default=8, ge=1)


class ObservabilityConfig(_Model):
    """``observability``: ``otel: true`` turns on pydantic-ai's OpenTelemetry instrumentation."""

    otel: bool = False


class ShipConfig(_Model):
    """The whole of ship.json."""

    schema_: str | None = Field(default=None, alias="$schema")
    name: str = "shipagent"
    description: str | None = None
    llm: LlmConfig = Field(default_factory=LlmConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    permissions: PermissionsConfig = Field(default_factory=PermissionsConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    agent: AgentMetaConfig = Field(default_factory=AgentMetaConfig)
    capabilities: dict[str, list[str]] = Field(default_factory=dict)
    profiles: dict[str, ProfileConfig] = Field(default_factory=dict)
    handover: HandoverConfig = Field(default_factory=HandoverConfig)
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)
    durable: DurableConfig = Field(default_factory=DurableConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    channels: ChannelsConfig = Field(default_factory=ChannelsConfig)
    """Chat platforms the agent answers on (``channels.telegram``, ``.slack``, ``.discord``, ``.feishu``, ``.qq``)."""

    @model_validator(mode="after")
    def _durable_channels(self) -> ShipConfig:
        # A durable turn is answered by a worker through the platform's send API; QQ only takes
        # passive replies tied to the receiving connection's message, which no worker has.
        if self.durable.enabled and self.channels.qq.enabled:
            raise ValueError(
                "channels.qq cannot be enabled with durable.enabled: a durable worker cannot send QQ's "
                "passive replies yet; run the QQ channel on an agent without durable turns"
            )
        return self

    @model_validator(mode="after")
    def _reserve_what_is_asked(self) -> ShipConfig:
        # An answer capped by ``llm.maxTokens`` never needs more room than that: reserving the
        # default 4,000 would shrink a small window's history for nothing.
        budget = self.context.budget
        if "reserve_output" not in budget.model_fields_set and self.llm.max_tokens is not None:
            budget.reserve_output = min(budget.reserve_output, self.llm.max_tokens)
        return self


# ---------------------------------------------------------------------------------------------------
# loading


def _key_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("stdio", "http", "sse") and out.startswith("mcp.servers."):
            continue  # the discriminator tag pydantic adds is not a key the user wrote
        else:
            out += f".{part}" if out else str(part)
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold, looking through Optional, unions and dicts."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in get_args(annotation):
        found.extend(_models_in(arg))
    return found


def _tag_of(model: type[BaseModel]) -> tuple[str, ...]:
    """The discriminator values a union member accepts (``stdio``; ``http``/``sse``)."""
    field = model.model_fields.get("type")
    return tuple(get_args(field.annotation)) if field is not None else ()


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The pydantic model that owns the key at ``loc`` (for 'did you mean' suggestions)."""
    current: list[type[BaseModel]] = [ShipConfig]
    for part in loc[:-1]:
        if len(current) > 1:  # a discriminated union: pydantic puts the tag into the location
            tagged = [m for m in current if part in _tag_of(m) or (part == "http" and "sse" in _tag_of(m))]
            if tagged:
                current = tagged
                continue
        nxt: list[type[BaseModel]] = []
        for model in current:
            for name, field in model.model_fields.items():
                if part in (name, field.alias):
                    nxt.extend(_models_in(field.annotation))
        if nxt:
            current = nxt
        # otherwise ``part`` is a dict key or list index: the value models stay the same
    return current[0] if current else None


def _format_error(err: ValidationError) -> ConfigError:
    # An unknown key explains a "missing" one next to it (``comand`` vs ``command``): report it first.
    errors = sorted(err.errors(), key=lambda e: e["type"] != "extra_forbidden")
    first = errors[0]
    loc = tuple(first["loc"])
    path = _key_path(loc)
    if first["type"] == "extra_forbidden":
        owner = _model_at(loc)
        valid = [f.alias or n for n, f in owner.model_fields.items()] if owner else []
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else f" (valid keys: {', '.join(valid)})"
        section = group_section_hint(loc)  # channels.slack.groups: Slack says "channels"
        hint = f" ({section})" if section else hint
        return ConfigError(f"ship.json: unknown key '{path}'{hint}", path=path)
    if first["type"] == "missing":
        return ConfigError(f"ship.json: '{path}' is required", path=path)
    more = f" (and {len(err.errors()) - 1} more problem(s))" if len(err.errors()) > 1 else ""
    if not path:  # a rule across sections: its message names the keys itself
        return ConfigError(f"ship.json: {first['msg'].removeprefix('Value error, ')}{more}", path=None)
    return ConfigError(f"ship.json: '{path}': {first['msg']}{more}", path=path)


def parse_config(data: Any, *, env: dict[str, str] | None = None) -> ShipConfig:
    """Validate an already-parsed ship.json tree (after ``${VAR}`` expansion with ``env``)."""
    if not isinstance(data, dict):
        raise ConfigError("ship.json: the top level must be a JSON object", path="")
    check_depth(data)
    expanded = expand_tree(data, env if env is not None else {})
    try:
        return ShipConfig.model_validate(expanded)
    except ValidationError as exc:
        raise _format_error(exc) from None


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path.name}: not UTF-8 ({exc.reason})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path.name}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise ConfigError(f"{path.name}: nested too deeply to read (more than {MAX_DEPTH} levels)") from None


def load_config(project_root: Path) -> ShipConfig:
    """Load ``<root>/ship.json`` (defaults when absent), merge ``.ship/mcp/mcp.json``, expand vars.

    Raises:
        ConfigError: invalid JSON (line and column), unknown key, wrong type, missing variable, or a
            server name defined in both ship.json and ``.ship/mcp/mcp.json``.
    """
    env = merged_environment(project_root)
    path = project_root / "ship.json"
    data: Any = _read_json(path) if path.is_file() else {}
    if not isinstance(data, dict):
        raise ConfigError("ship.json: the top level must be a JSON object", path="")
    legacy = project_root / ".ship" / "mcp" / "mcp.json"
    if legacy.is_file():
        extra = _read_json(legacy)
        servers = extra.get("servers", {}) if isinstance(extra, dict) else None
        if not isinstance(servers, dict):
            raise ConfigError('.ship/mcp/mcp.json: expected {"servers": {...}}', path="servers")
        mcp = data.setdefault("mcp", {})
        own = mcp.setdefault("servers", {}) if isinstance(mcp, dict) else {}
        for name, server in servers.items():
            if name in own:
                raise ConfigError(
                    f"mcp.servers.{name}: defined in both ship.json and .ship/mcp/mcp.json",
                    path=f"mcp.servers.{name}",
                )
            own[name] = server
    config = parse_config(data, env=env)
    if config.llm.model_path:  # relative to the project, wherever the command runs
        config.llm.model_path = str(project_root / Path(config.llm.model_path).expanduser())
    import re

    for name in config.mcp.servers:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            raise ConfigError(
                f"mcp.servers.{name}: server names may use only letters, digits, '_' and '-'",
                path=f"mcp.servers.{name}",
            )
    return config
