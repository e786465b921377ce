"""``--model-factory MODULE:ATTR``: a model built by your own code, for ``serve`` and ``worker``.

For models shipagent cannot build from a model string — a custom ``Model`` subclass, or the
scripted ``FunctionModel`` the test suite's server and worker processes run — both commands take
the same option, and the same environment variable :data:`ENV` (how a test hands the hook to
every process it starts). The attribute is a pydantic-ai ``Model`` or a callable returning one;
modules beside ship.json are importable.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from ...agent._agent import ShipAgent

__all__ = ["ENV", "FACTORY_HELP", "host_agent", "load_model_factory"]

ENV = "SHIPAGENT_MODEL_FACTORY"
FACTORY_HELP = f"MODULE:ATTR of a pydantic-ai Model (or a function returning one) to use (env {ENV})."


def load_model_factory(spec: str | None, project_root: Path, *, use_env: bool = True) -> Model | None:
    """The model ``spec`` (else ``$SHIPAGENT_MODEL_FACTORY`` when ``use_env``) names; ``None`` if neither.

    Raises:
        ConfigError: the spec is malformed, the import fails, or the object is not a model.
    """
    from pydantic_ai.models import Model

    spec = spec or (os.environ.get(ENV) if use_env else None)
    if not spec:
        return None
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--model-factory {spec!r}: expected MODULE:ATTR (e.g. mymodels:build)")
    root = str(project_root.resolve())
    added = root not in sys.path
    if added:
        sys.path.append(root)  # last, so a dropped csv.py cannot shadow the stdlib's
    try:
        obj: Any = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--model-factory {spec!r}: {type(exc).__name__}: {exc}") from None
    finally:
        if added:
            sys.path.remove(root)
    if callable(obj) and not isinstance(obj, Model):
        try:
            obj = obj()
        except Exception as exc:  # the factory's own failure, in one line
            raise ConfigError(f"--model-factory {spec!r} failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(obj, Model):
        raise ConfigError(f"--model-factory {spec!r} gave a {type(obj).__name__}, not a pydantic-ai Model")
    return obj


def host_agent(project: Path, model: str | None, model_factory: str | None) -> ShipAgent:
    """The agent a long-running host (``serve``, ``channels run``) runs, its model built now.

    The model is ``--model-factory``, else ``-m``, else ``$SHIPAGENT_MODEL_FACTORY``, else
    ship.json's; building it here makes a missing model or key one line at start-up.

    Raises:
        ShipAgentError: ship.json, the factory or the model is unusable.
    """
    from ...agent._agent import ShipAgent

    root = project.expanduser().resolve()
    chosen: Model | str | None = load_model_factory(model_factory, root, use_env=model is None) or model
    agent = ShipAgent.from_project(root, model=chosen)
    agent.model  # noqa: B018 - fail here, with one line, when no model is configured
    return agent
