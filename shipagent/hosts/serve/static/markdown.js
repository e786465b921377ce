// A tiny Markdown renderer for model output that is safe by construction.
//
// Model output is untrusted: a prompt-injected page can make the model "answer" with
// <script> or <img onerror=...>. So the WHOLE text is HTML-escaped first, and only then is a
// small Markdown subset turned into tags the renderer writes itself: paragraphs, headings,
// fenced code blocks, inline code, bold/italic/strike, block quotes, lists, rules and links
// whose target is http(s) only. No attribute value ever comes from the text except an
// already-escaped http(s) URL, so nothing the model writes can become markup.
//
// The renderer is re-run on the whole message for every streamed delta, so it must accept
// half-written input (an unclosed ``` fence renders as code so far).
(function (global) {
  "use strict";

  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
  }

  // Placeholders for finished inline HTML use NUL, which is stripped from the input first.
  const HOLD = "\u0000";

  // An URL inside already-escaped text: no raw < > " ' can occur; entities and trailing
  // punctuation after it belong to the sentence, not to the link.
  const BARE_URL = /\bhttps?:\/\/[^\s<>"'\u0000]+/g;
  const TRAILING = /(?:&(?:gt|lt|quot|#39);|[.,;:!?)\]*_~])$/;

  function trimUrl(url) {
    let tail = "";
    for (;;) {
      const m = url.match(TRAILING);
      if (!m || m[0].length >= url.length - 8) break;
      // keep a ")" that closes a "(" inside the URL (wikipedia links)
      if (m[0] === ")" && (url.match(/\(/g) || []).length >= (url.match(/\)/g) || []).length) break;
      url = url.slice(0, -m[0].length);
      tail = m[0] + tail;
    }
    return [url, tail];
  }

  function anchor(url, label) {
    return '<a href="' + url + '" target="_blank" rel="noopener noreferrer nofollow">' + label + "</a>";
  }

  function emphasis(text) {
    return text
      .replace(/\*\*(?=\S)(.*?\S)\*\*/g, "<strong>$1</strong>")
      .replace(/(^|[^\w])__(?=\S)(.*?\S)__(?!\w)/g, "$1<strong>$2</strong>")
      .replace(/(^|[^\w*])\*(?=[^\s*])([^*\n\u0000]*?[^\s*])\*(?![\w*])/g, "$1<em>$2</em>")
      .replace(/(^|[^\w])_(?=[^\s_])([^_\n\u0000]*?[^\s_])_(?!\w)/g, "$1<em>$2</em>")
      .replace(/~~(?=\S)(.*?\S)~~/g, "<del>$1</del>");
  }

  // Inline Markdown of one escaped block of text.
  function inline(escaped) {
    const held = [];
    const hold = (html) => HOLD + (held.push(html) - 1) + HOLD;
    let text = escaped
      // code spans first: nothing inside them is Markdown
      .replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, ticks, code) => hold("<code>" + code.trim() + "</code>"))
      // [label](http(s) url) — any other scheme stays plain text
      .replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s()]+(?:\([^\s()]*\)[^\s()]*)*)\)/g, (_, label, url) =>
        hold(anchor(url, emphasis(label))))
      .replace(BARE_URL, (found) => {
        const [url, tail] = trimUrl(found);
        return hold(anchor(url, url)) + tail;
      });
    text = emphasis(text);
    const restore = new RegExp(HOLD + "(\\d+)" + HOLD, "g");
    // held pieces may themselves hold pieces (emphasis inside a link label never does, but be safe)
    for (let i = 0; i < 3 && text.includes(HOLD); i++) text = text.replace(restore, (_, n) => held[+n]);
    return text;
  }

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
  const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
  const ITEM = /^( *)([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const QUOTE = /^ {0,3}&gt;\s?(.*)$/;

  function render(source) {
    const lines = escapeHtml(String(source ?? "").replace(/\u0000/g, "").replace(/\r\n?/g, "\n")).split("\n");
    const out = [];
    let para = [];
    let list = null; // {ordered, items: [[line, ...]], indent}
    let quote = [];

    const flushPara = () => {
      if (para.length) out.push("<p>" + para.map(inline).join("<br>") + "</p>");
      para = [];
    };
    const flushList = () => {
      if (!list) return;
      const tag = list.ordered ? "ol" : "ul";
      const start = list.ordered && list.start !== 1 ? ' start="' + list.start + '"' : "";
      out.push("<" + tag + start + ">" + list.items.map((it) => (it.sub ? '<li class="sub">' : "<li>") + it.lines.map(inline).join("<br>") + "</li>").join("") + "</" + tag + ">");
      list = null;
    };
    const flushQuote = () => {
      if (quote.length) out.push("<blockquote>" + render_unescaped(quote) + "</blockquote>");
      quote = [];
    };
    const flushAll = () => {
      flushPara();
      flushList();
      flushQuote();
    };

    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      const fence = line.match(FENCE);
      if (fence) {
        flushAll();
        const marker = fence[1];
        const code = [];
        i++;
        while (i < lines.length && !new RegExp("^ {0,3}" + marker[0] + "{" + marker.length + ",}\\s*$").test(lines[i])) {
          code.push(lines[i]);
          i++;
        }
        const lang = fence[2] ? ' class="language-' + fence[2].replace(/[^\w+#-]/g, "") + '"' : "";
        out.push("<pre><code" + lang + ">" + code.join("\n") + "</code></pre>");
        continue;
      }
      if (!line.trim()) {
        flushAll();
        continue;
      }
      const q = line.match(QUOTE);
      if (q) {
        flushPara();
        flushList();
        quote.push(q[1]);
        continue;
      }
      flushQuote();
      const h = line.match(HEADING);
      if (h) {
        flushAll();
        const level = h[1].length;
        out.push("<h" + level + ">" + inline(h[2]) + "</h" + level + ">");
        continue;
      }
      if (RULE.test(line)) {
        flushAll();
        out.push("<hr>");
        continue;
      }
      const item = line.match(ITEM);
      if (item) {
        const ordered = /\d/.test(item[2]);
        flushPara();
        if (list && list.ordered !== ordered) flushList();
        if (!list) list = { ordered, start: ordered ? parseInt(item[2], 10) : 1, items: [] };
        list.items.push({ sub: item[1].length >= 2, lines: [item[3]] });
        continue;
      }
      if (list && /^\s+\S/.test(line)) {
        list.items[list.items.length - 1].lines.push(line.trim());
        continue;
      }
      flushList();
      para.push(line);
    }
    flushAll();
    return out.join("");
  }

  // Block quotes hold already-escaped lines; render their inside without escaping twice.
  function render_unescaped(escapedLines) {
    return escapedLines.length ? "<p>" + escapedLines.map(inline).join("<br>") + "</p>" : "";
  }

  global.shipMarkdown = { render, escapeHtml };
})(window);
