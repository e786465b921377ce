"""``shipagent serve``: an agent over HTTP — REST + SSE, OpenAI Chat Completions, a web page.

A room over the core: it drives :meth:`ShipAgent.run` and :meth:`ShipAgent.run_stream` and never
reaches into a turn. ``create_app(agent)`` returns the ASGI app; ``shipagent serve`` runs it under
uvicorn. See docs/guides/serve.md for the endpoints.
"""

from ._app import ServeState, create_app
from ._auth import ApiKey, Auth, is_loopback

__all__ = ["ApiKey", "Auth", "ServeState", "create_app", "is_loopback"]
