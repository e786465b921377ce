"""``shipagent serve``: the REST/SSE and OpenAI-compatible APIs, auth, the web page."""
