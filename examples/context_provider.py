"""A context provider: a ticket tracker the agent can use, plus one line of guidance in its prompt."""

from shipagent.tools.context import AgentInstanceMeta, ProviderTool
from shipagent.tools.execution import current_tool_context

TICKETS: list[dict[str, str]] = []


def open_ticket(title: str, severity: str = "minor") -> dict[str, str]:
    ctx = current_tool_context()  # the run's chat key, session token, injection, ...
    ticket = {"id": f"T-{len(TICKETS) + 1}", "title": title, "severity": severity, "chat": ctx.chat_key}
    TICKETS.append(ticket)
    return ticket


class TicketsProvider:
    name = "tickets"

    def get_tools(self, agent_name: str, meta: AgentInstanceMeta) -> list[ProviderTool]:
        return [
            ProviderTool(
                name="ticket_open",
                description="Open a ticket in the tracker.",
                parameters={
                    "type": "object",
                    "properties": {
                        "title": {"type": "string", "minLength": 5},
                        "severity": {"enum": ["minor", "major", "critical"]},
                    },
                    "required": ["title"],
                },
                handler=open_ticket,
                scope="service",  # service and employee agents get it, repo agents do not
                context="Open one ticket per distinct bug.",
            )
        ]

    def get_system_context(self, agent_name: str, meta: AgentInstanceMeta) -> str:
        return f"{agent_name} files every bug it finds as a ticket."
