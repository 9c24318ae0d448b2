// Node's own http2 module as an origin, serving the routes of backend.py itself.
// Environment: PORT, CERT, KEY, IDS (a file: one x-id per line per request received),
// MAX_STREAMS (if set: a session is closed gracefully on its Nth stream).
// SIGHUP: every open session is closed gracefully (GOAWAY, its streams finish);
// the server goes on listening, so new connections are served as before.
"use strict";
const http2 = require("node:http2");
const fs = require("node:fs");
const crypto = require("node:crypto");

const BIG_SIZE = 16 * 1024 * 1024;
const big = Buffer.alloc(BIG_SIZE);
for (let i = 0; i < BIG_SIZE; i++) big[i] = i % 251;
const maxStreams = Number(process.env.MAX_STREAMS || 0);
const ids = fs.openSync(process.env.IDS, "a");
const sessions = new Set();

const server = http2.createSecureServer({
  cert: fs.readFileSync(process.env.CERT),
  key: fs.readFileSync(process.env.KEY),
  settings: { maxConcurrentStreams: 128 },
});

server.on("session", (session) => {
  sessions.add(session);
  session.streamCount = 0;
  session.on("close", () => sessions.delete(session));
  session.on("error", () => {});
});

function readBody(stream, done) {
  const parts = [];
  stream.on("data", (part) => parts.push(part));
  stream.on("end", () => done(Buffer.concat(parts)));
}

server.on("stream", (stream, headers) => {
  stream.on("error", () => {});
  const session = stream.session;
  session.streamCount += 1;
  if (maxStreams && session.streamCount === maxStreams) session.close();
  const id = headers["x-id"];
  if (id) fs.writeSync(ids, id + "\n");
  const url = new URL(headers[":path"], "https://origin");
  const octets = { ":status": 200, "content-type": "application/octet-stream" };
  switch (url.pathname) {
    case "/hello":
      stream.respond({ ":status": 200 });
      stream.end("hello\n");
      return;
    case "/echo":
    case "/slow":
      readBody(stream, (body) => {
        setTimeout(() => {
          stream.respond({ ...octets, "content-length": body.length });
          stream.end(body);
        }, Number(url.searchParams.get("ms") || 0));
      });
      return;
    case "/sha256": {
      const hash = crypto.createHash("sha256");
      stream.on("data", (part) => hash.update(part));
      stream.on("end", () => {
        stream.respond({ ":status": 200 });
        stream.end(hash.digest("hex"));
      });
      return;
    }
    case "/big":
      stream.respond({ ...octets, "content-length": BIG_SIZE });
      stream.end(big);
      return;
    case "/stream": {
      stream.respond({ ":status": 200 });
      let i = 0;
      const next = () => {
        stream.write(`chunk ${String(i).padStart(2, "0")}\n`);
        if (++i === Number(process.env.STREAM_CHUNKS)) stream.end();
        else setTimeout(next, Number(process.env.STREAM_GAP_MS));
      };
      next();
      return;
    }
    default:
      stream.respond({ ":status": 404 });
      stream.end();
  }
});

process.on("SIGHUP", () => {
  for (const session of sessions) session.close();
});
process.on("SIGTERM", () => process.exit(0));
server.listen(Number(process.env.PORT), "127.0.0.1");
