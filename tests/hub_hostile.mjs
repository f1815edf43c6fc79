// hub_hostile.mjs - the misbehaviours of tests/hub_server.mjs: a repository configured with
// "hostile": {"kind": K, ...} answers honestly except in the one way K names. Each answer that
// breaks the protocol is written as raw bytes on the socket, so nothing in Node's HTTP server
// corrects it.
//
//   etag-incomplete   tokenizer.json's ETag is "<sha256 of model.safetensors>.incomplete"
//   etag-sha256       tokenizer.json's ETag is model.safetensors' sha256 (a non-LFS file named
//                     like an LFS blob)
//   etag-lfs-sha1     model.safetensors' X-Linked-Etag is 40 hex digits, not a sha256
//   etag-wrong        config.json's ETag is the git blob sha1 of other bytes
//   config-bytes      config.json's bytes are changed (same length), its ETag kept
//   short-body        config.json's GET announces its length and sends half, every time
//   short-head        config.json's HEAD announces 10 bytes fewer than the GET sends
//   gzip              config.json's GET is gzip-encoded although identity was asked for
//   huge-declared     config.json is announced at 10 GiB
//   huge-stream       config.json comes without a length, an endless stream of spaces
//   silent            config.json's HEAD is never answered (the connection stays open)
//   trickle-headers   config.json's HEAD headers come a byte every 200 ms, forever
//   trickle-body      config.json's GET body comes 4 bytes a second
//   trickle-lfs       model.safetensors from the CDN comes 4 bytes a second
//   redirect-scheme   model.safetensors redirects to file:///etc/passwd
//   redirect-loop     the CDN redirects model.safetensors to itself, forever
//   redirect-to       model.safetensors redirects to `location` ({sha256}, {trap} (the trap
//                     server's URL), {trapPort} and {cdnPort} replaced)
//   huge-size         model.safetensors' X-Linked-Size is 2^62
//   spliced-resume    the CDN drops model.safetensors after 1000 bytes, then answers a resume
//                     with a part that starts at 0
//   escape-message    config.json's HEAD answers 418 with terminal escapes in X-Error-Message
//   huge-header       config.json's HEAD has a 512 KiB header line
import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function rawHead(status, headers) {
  let s = `HTTP/1.1 ${status} X\r\n`;
  for (const [k, v] of Object.entries(headers)) s += `${k}: ${v}\r\n`;
  return s + "Connection: close\r\n\r\n";
}

// Writes chunks while the socket takes them; resolves when it closes or `total` bytes went.
async function stream(sock, total, chunk) {
  let sent = 0;
  while (sent < total && !sock.destroyed) {
    const ok = sock.write(chunk);
    sent += chunk.length;
    if (!ok) await new Promise((r) => { sock.once("drain", r); sock.once("close", r); });
  }
  return sent;
}

async function trickle(sock, bytes, perSecond) {
  for (let i = 0; i < bytes.length && !sock.destroyed; i += perSecond) {
    sock.write(bytes.subarray(i, i + perSecond));
    await sleep(1000);
  }
  sock.end();
}

const gitSha1 = (buf) => createHash("sha1").update(`blob ${buf.length}\0`).update(buf).digest("hex");

