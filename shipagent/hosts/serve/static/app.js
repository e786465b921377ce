// The shipagent web chat: a plain script over the serve HTTP API, no build step, no CDN.
//
// Why fetch and not EventSource: a turn is a POST (the user's text is the body) and
// EventSource can only GET, so the SSE stream of POST /v1/chats/{key}/messages is read from
// the fetch body and its "event:"/"data:" lines are parsed here.
//
// Everything the model or a tool produced reaches the DOM either through textContent or
// through shipMarkdown.render, which escapes all HTML before it adds its own tags.
(function () {
  "use strict";

  const KEY_STORAGE = "shipagent.apiKey";
  const md = window.shipMarkdown;
  const $ = (id) => document.getElementById(id);

  const els = {
    agentName: $("agent-name"),
    newChat: $("new-chat"),
    chatList: $("chat-list"),
    keyState: $("key-state"),
    changeKey: $("change-key"),
    forgetKey: $("forget-key"),
    chatKey: $("chat-key"),
    status: $("status"),
    transcript: $("transcript"),
    messages: $("messages"),
    composer: $("composer"),
    input: $("input"),
    send: $("send"),
    keyDialog: $("key-dialog"),
    keyForm: $("key-form"),
    keyReason: $("key-reason"),
    keyInput: $("key-input"),
    keyCancel: $("key-cancel"),
  };

  const state = {
    chatKey: "", // the chat on screen
    known: [], // chat keys from GET /v1/chats, newest first
    drafts: new Set(), // new chats not yet on the server (no message sent)
    live: new Map(), // chat key -> [user bubble, turn element] of the turn being streamed
    stops: new Map(), // chat key -> AbortController of its running turn (Stop = disconnect = cancel)
    sends: 0, // turns started in this tab: a transcript read older than a finished turn is read again
    used: new Map(), // chat key -> when this tab last sent to it: listed even if the server has nothing of it
  };

  // ---------------------------------------------------------------- API key

  function apiKey() {
    return sessionStorage.getItem(KEY_STORAGE) || "";
  }

  function showKeyState() {
    const has = Boolean(apiKey());
    els.keyState.textContent = has ? "API key set" : "No API key";
    els.changeKey.textContent = has ? "Change" : "Set key";
    els.forgetKey.hidden = !has;
  }

  let keyPrompt = null; // one dialog at a time; concurrent 401s wait for the same answer

  function askForKey(reason) {
    if (keyPrompt) return keyPrompt;
    keyPrompt = new Promise((resolve) => {
      els.keyReason.textContent = reason;
      els.keyInput.value = "";
      const done = (value) => {
        els.keyForm.onsubmit = null;
        els.keyCancel.onclick = null;
        els.keyDialog.oncancel = null;
        if (els.keyDialog.open) els.keyDialog.close();
        keyPrompt = null;
        resolve(value);
      };
      els.keyForm.onsubmit = (ev) => {
        ev.preventDefault();
        const value = els.keyInput.value.trim();
        if (!value) return;
        sessionStorage.setItem(KEY_STORAGE, value);
        showKeyState();
        done(value);
      };
      els.keyCancel.onclick = () => done(null);
      els.keyDialog.oncancel = () => done(null);
      els.keyDialog.showModal();
      els.keyInput.focus();
    });
    return keyPrompt;
  }

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function errorMessage(resp) {
    let text = "";
    try {
      text = await resp.text();
      const body = JSON.parse(text);
      const err = body && body.error !== undefined ? body.error : body;
      if (typeof err === "string") return err;
      if (err && typeof err.message === "string") return err.message;
      if (err && typeof err.detail === "string") return err.detail;
    } catch (_) {
      /* not JSON: use the text */
    }
    return text.trim().slice(0, 300) || resp.statusText || "request failed";
  }

  // fetch with the API key; a 401 asks for a key and tries again (once per answer).
  async function api(path, options = {}) {
    for (;;) {
      const headers = new Headers(options.headers || {});
      const key = apiKey();
      if (key) headers.set("Authorization", "Bearer " + key);
      let resp;
      try {
        resp = await fetch(path, { ...options, headers });
      } catch (err) {
        if (err.name === "AbortError") throw err;
        throw new ApiError(0, "cannot reach the server (" + err.message + ")");
      }
      if (resp.status !== 401) return resp;
      const message = await errorMessage(resp);
      const answer = await askForKey(
        key ? "The server did not accept this key: " + message : "This server needs an API key."
      );
      if (!answer) throw new ApiError(401, "an API key is needed to talk to this server");
    }
  }

  async function apiJson(path, options) {
    const resp = await api(path, options);
    if (!resp.ok) throw new ApiError(resp.status, await errorMessage(resp));
    return resp.json();
  }

  // API paths are relative to the page, so it also works behind a proxy that serves it under a prefix.
  const chatPath = (key) => "v1/chats/" + encodeURIComponent(key);

  // ---------------------------------------------------------------- chat list

  const field = (obj, ...names) => {
    for (const n of names) if (obj && obj[n] !== undefined && obj[n] !== null) return obj[n];
    return undefined;
  };

  function listOf(body, ...names) {
    if (Array.isArray(body)) return body;
    const found = field(body, ...names);
    return Array.isArray(found) ? found : [];
  }

  async function loadChats() {
    try {
      const body = await apiJson("v1/chats?limit=100");
      state.known = listOf(body, "chats", "data", "items").map((c) =>
        typeof c === "string" ? { key: c } : { key: field(c, "chatKey", "chat_key", "key", "id"), when: field(c, "updatedAt", "updated_at", "lastActivity", "ts") }
      ).filter((c) => typeof c.key === "string");
      for (const c of state.known) state.drafts.delete(c.key);
    } catch (err) {
      if (err.status !== 401) setStatus(err.message, true);
    }
    renderChatList();
  }

  function relativeTime(iso) {
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return "";
    const s = Math.max(0, (Date.now() - t) / 1000);
    if (s < 60) return "just now";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    if (s < 86400) return Math.floor(s / 3600) + " h ago";
    return new Date(t).toLocaleDateString();
  }

  function renderChatList() {
    // A chat whose turns all failed has nothing on the server, so GET /v1/chats does not list it;
    // it stays in the list (as "not saved") while this tab is open, so the user can find it again.
    const listed = new Set([...state.drafts, ...state.known.map((c) => c.key)]);
    const unsaved = [...state.used].filter(([key]) => !listed.has(key)).map(([key, when]) => ({ key, when, unsaved: true }));
    const items = [...[...state.drafts].map((key) => ({ key, draft: true })), ...unsaved, ...state.known];
    els.chatList.replaceChildren();
    if (!items.length) {
      const empty = document.createElement("p");
      empty.className = "chat-list-empty";
      empty.textContent = "No chats yet.";
      els.chatList.append(empty);
    }
    for (const item of items) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "chat-item" + (item.key === state.chatKey ? " active" : "");
      button.dataset.chatKey = item.key;
      const name = document.createElement("span");
      name.className = "chat-item-key";
      name.textContent = item.key;
      const when = document.createElement("span");
      when.className = "chat-item-when";
      when.textContent = item.draft
        ? "new"
        : state.live.has(item.key)
          ? "answering…"
          : item.unsaved
            ? "not saved"
            : relativeTime(item.when);
      button.append(name, when);
      button.addEventListener("click", () => selectChat(item.key));
      els.chatList.append(button);
    }
  }

  // ---------------------------------------------------------------- transcript

  function setStatus(text, isError = false) {
    els.status.textContent = text;
    els.status.classList.toggle("error", isError);
  }

  function scrollDown(force = false) {
    const t = els.transcript;
    if (force || t.scrollHeight - t.scrollTop - t.clientHeight < 120) t.scrollTop = t.scrollHeight;
  }

  function bubble(role, text, extraClass = "") {
    const row = document.createElement("div");
    row.className = "msg " + role + (extraClass ? " " + extraClass : "");
    const body = document.createElement("div");
    body.className = "bubble";
    if (role === "user") {
      body.textContent = text; // the user's own words, shown exactly
    } else {
      body.classList.add("md");
      body.innerHTML = md.render(text);
    }
    row.append(body);
    return row;
  }

  function note(text, kind = "info") {
    const div = document.createElement("div");
    div.className = "note " + kind;
    div.textContent = text;
    return div;
  }

  function showEmpty() {
    const empty = document.createElement("div");
    empty.className = "empty";
    const h = document.createElement("h2");
    h.textContent = "Start a conversation";
    const p = document.createElement("p");
    p.textContent =
      "Messages go to chat " + state.chatKey + (state.drafts.has(state.chatKey) ? " (rename it above before the first message)" : "") +
      ". Answers stream in as the agent writes them.";
    empty.append(h, p);
    els.messages.append(empty);
  }

  const PAGE = 200; // transcript entries per request; older ones come with "Show earlier messages"

  function entryBubble(e) {
    if (field(e, "event") === "undelivered") return note("Not delivered: " + String(field(e, "text") ?? ""), "error");
    const role = field(e, "role") === "user" ? "user" : "assistant";
    const row = bubble(role, String(field(e, "text", "content") ?? ""), field(e, "via") ? "via-tool" : "");
    const sender = field(e, "sender");
    if (sender && typeof sender === "object" && sender.id != null) { // a chat with many speakers: who said it
      const who = document.createElement("div");
      who.className = "who";
      who.textContent = sender.name ? sender.name + " (id " + sender.id + ")" : "id " + sender.id;
      row.classList.add("has-who");
      row.prepend(who);
    }
    return row;
  }

  function transcriptUrl(key, before) {
    return chatPath(key) + "/transcript?limit=" + PAGE + (before == null ? "" : "&before=" + encodeURIComponent(before));
  }

  // A button that loads the page of entries before `before`, keeping the view where it was.
  function earlierButton(key, before) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "earlier secondary";
    button.textContent = "Show earlier messages";
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        const body = await apiJson(transcriptUrl(key, before));
        if (key !== state.chatKey || !button.isConnected) return;
        const fromBottom = els.transcript.scrollHeight - els.transcript.scrollTop;
        const next = field(body, "before");
        const nodes = listOf(body, "entries", "transcript", "data", "items").map(entryBubble);
        button.replaceWith(...(next == null ? [] : [earlierButton(key, next)]), ...nodes);
        els.transcript.scrollTop = els.transcript.scrollHeight - fromBottom;
      } catch (err) {
        button.disabled = false;
        button.textContent = "Could not load earlier messages (" + err.message + "); try again";
      }
    });
    return button;
  }

  async function loadTranscript(key) {
    els.messages.replaceChildren();
    let entries = [];
    let before = null;
    for (;;) {
      const sends = state.sends;
      try {
        // an unknown chat (a new one) has an empty transcript, not an error
        const body = await apiJson(transcriptUrl(key, null));
        entries = listOf(body, "entries", "transcript", "data", "items");
        before = field(body, "before") ?? null;
      } catch (err) {
        if (key === state.chatKey) {
          els.messages.replaceChildren(note(err.status === 403 ? "This API key may not read chat " + key + "." : err.message, "error"));
        }
        return;
      }
      if (key !== state.chatKey) return; // the user moved on while this loaded
      // A turn sent and finished while this loaded is neither in this read nor live any more:
      // read again rather than wipe it from the screen.
      if (sends === state.sends || state.live.has(key)) break;
    }
    els.messages.replaceChildren();
    if (before != null) els.messages.append(earlierButton(key, before));
    els.messages.append(...entries.map(entryBubble));
    const live = state.live.get(key);
    if (live) els.messages.append(...live);
    if (!entries.length && !live) showEmpty();
    scrollDown(true);
  }

  function newKey() {
    const rand = Math.random().toString(36).slice(2, 8);
    return "web:" + rand;
  }

  async function selectChat(key) {
    state.chatKey = key;
    if (location.hash.slice(1) !== encodeURIComponent(key)) history.replaceState(null, "", "#" + encodeURIComponent(key));
    els.chatKey.value = key;
    els.chatKey.readOnly = !state.drafts.has(key);
    els.chatKey.title = state.drafts.has(key) ? "Rename this new chat before the first message" : "";
    updateComposer();
    renderChatList();
    await loadTranscript(key);
    els.input.focus();
  }

  function startNewChat() {
    const key = newKey();
    state.drafts.add(key);
    selectChat(key);
  }

  // A new chat may be renamed until its first message (then the server knows it by name).
  els.chatKey.addEventListener("change", () => {
    if (els.chatKey.readOnly) return;
    const old = state.chatKey;
    const key = els.chatKey.value.trim();
    if (!key || key === old) {
      els.chatKey.value = old;
      return;
    }
    state.drafts.delete(old);
    if (!state.known.some((c) => c.key === key)) state.drafts.add(key);
    selectChat(key);
  });

  // ---------------------------------------------------------------- one streamed turn

  function shortArgs(args) {
    if (!args || typeof args !== "object") return args ? String(args) : "";
    if (typeof args.command === "string") return args.command;
    const first = Object.values(args).find((v) => typeof v === "string");
    return first || JSON.stringify(args);
  }

  // What the marker under a cut answer says, by the result's finishReason ("stop": no marker).
  const CUT = {
    length: "Answer cut: the model reached its output token limit (llm.maxTokens). Ask it to continue, or raise the limit.",
    timeout: "Answer cut: the time limit ran out while it was being written (llm.timeoutSeconds). What arrived is kept; ask it to continue.",
    content_filter: "Answer cut: the provider's content filter withheld the rest.",
    error: "Answer cut: the provider ended it with an error after sending part of it.",
  };

  // "tokens in 51 · out 3 · 1 request", as the CLI prints after each answer.
  function usageLine(usage) {
    if (!usage || typeof usage !== "object") return null;
    const n = (name) => Number(field(usage, name) ?? 0);
    const requests = n("requests");
    if (!requests) return null; // a turn that failed before reaching the model used nothing
    const div = document.createElement("div");
    div.className = "usage";
    div.textContent =
      "tokens in " + n("inputTokens") + " \u00b7 out " + n("outputTokens") + " \u00b7 " + requests + (requests === 1 ? " request" : " requests");
    return div;
  }

  // One assistant turn on screen: text segments, tool steps and approvals in arrival order.
  class Turn {
    constructor(key) {
      this.key = key;
      this.el = document.createElement("div");
      this.el.className = "msg assistant turn";
      this.body = document.createElement("div");
      this.body.className = "turn-body";
      this.el.append(this.body);
      this.typing = document.createElement("div");
      this.typing.className = "typing";
      this.typing.setAttribute("aria-label", "the agent is working");
      this.typing.append(document.createElement("span"), document.createElement("span"), document.createElement("span"));
      this.body.append(this.typing);
      this.segment = null; // current text segment {el, text}
      this.tools = new Map();
      this.sawText = false;
      this.pending = false;
      this.notice = null; // the "older messages were summarised" line, placed when the turn is done
    }

    place(node) {
      this.body.insertBefore(node, this.typing);
      if (this.key === state.chatKey) scrollDown();
    }

    text(delta) {
      if (!this.segment) {
        const el = document.createElement("div");
        el.className = "bubble md streaming";
        this.segment = { el, text: "" };
        this.place(el);
      }
      this.segment.text += delta;
      this.sawText = true;
      if (!this.pending) {
        // re-render at most once per frame: the renderer runs over the whole segment
        this.pending = true;
        requestAnimationFrame(() => {
          this.pending = false;
          this.flushText();
        });
      }
    }

    flushText() {
      if (this.segment) this.segment.el.innerHTML = md.render(this.segment.text);
      if (this.key === state.chatKey) scrollDown();
    }

    endSegment() {
      if (this.segment) {
        this.flushText();
        this.segment.el.classList.remove("streaming");
      }
      this.segment = null;
    }

    toolStarted(d) {
      this.endSegment();
      const id = field(d, "toolCallId", "tool_call_id") || "tool-" + this.tools.size;
      const tool = String(field(d, "tool", "toolName", "name") || "tool");
      const args = field(d, "args", "arguments");
      const details = document.createElement("details");
      details.className = "tool running";
      details.dataset.tool = tool;
      const summary = document.createElement("summary");
      const icon = document.createElement("span");
      icon.className = "tool-icon";
      const name = document.createElement("span");
      name.className = "tool-name";
      name.textContent = tool;
      const brief = document.createElement("code");
      brief.className = "tool-brief";
      brief.textContent = shortArgs(args).slice(0, 160);
      summary.append(icon, name, brief);
      const result = document.createElement("pre");
      result.className = "tool-result";
      result.hidden = true;
      details.append(summary);
      // the arguments in full, unless the one line above already shows all of them
      const values = args && typeof args === "object" ? Object.values(args) : [args];
      if (!(values.length <= 1 && brief.textContent === String(values[0] ?? ""))) {
        const argsPre = document.createElement("pre");
        argsPre.className = "tool-args";
        argsPre.textContent = typeof args === "string" ? args : JSON.stringify(args ?? {}, null, 2);
        details.append(argsPre);
      }
      details.append(result);
      this.tools.set(id, { details, result });
      this.place(details);
      // chat_send is the agent speaking to the user mid-turn: show the words, not only the step
      if (tool === "chat_send" && args && typeof args.text === "string") {
        const said = bubble("assistant", args.text, "via-tool");
        this.place(said.firstChild);
      }
    }

    toolFinished(d) {
      const id = field(d, "toolCallId", "tool_call_id");
      const entry = this.tools.get(id) || [...this.tools.values()].find((t) => t.details.classList.contains("running"));
      if (!entry) return;
      const ok = field(d, "success") !== false;
      entry.details.classList.remove("running");
      entry.details.classList.add(ok ? "ok" : "failed");
      const summary = field(d, "summary");
      if (summary) {
        entry.result.hidden = false;
        entry.result.textContent = String(summary);
      }
    }

    approval(d) {
      this.endSegment();
      const id = String(field(d, "approvalId", "approval_id", "id") || "");
      const card = document.createElement("div");
      card.className = "approval";
      card.dataset.approvalId = id;
      const title = document.createElement("div");
      title.className = "approval-title";
      title.textContent = "The agent wants to run " + (field(d, "tool") || "a command") + ":";
      const cmd = document.createElement("pre");
      cmd.className = "approval-command";
      cmd.textContent = String(field(d, "command") ?? "");
      const buttons = document.createElement("div");
      buttons.className = "approval-buttons";
      const yes = document.createElement("button");
      yes.type = "button";
      yes.className = "approve";
      yes.textContent = "Approve";
      const no = document.createElement("button");
      no.type = "button";
      no.className = "deny secondary";
      no.textContent = "Deny";
      const outcome = document.createElement("span");
      outcome.className = "approval-outcome";
      buttons.append(yes, no, outcome);
      card.append(title, cmd, buttons);
      const answer = async (approve) => {
        yes.disabled = no.disabled = true;
        outcome.textContent = "sending…";
        try {
          await apiJson("v1/approvals/" + encodeURIComponent(id), {
            method: "POST",
            headers: { "Content-Type": "application/json" },
            body: JSON.stringify({ approve }),
          });
          card.classList.add("answered", approve ? "approved" : "denied");
          outcome.textContent = approve ? "\u2713 Approved" : "\u2715 Denied";
        } catch (err) {
          outcome.textContent = "Could not answer: " + err.message;
          card.classList.add("failed");
        }
      };
      yes.addEventListener("click", () => answer(true));
      no.addEventListener("click", () => answer(false));
      this.place(card);
    }

    // The turn summarised older messages: the server sends the line to show (ship.json
    // context.chatHistory.notice), or null when the notice is off; the page adds nothing of its own.
    // Kept until the turn is done, so it stands under the whole answer (and its usage line).
    compacted(d) {
      const text = field(d, "notice");
      if (typeof text !== "string" || !text) return;
      this.notice = note(text, "compacted");
      this.notice.title = field(d, "removed") + " older messages summarised, " + field(d, "kept") + " kept";
    }

    done(d) {
      const result = field(d, "result") || d || {};
      this.endSegment();
      const output = String(field(result, "output") ?? "");
      if (field(result, "success") === false) {
        // the server's message already says what failed ("The run failed: …"): shown as it is
        this.place(note(output || "The turn failed for an unknown reason.", "error"));
      } else {
        if (!this.sawText && output) {
          this.text(output);
          this.endSegment();
        }
        const cut = CUT[field(result, "finishReason")];
        if (cut) {
          const marker = note("\u2702 " + cut, "cut");
          marker.dataset.finishReason = field(result, "finishReason");
          this.place(marker);
        }
      }
      const usage = usageLine(field(result, "usage"));
      if (usage) this.place(usage);
      if (this.notice) this.place(this.notice);
      this.finish();
    }

    error(message) {
      this.endSegment();
      this.place(note(message, "error"));
      this.finish();
    }

    finish() {
      this.typing.remove();
      this.el.classList.add("finished");
      for (const t of this.tools.values()) t.details.classList.remove("running");
      for (const b of this.el.querySelectorAll(".approval button")) {
        if (!b.closest(".approved, .denied")) b.disabled = true;
      }
    }
  }

  async function send(text) {
    const key = state.chatKey;
    if (!key || state.live.has(key)) return;
    const empty = els.messages.querySelector(".empty");
    if (empty) empty.remove();
    const asked = bubble("user", text);
    const turn = new Turn(key);
    state.live.set(key, [asked, turn.el]); // kept on screen if the transcript reloads meanwhile
    state.sends += 1;
    els.messages.append(asked, turn.el);
    scrollDown(true);
    updateComposer();
    renderChatList();
    let finished = false;
    const stop = new AbortController();
    state.stops.set(key, stop);
    try {
      const resp = await api(chatPath(key) + "/messages", {
        signal: stop.signal,
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify({ text }),
      });
      if (!resp.ok) throw new ApiError(resp.status, await errorMessage(resp));
      state.used.set(key, new Date().toISOString());
      if (state.drafts.delete(key)) {
        state.known.unshift({ key, when: new Date().toISOString() });
        if (key === state.chatKey) els.chatKey.readOnly = true;
      }
      const type = resp.headers.get("Content-Type") || "";
      if (!type.includes("text/event-stream")) {
        turn.done(await resp.json()); // a server that answered in one piece
        finished = true;
      } else {
        await window.shipSse.read(resp, (name, raw) => {
          let data = {};
          try {
            data = raw ? JSON.parse(raw) : {};
          } catch (_) {
            data = { text: raw };
          }
          switch (name) {
            case "text_delta":
              turn.text(String(field(data, "text", "delta") ?? ""));
              break;
            case "tool_started":
              turn.toolStarted(data);
              break;
            case "tool_finished":
              turn.toolFinished(data);
              break;
            case "approval_required":
              turn.approval(data);
              break;
            case "compacted":
              turn.compacted(data);
              break;
            case "done":
              turn.done(data);
              finished = true;
              break;
            case "error": {
              const err = field(data, "error") || data;
              turn.error(typeof err === "string" ? err : field(err, "message") || JSON.stringify(err));
              finished = true;
              break;
            }
            default:
              break; // an event this page does not know yet: ignore it
          }
        });
        if (!finished) turn.error("The connection ended before the answer was complete.");
      }
    } catch (err) {
      if (err.name === "AbortError") turn.error("Stopped. The server cancels the turn; nothing of it is kept in the chat's history.");
      else turn.error(err.status === 403 ? "This API key may not use chat " + key + "." : err.message);
    } finally {
      state.stops.delete(key);
      state.live.delete(key);
      updateComposer();
      loadChats();
    }
  }

  function updateComposer() {
    const busy = state.live.has(state.chatKey);
    els.send.disabled = !busy && !els.input.value.trim();
    els.send.textContent = busy ? "Stop" : "Send";
    els.send.setAttribute("aria-label", busy ? "Stop the answer" : "Send");
    els.composer.classList.toggle("busy", busy);
    setStatus(busy ? "answering…" : "");
  }

  // The full hint fits a desktop composer; a phone-width one gets the short form (no overflow).
  const narrow = window.matchMedia("(max-width: 600px)");
  function fitPlaceholder() {
    els.input.placeholder = narrow.matches ? "Message the agent…" : "Message the agent…  (Enter sends, Shift+Enter for a new line)";
  }
  fitPlaceholder();
  narrow.addEventListener("change", fitPlaceholder);

  function autosize() {
    els.input.style.height = "auto";
    els.input.style.height = Math.min(els.input.scrollHeight, 220) + "px";
  }

  els.composer.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (state.live.has(state.chatKey)) {
      // Stop: closing the stream disconnects, and the server cancels the turn
      if (ev.submitter === els.send) state.stops.get(state.chatKey)?.abort();
      return;
    }
    const text = els.input.value.trim();
    if (!text) return;
    els.input.value = "";
    autosize();
    send(text);
  });
  els.input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      els.composer.requestSubmit();
    }
  });
  els.input.addEventListener("input", () => {
    autosize();
    updateComposer();
  });
  els.newChat.addEventListener("click", startNewChat);
  els.changeKey.addEventListener("click", async () => {
    if (await askForKey("Enter the API key for this server.")) {
      await loadChats();
      if (state.chatKey) loadTranscript(state.chatKey);
    }
  });
  els.forgetKey.addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORAGE);
    showKeyState();
  });
  // The address bar names the chat (#web%3Aalice): reload and links keep the conversation.
  function hashKey() {
    try {
      return decodeURIComponent(location.hash.slice(1));
    } catch (_) {
      return "";
    }
  }

  function openChat(key) {
    if (!state.known.some((c) => c.key === key)) state.drafts.add(key); // listed as new until used
    selectChat(key);
  }

  window.addEventListener("hashchange", () => {
    const key = hashKey();
    if (key && key !== state.chatKey) openChat(key);
  });

  async function loadAgentName() {
    try {
      const body = await apiJson("v1/models");
      const name = field(listOf(body, "data")[0], "id");
      if (name) {
        els.agentName.textContent = name;
        document.title = name + " · shipagent";
      }
    } catch (_) {
      /* the name is decoration */
    }
  }

  async function start() {
    showKeyState();
    await loadChats(); // a 401 here asks for the key before anything else
    loadAgentName();
    const key = hashKey() || (state.known.length ? state.known[0].key : "");
    if (key) openChat(key);
    else startNewChat();
  }

  start();
})();
