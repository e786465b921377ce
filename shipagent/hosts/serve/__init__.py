"""``shipagent serve``: an agent over HTTP — REST + SSE, OpenAI Chat Completions, a web page.

A room over the core: it drives :meth:`ShipAgent.run` and :meth:`ShipAgent.run_stream` and never
reaches into a turn. ``create_app(agent)`` returns the ASGI app; ``shipagent serve`` runs it under
uvicorn with ``uvicorn_options(agent.config.serve)`` (header size, deadlines, connection limits),
which an embedding program passes to its own ``uvicorn.run`` too. See docs/guides/serve.md for
the endpoints.
"""

from ._app import create_app
from ._auth import ApiKey, Auth
from ._conn import uvicorn_options

__all__ = ["ApiKey", "Auth", "create_app", "uvicorn_options"]
