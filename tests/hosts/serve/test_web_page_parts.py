"""The page's pure parts, run in the real browser: the Markdown renderer and the SSE reader.

Model output can never become markup: the renderer escapes all HTML first and only then adds its
own tags, so whatever a model writes, the DOM it produces holds only the renderer's tags, links go
to http(s) only, and text round-trips. The SSE reader gets the events of a stream however the
bytes are cut into reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import sync_playwright

from tests.support.web import STATIC, launch_chromium

ALLOWED_TAGS = {
    "P", "BR", "H1", "H2", "H3", "H4", "H5", "H6", "PRE", "CODE", "STRONG", "EM", "DEL",
    "UL", "OL", "LI", "BLOCKQUOTE", "HR", "A",
}  # fmt: skip

# Renders a source in a detached element and reports every element and attribute it produced.
INSPECT = """(src) => {
  const box = document.createElement("div");
  box.innerHTML = window.shipMarkdown.render(src);
  const elements = [...box.querySelectorAll("*")].map((el) => ({
    tag: el.tagName,
    attrs: Object.fromEntries([...el.attributes].map((a) => [a.name, a.value])),
  }));
  return { html: box.innerHTML, text: box.textContent, elements };
}"""


@pytest.fixture(scope="module")
def page() -> Iterator[Any]:
    with sync_playwright() as p:
        browser = launch_chromium(p)
        pg = browser.new_page()
        pg.set_content("<!doctype html><body></body>")
        for script in ("markdown.js", "sse.js"):
            pg.add_script_tag(content=(STATIC / script).read_text(encoding="utf-8"))
        pg.evaluate("window.__pwned = 0")
        yield pg
        browser.close()


def inspect(page: Any, src: str) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate(INSPECT, src)
    for el in result["elements"]:
        assert el["tag"] in ALLOWED_TAGS, (src, result["html"])
        for name, value in el["attrs"].items():
            assert name in {"href", "target", "rel", "class", "start"}, (src, result["html"])
            if name == "href":
                assert value.startswith(("http://", "https://")), (src, result["html"])
    return result


HOSTILE = [
    "<script>window.__pwned = 1</script>",
    '<img src=x onerror="window.__pwned = 2">',
    "<svg><script>window.__pwned = 3</script></svg>",
    '<a href="javascript:window.__pwned = 4">click</a>',
    "[click](javascript:window.__pwned=5)",
    "[click](data:text/html,<script>alert(1)</script>)",
    '[x](http://example.com/"onmouseover="window.__pwned=6)',
    "**<b onclick=alert(1)>bold</b>**",
    "```html\n<script>window.__pwned = 7</script>\n```",
    "`<img src=x onerror=alert(1)>`",
    "> <iframe src=javascript:alert(1)>",
    "- <style>body{display:none}</style>\n- item",
    '"><img src=x onerror=alert(1)>',
    "http://example.com/<script>alert(1)</script>",
    "&lt;script&gt; already escaped &amp; stays literal",
    "\u0000<script>alert(1)</script>\u0000",
    "```\nunclosed <b>fence",
]


@pytest.mark.parametrize("src", HOSTILE)
def test_hostile_markup_stays_text(page: Any, src: str) -> None:
    result = inspect(page, src)
    # the HTML the model wrote is visible, character for character (minus Markdown syntax)
    for fragment in ("<script>", "onerror", "<iframe", "<style>", "<b"):
        if fragment in src and "`" not in src and "**" not in src:
            assert fragment in result["text"], (src, result["text"])
    assert page.evaluate("window.__pwned") == 0


def test_markdown_subset_renders(page: Any) -> None:
    src = (
        "# Title\n\nSome **bold**, *italic*, _also_, ~~gone~~ and `code <x>`.\n\n"
        "- one\n- two with [a link](https://example.com/a?b=1&c=2)\n  continued\n\n"
        "3. three\n4. four\n\n"
        "```python\nprint('<hi>')\n```\n\n> quoted\n\n---\n\nsee https://example.com/path. done"
    )
    result = inspect(page, src)
    html = result["html"]
    assert "<h1>Title</h1>" in html
    assert "<strong>bold</strong>" in html and "<em>italic</em>" in html and "<em>also</em>" in html
    assert "<del>gone</del>" in html
    assert "<code>code &lt;x&gt;</code>" in html
    assert "<ul><li>one</li><li>two with " in html and "<br>continued</li></ul>" in html
    assert '<ol start="3"><li>three</li><li>four</li></ol>' in html
    assert "<pre><code class=\"language-python\">print('&lt;hi&gt;')</code></pre>" in html
    assert "<blockquote><p>quoted</p></blockquote>" in html and "<hr>" in html
    links = [el["attrs"]["href"] for el in result["elements"] if el["tag"] == "A"]
    # the query's & arrives intact; the sentence's full stop is not part of the bare link
    assert links == ["https://example.com/a?b=1&c=2", "https://example.com/path"]
    assert "snake_case_name" in inspect(page, "snake_case_name and 2*3*4")["text"]
    assert [el["tag"] for el in inspect(page, "2*3*4")["elements"]] == ["P"]


def test_half_written_input_renders(page: Any) -> None:
    # every prefix of a message is rendered while it streams; none may throw or leak markup
    src = "Intro **bold** text\n\n```js\nconst a = '<b>';\n```\n\n- [link](https://example.com) <i>x</i>"
    for end in range(len(src) + 1):
        inspect(page, src[:end])


# Feeds each case (a list of byte pieces) as one response body to shipSse.read; returns the events
# each case produced.
READ_SSE = """async (cases) => {
  const run = async (pieces) => {
    const body = new ReadableStream({
      start(controller) {
        for (const p of pieces) controller.enqueue(new Uint8Array(p));
        controller.close();
      },
    });
    const events = [];
    await window.shipSse.read(new Response(body), (name, data) => events.push([name, data]));
    return events;
  };
  return Promise.all(cases.map(run));
}"""

SSE_STREAM = (
    ": keep-alive\r\n\r\n"
    'event: text_delta\r\ndata: {"text": "héllo"}\r\n\r\n'
    'event: tool_started\ndata: {"tool": "exec_shell",\ndata:  "args": {}}\n\n'
    "data: no event name\r\r"
    'event: done\ndata: {"result": {}}\n\n'
    'event: text_delta\ndata: {"text": "cut off"}\n'  # never finished: dropped, as EventSource does
).encode()
SSE_EVENTS = [
    ["text_delta", '{"text": "héllo"}'],
    ["tool_started", '{"tool": "exec_shell",\n "args": {}}'],
    ["message", "no event name"],
    ["done", '{"result": {}}'],
]


def test_sse_reader_in_one_piece_and_cut_anywhere(page: Any) -> None:
    raw = SSE_STREAM
    cases = {"one piece": [list(raw)], "one byte per read": [[b] for b in raw]}
    # every cut point, including between \r and \n and between the two bytes of "é"
    cases.update({f"cut at {cut}": [list(raw[:cut]), list(raw[cut:])] for cut in range(1, len(raw))})
    results = page.evaluate(READ_SSE, list(cases.values()))
    wrong = {name: got for name, got in zip(cases, results, strict=True) if got != SSE_EVENTS}
    assert wrong == {}
