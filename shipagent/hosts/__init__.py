"""The hosts: what puts the agent in front of people and programs.

``cli`` is the ``shipagent`` command, ``serve`` the HTTP server, ``durable`` the durable turns and
their workers, ``channels`` the chat platforms. Each uses the agent's public API
(``ShipAgent.run`` / ``run_stream`` and the events they yield); nothing below a host imports one.
"""
