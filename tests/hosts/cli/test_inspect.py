"""``shipagent inspect`` and OpenTelemetry spans over the ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.hosts.cli import _app as cli
from tests.core.test_ledger import KEY, _scripted_chat

runner = CliRunner()


@pytest.mark.anyio
async def test_inspect_shows_the_last_request_its_diff_json_and_stats(tmp_path: Path) -> None:
    agent, _ = await _scripted_chat(tmp_path)
    records = agent.ledger(KEY)
    before = sorted(p.stat().st_mtime_ns for p in (tmp_path / ".ship").rglob("*") if p.is_file())

    shown = runner.invoke(cli.app, ["inspect", KEY, "-C", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    last = records[-1]
    assert f"request {last.request_id} step {last.step}" in shown.output
    for word in ("toolDefinitions", "injectedSystem", "toolResults", last.items[0].source):
        assert word in shown.output

    as_json = runner.invoke(cli.app, ["inspect", KEY, "-C", str(tmp_path), "--json"])
    assert json.loads(as_json.output) == last.to_json()

    # a request with an injection: its diff from the previous step shows the injection added
    injected = next(r for r in records if any(i.section == "injections" for i in r.items))
    diff = runner.invoke(
        cli.app, ["inspect", KEY, "-C", str(tmp_path), "--request", injected.id, "--diff", "--json"]
    )
    changes = json.loads(diff.output)
    assert changes["request"] == injected.id
    added = {c["source"] for c in changes["changes"] if c["change"] == "added"}
    assert {"injection:rules-v1", "injection:pizza"} <= added
    table = runner.invoke(cli.app, ["inspect", KEY, "-C", str(tmp_path), "--request", injected.id, "--diff"])
    assert "injection:rules-v1" in table.output and "added" in table.output

    stats = json.loads(
        runner.invoke(cli.app, ["inspect", KEY, "-C", str(tmp_path), "--stats", "--json"]).output
    )
    assert stats["requests"] == len(records) and stats["turns"] == 7
    assert stats["prefixStableShare"] == 1.0 and stats["distinctPrefixes"] == 1
    assert stats["edits"]["elided"] > 0 and stats["meanTokens"]["toolDefinitions"] > 0
    assert (
        "prefixStableShare" in runner.invoke(cli.app, ["inspect", KEY, "-C", str(tmp_path), "--stats"]).output
    )

    # read-only: nothing under .ship changed
    after = sorted(p.stat().st_mtime_ns for p in (tmp_path / ".ship").rglob("*") if p.is_file())
    assert before == after


def test_inspect_errors_name_what_was_wrong(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_text("{}")  # a project with no requests yet
    bad_key = runner.invoke(cli.app, ["inspect", "../etc", "-C", str(tmp_path)])
    assert bad_key.exit_code == 2 and "error:" in bad_key.output and "ship.json" not in bad_key.output
    empty = runner.invoke(cli.app, ["inspect", KEY, "-C", str(tmp_path)])
    assert empty.exit_code == 2 and "no ledger records yet" in empty.output
    missing = runner.invoke(cli.app, ["inspect", KEY, "-C", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


@pytest.mark.anyio
async def test_otel_spans_carry_chat_key_request_id_and_section_tokens(tmp_path: Path) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # process-global, set once: only this test uses it
    if trace.get_tracer_provider() is not provider:
        pytest.skip("another test set the global tracer provider first")

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("hi there")])

    (tmp_path / "ship.json").write_text(json.dumps({"observability": {"otel": True}}), encoding="utf-8")
    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(model))
    result = await agent.run(KEY, "hello")
    assert result.success
    spans = exporter.get_finished_spans()
    ours = [s for s in spans if s.name == "shipagent.request"]
    assert len(ours) == 1
    attrs: dict[str, Any] = dict(ours[0].attributes or {})
    assert attrs["shipagent.chat_key"] == KEY and attrs["shipagent.request_id"] == result.request_id
    assert attrs["shipagent.step"] == 1 and attrs["shipagent.tokens.turn"] > 0
    assert attrs["shipagent.tokens.instructions"] > 0
    # pydantic-ai's own instrumentation is on: the agent run and the model request are spans too,
    # and ours sits inside the run
    names = {s.name for s in spans}
    assert any("agent" in n for n in names) and any(n.startswith("chat ") for n in names), names
    run_span = next(s for s in spans if "agent" in s.name)
    assert ours[0].context.trace_id == run_span.context.trace_id