// ctx: {server: "hub"|"cdn", req, res, repo, file, entry (buf, sha1, sha256), lfsEntry (the
// repository's model.safetensors), cdnBase, trapBase, log}. Returns true when it answered.
export async function misbehave(h, ctx) {
  const { server, req, file, entry, repo } = ctx;
  const sock = req.socket;
  const head = req.method === "HEAD";
  const small = (status, headers, body) => {
    ctx.log.status = status;
    sock.write(rawHead(status, headers));
    if (!head && body) sock.write(body);
    sock.end();
    return true;
  };
  const base = { "X-Repo-Commit": repo.commit };
  if (server === "hub" && file === "tokenizer.json" && (h.kind === "etag-incomplete" || h.kind === "etag-sha256")) {
    const etag = ctx.lfsEntry.sha256 + (h.kind === "etag-incomplete" ? ".incomplete" : "");
    return small(200, { ...base, ETag: `"${etag}"`, "Content-Length": entry.buf.length }, entry.buf);
  }
  if (server === "hub" && file === "model.safetensors" && (h.kind === "etag-lfs-sha1" || h.kind === "huge-size" ||
      h.kind === "redirect-scheme" || h.kind === "redirect-to")) {
    let location = `${ctx.cdnBase}/blobs/${entry.sha256}?repo=${encodeURIComponent(ctx.repoId)}`;
    if (h.kind === "redirect-scheme") location = "file:///etc/passwd";
    if (h.kind === "redirect-to")
      location = h.location.replace("{sha256}", entry.sha256).replace("{trap}", ctx.trapBase)
        .replace("{trapPort}", ctx.trapBase.split(":").pop()).replace("{cdnPort}", ctx.cdnBase.split(":").pop());
    return small(302, {
      ...base,
      Location: location,
      "X-Linked-Etag": `"${h.kind === "etag-lfs-sha1" ? entry.sha1 : entry.sha256}"`,
      "X-Linked-Size": h.kind === "huge-size" ? "4611686018427387904" : String(entry.buf.length),
      ETag: `"${entry.sha1}"`,
      "Content-Length": "0",
    });
  }
  if (server === "cdn" && file === "model.safetensors") {
    if (h.kind === "trickle-lfs" && !head) {
      ctx.log.status = 200;
      sock.write(rawHead(200, { "Content-Length": entry.buf.length }));
      await trickle(sock, entry.buf, 4);
      return true;
    }
    if (h.kind === "redirect-loop") return small(302, { Location: req.url, "Content-Length": "0" });
    if (h.kind === "spliced-resume" && !head) {
      ctx.log.status = req.headers.range ? 206 : 200;
      if (req.headers.range) {
        const n = entry.buf.length;
        sock.write(rawHead(206, { "Content-Range": `bytes 0-${n - 1}/${n}`, "Content-Length": n }));
        sock.end(entry.buf);
      } else {
        sock.write(rawHead(200, { "Content-Length": entry.buf.length }));
        sock.write(entry.buf.subarray(0, 1000));
        await sleep(50);
        sock.destroy();
      }
      return true;
    }
    return false;
  }
  if (server !== "hub" || file !== "config.json") return false;
  const buf = entry.buf;
  const etag = `"${entry.sha1}"`;
  switch (h.kind) {
    case "etag-wrong":
      return small(200, { ...base, ETag: `"${gitSha1(Buffer.from("{}"))}"`, "Content-Length": buf.length }, buf);
    case "config-bytes": {
      const other = Buffer.from(buf);
      const i = other.findIndex((c) => c >= 0x30 && c <= 0x38);
      other[i] += 1;
      return small(200, { ...base, ETag: etag, "Content-Length": buf.length }, other);
    }
    case "short-body":
      if (head) return false;
      ctx.log.status = 200;
      sock.write(rawHead(200, { ...base, ETag: etag, "Content-Length": buf.length }));
      sock.write(buf.subarray(0, buf.length >> 1));
      await sleep(50);
      sock.destroy();
      return true;
    case "short-head":
      return head ? small(200, { ...base, ETag: etag, "Content-Length": buf.length - 10 }) : false;
    case "gzip": {
      if (head) return false;
      const gz = gzipSync(buf);
      return small(200, { ...base, ETag: etag, "Content-Encoding": "gzip", "Content-Length": gz.length }, gz);
    }
    case "huge-declared":
      if (!head) {
        ctx.log.status = 200;
        sock.write(rawHead(200, { ...base, ETag: etag, "Content-Length": "10737418240" }));
        ctx.log.sent = await stream(sock, 10 * 2 ** 30, Buffer.alloc(1 << 20, 0x20));
        sock.destroy();
        return true;
      }
      return small(200, { ...base, ETag: etag, "Content-Length": "10737418240" });
    case "huge-stream":
      if (head) return small(200, { ...base, ETag: etag });
      ctx.log.status = 200;
      sock.write(rawHead(200, { ...base, ETag: etag }));
      ctx.log.sent = await stream(sock, 10 * 2 ** 30, Buffer.alloc(1 << 20, 0x20));
      sock.destroy();
      return true;
    case "silent":
      if (!head) return false;
      ctx.log.status = 0;
      await new Promise((r) => sock.once("close", r));
      return true;
    case "trickle-headers":
      if (!head) return false;
      ctx.log.status = 200;
      sock.write("HTTP/1.1 200 OK\r\nX-Pad: ");
      while (!sock.destroyed) {
        sock.write("a");
        await sleep(200);
      }
      return true;
    case "trickle-body":
      if (head) return false;
      ctx.log.status = 200;
      sock.write(rawHead(200, { ...base, ETag: etag, "Content-Length": buf.length }));
      await trickle(sock, buf, 4);
      return true;
    case "escape-message":
      if (!head) return false;
      return small(418, { ...base, "X-Error-Message": "\x1b[2J\x1b]0;owned\x07red\x1b[31m text\r\x08" });
    case "huge-header":
      if (!head) return false;
      return small(200, { ...base, ETag: etag, "X-Pad": "a".repeat(512 << 10) });
  }
  return false;
}
