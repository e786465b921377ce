// Server-Sent Events read from a fetch() response body.
//
// A turn is a POST (the user's text is the body) and EventSource can only GET, so the page
// reads the stream itself: "event:" and "data:" lines, a blank line ends an event, ":" lines
// are comments (keep-alives, the OpenAI dialect's approval notes). Line ends may be \n, \r\n or
// \r, and a read may end anywhere, even between the \r and \n of one line end.
(function (global) {
  "use strict";

  // Calls onEvent(name, data) for every event of resp's body, in order; resolves at its end.
  async function read(resp, onEvent) {
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let name = "";
    let data = [];
    const dispatch = () => {
      if (data.length) onEvent(name || "message", data.join("\n"));
      name = "";
      data = [];
    };
    for (;;) {
      const { value, done } = await reader.read();
      buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
      let nl;
      while ((nl = buffer.search(/\r\n|\r|\n/)) !== -1) {
        if (!done && nl === buffer.length - 1 && buffer[nl] === "\r") break; // maybe half of a \r\n
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + (buffer[nl] === "\r" && buffer[nl + 1] === "\n" ? 2 : 1));
        if (line === "") dispatch();
        else if (line.startsWith(":")) continue; // comment / keep-alive
        else {
          const colon = line.indexOf(":");
          const fieldName = colon === -1 ? line : line.slice(0, colon);
          let val = colon === -1 ? "" : line.slice(colon + 1);
          if (val.startsWith(" ")) val = val.slice(1);
          if (fieldName === "event") name = val;
          else if (fieldName === "data") data.push(val);
        }
      }
      if (done) break;
    }
    // an event the server did not finish with its blank line is dropped, as EventSource does:
    // the page then says the connection ended before the answer was complete
  }

  global.shipSse = { read };
})(window);
