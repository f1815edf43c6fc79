// hub_server.mjs - a Hugging Face Hub on loopback for the hub tests: it serves repository
// folders over the hub's real endpoints and a CDN on another host, with faults injected on
// request.
//
//   node tests/hub_server.mjs CONFIG.json
//
// CONFIG: {"token": "hf_...", "repos": {"org/name": {"dir": "...", "gated": false,
//          "private": false, "tags": ["v1"], "hostile": {"kind": ...}}},
//          "renamed": {"org/old": "org/name"}, "host": "127.0.0.1", "cdnHost": "127.0.0.2",
//          "trapHost": "10.0.0.1"}
// "hostile" makes the repository misbehave in one way (tests/hub_hostile.mjs). "trapHost" starts
// a third server there that answers anything with 200 and logs it as server "trap": a request
// that must never be made shows in the log.
//
// Prints one line, {"port": P, "cdn": "http://HOST:PORT"}, once both listen; exits when its
// standard input closes. The hub (127.0.0.1:P):
//   HEAD/GET /{repo}/resolve/{rev}/{path}: X-Repo-Commit, and for *.safetensors and *.bin (the
//     LFS-like files) X-Linked-Etag (sha256), X-Linked-Size and a 302 to the CDN; for others
//     ETag (the git blob sha1), Content-Length, the bytes (Range honoured);
//     X-Error-Code RepoNotFound (401), GatedRepo (401 without a token, 403 with a wrong one),
//     RevisionNotFound (404), EntryNotFound (404); a renamed repo answers a relative 307.
//   GET /api/models/{repo}[/revision/{rev}]: the model info (id, sha, private, gated, siblings;
//     their sizes and LFS digests with ?blobs=true), as HfApi.model_info reads it.
//   GET /api/models/{repo}/tree/{rev}[/{path}][?recursive=true]: the files (oid: the git blob sha1,
//     of the LFS pointer for the LFS-like files, which carry "lfs": {oid, size, pointerSize}) and
//     folders under path, as HfApi.list_repo_tree reads it (one page, no Link header). The API
//     answers RepoNotFound, RevisionNotFound and EntryNotFound like resolve; a gated repository's
//     info and tree are open, as on the Hub; a renamed one answers a relative 307.
//   GET /_control/faults?set=JSON   replaces the faults; GET /_control/log the request log;
//   GET /_control/stats             {"maxCdnInFlight": N}; GET /_control/reset clears all.
// The CDN (127.0.0.2, or 127.0.0.1 on another port): GET/HEAD /blobs/{sha256}, Range honoured.
//
// A fault: {"kind": "status"|"drop"|"corrupt"|"delay", "server": "hub"|"cdn" (any when
// absent), "method": "GET"|"HEAD" (any), "file": "name" (any), "times": N (default 1, -1 for
// always), "status": 503, "retryAfter": S, "after": BYTES, "ms": MS}.
import { createHash } from "node:crypto";
import { readFileSync, readdirSync, statSync } from "node:fs";
import http from "node:http";
import path from "node:path";

import { misbehave } from "./hub_hostile.mjs";

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
const lfs = (name) => /\.(safetensors|bin)$/.test(name);

// repo id -> {commit, tags, gated, private, files: Map(path -> {buf, sha1, sha256})}
const repos = new Map();
const blobs = new Map(); // sha256 -> {buf, file}
for (const [id, r] of Object.entries(config.repos || {})) {
  const files = new Map();
  const walk = (dir, prefix) => {
    for (const e of readdirSync(dir).sort()) {
      const full = path.join(dir, e);
      const rel = prefix ? `${prefix}/${e}` : e;
      if (statSync(full).isDirectory()) walk(full, rel);
      else files.set(rel, readFileSync(full));
    }
  };
  walk(r.dir, "");
  const h = createHash("sha1").update(id);
  const entries = new Map();
  for (const [name, buf] of files) {
    const sha1 = createHash("sha1").update(`blob ${buf.length}\0`).update(buf).digest("hex");
    const sha256 = createHash("sha256").update(buf).digest("hex");
    const entry = { buf, sha1, sha256 };
    if (lfs(name)) {
      // The git blob of an LFS file is its pointer.
      const pointer = `version https://git-lfs.github.com/spec/v1\noid sha256:${sha256}\nsize ${buf.length}\n`;
      entry.pointerSize = pointer.length;
      entry.pointerSha1 = createHash("sha1").update(`blob ${pointer.length}\0`).update(pointer).digest("hex");
    }
    entries.set(name, entry);
    h.update(name).update(sha1);
    if (lfs(name)) blobs.set(sha256, { buf, file: name, repo: id });
  }
  repos.set(id, {
    hostile: r.hostile || null,
    commit: h.digest("hex"),
    tags: r.tags || [],
    gated: !!r.gated,
    private: !!r.private,
    files: entries,
  });
}

let faults = [];
let log = [];
let inFlight = 0;
let maxInFlight = 0;
const t0 = Date.now();

// The first fault that matches takes one of its uses.
function takeFault(kind, server, method, file) {
  for (const f of faults) {
    if (f.kind !== kind || f.times === 0) continue;
    if (f.server && f.server !== server) continue;
    if (f.method && f.method !== method) continue;
    if (f.file && f.file !== file) continue;
    if (f.times > 0) f.times -= 1;
    return f;
  }
  return null;
}

function record(server, req, extra) {
  const e = {
    t: Date.now() - t0,
    server,
    method: req.method,
    path: req.url,
    host: req.headers.host || "",
    range: req.headers.range || null,
    auth: req.headers.authorization || null,
    ...extra,
  };
  log.push(e);
  return e;
}

function errorReply(res, status, code, message, headers = {}) {
  const h = { "X-Error-Message": message, "Content-Type": "text/plain", ...headers };
  if (code) h["X-Error-Code"] = code;
  res.writeHead(status, h);
  res.end(`${code}: ${message}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Serves buf with Range support, the faults applied. Returns when the response is finished.
async function serveBytes(req, res, buf, headers, server, file, entry) {
  const total = buf.length;
  let start = 0;
  let status = 200;
  const range = req.headers.range;
  const out = { ...headers };
  if (range) {
    const m = /^bytes=(\d+)-(\d*)$/.exec(range);
    if (m) {
      start = Number(m[1]);
      if (start >= total) {
        res.writeHead(416, { "Content-Range": `bytes */${total}` });
        res.end();
        entry.status = 416;
        return;
      }
      status = 206;
      out["Content-Range"] = `bytes ${start}-${total - 1}/${total}`;
    }
  }
  let body = buf.subarray(start);
  const corrupt = req.method === "GET" ? takeFault("corrupt", server, req.method, file) : null;
  if (corrupt && body.length > 0) {
    body = Buffer.from(body);
    body[Math.floor(body.length / 2)] ^= 0xff;
  }
  out["Content-Length"] = String(body.length);
  out["Accept-Ranges"] = "bytes";
  const delay = takeFault("delay", server, req.method, file);
  if (delay) await sleep(delay.ms || 0);
  entry.status = status;
  res.writeHead(status, out);
  if (req.method === "HEAD") return res.end();
  const drop = takeFault("drop", server, req.method, file);
  if (drop) {
    const n = Math.min(drop.after || 0, body.length - 1);
    entry.dropped = n;
    await new Promise((r) => res.write(body.subarray(0, n), r));
    await sleep(50);
    res.socket.destroy();
    return;
  }
  await new Promise((r) => res.end(body, r));
}

function authOk(req) {
  return config.token && req.headers.authorization === `Bearer ${config.token}`;
}

async function hub(req, res) {
  const url = new URL(req.url, "http://x");
  if (url.pathname.startsWith("/_control/")) {
    // Control requests are not logged.
    const what = url.pathname.slice("/_control/".length);
    let body = {};
    if (what === "faults") {
      faults = JSON.parse(url.searchParams.get("set") || "[]").map((f) => ({ times: 1, ...f }));
    } else if (what === "log") {
      body = log;
    } else if (what === "stats") {
      body = { maxCdnInFlight: maxInFlight };
    } else if (what === "reset") {
      faults = [];
      log = [];
      maxInFlight = 0;
    }
    res.writeHead(200, { "Content-Type": "application/json" });
    return res.end(JSON.stringify(body));
  }
  const entry = record("hub", req, {});
  if (url.pathname.startsWith("/api/")) return api(req, res, url, entry);
  const parts = url.pathname.split("/").slice(1);
  // /{org}/{name}/resolve/{rev}/{path...}
  if (parts.length < 5 || parts[2] !== "resolve") return errorReply(res, 404, "NotFound", "no such endpoint");
  const repoId = `${parts[0]}/${parts[1]}`;
  const rev = decodeURIComponent(parts[3]);
  const file = parts.slice(4).map(decodeURIComponent).join("/");
  entry.file = file;
  if (injectedOrRenamed(req, res, entry, repoId, file,
                        (to) => `/${to}/resolve/${parts.slice(3).join("/")}`)) return;
  const repo = openRepo(req, res, entry, repoId, rev, /*gated=*/true);
  if (!repo) return;
  const f = repo.files.get(file);
  if (f && repo.hostile) {
    const ctx = { server: "hub", req, res, repo, repoId, file, entry: f, lfsEntry: repo.files.get("model.safetensors"),
                  cdnBase, trapBase, log: entry };
    if (await misbehave(repo.hostile, ctx)) return;
  }
  if (!f) {
    entry.status = 404;
    return errorReply(res, 404, "EntryNotFound", "Entry not found", { "X-Repo-Commit": repo.commit });
  }
  if (lfs(file)) {
    const location = `${cdnBase}/blobs/${f.sha256}?expires=1&repo=${encodeURIComponent(repoId)}`;
    const text = `Found. Redirecting to ${location}`;
    entry.status = 302;
    res.writeHead(302, {
      Location: location,
      "X-Repo-Commit": repo.commit,
      "X-Linked-Etag": `"${f.sha256}"`,
      "X-Linked-Size": String(f.buf.length),
      ETag: `"${f.sha1}"`,
      "Content-Length": String(text.length),
    });
    return res.end(req.method === "HEAD" ? undefined : text);
  }
  const etag = file.endsWith(".json") ? `W/"${f.sha1}"` : `"${f.sha1}"`;
  await serveBytes(req, res, f.buf, { "X-Repo-Commit": repo.commit, ETag: etag }, "hub", file, entry);
}

// The repository an API or resolve request names, or null after answering the error the Hub
// gives (a private repository without the token is not found; a gated one without it is only
// refused where `gated` is set: its files, not its info).
function openRepo(req, res, entry, repoId, rev, gated) {
  const repo = repos.get(repoId);
  if (!repo || (repo.private && !authOk(req))) {
    entry.status = 401;
    errorReply(res, 401, "RepoNotFound", "Repository not found");
    return null;
  }
  if (gated && repo.gated && !authOk(req)) {
    entry.status = req.headers.authorization ? 403 : 401;
    errorReply(res, entry.status, "GatedRepo", "Access to model is restricted");
    return null;
  }
  if (!(rev === "main" || rev === repo.commit || repo.tags.includes(rev))) {
    entry.status = 404;
    errorReply(res, 404, "RevisionNotFound", `Invalid rev id: ${rev}`);
    return null;
  }
  return repo;
}

function replyJson(req, res, entry, body) {
  const text = JSON.stringify(body);
  entry.status = 200;
  res.writeHead(200, { "Content-Type": "application/json; charset=utf-8", "Content-Length": String(Buffer.byteLength(text)) });
  res.end(req.method === "HEAD" ? undefined : text);
}

// A tree entry as /api/models/{repo}/tree lists it.
function treeFile(name, f) {
  const e = { type: "file", oid: f.pointerSha1 || f.sha1, size: f.buf.length, path: name };
  if (f.pointerSha1) e.lfs = { oid: f.sha256, size: f.buf.length, pointerSize: f.pointerSize };
  return e;
}

// The folders of a repository, each with its git tree id standing in as a digest of its files.
function folders(repo) {
  const out = new Map();
  for (const [name, f] of repo.files) {
    const segs = name.split("/");
    for (let i = 1; i < segs.length; i++) {
      const dir = segs.slice(0, i).join("/");
      if (!out.has(dir)) out.set(dir, createHash("sha1"));
      out.get(dir).update(name).update(f.sha1);
    }
  }
  return new Map([...out].map(([d, h]) => [d, h.digest("hex")]));
}

// An injected status fault for this request, or a renamed repository's 307 to location(newId):
// answered here (true), or nothing to do (false).
function injectedOrRenamed(req, res, entry, repoId, file, location) {
  const status = takeFault("status", "hub", req.method, file);
  if (status) {
    entry.status = status.status;
    const h = status.retryAfter !== undefined ? { "Retry-After": String(status.retryAfter) } : {};
    errorReply(res, status.status, "", "injected", h);
    return true;
  }
  if (config.renamed && config.renamed[repoId]) {
    entry.status = 307;
    res.writeHead(307, { Location: location(config.renamed[repoId]) });
    res.end();
    return true;
  }
  return false;
}

// GET /api/models/{org}/{name}[/revision/{rev} | /tree/{rev}[/{path}]]
async function api(req, res, url, entry) {
  const parts = url.pathname.split("/").slice(1);
  if (parts.length < 4 || parts[1] !== "models" || !(req.method === "GET" || req.method === "HEAD"))
    return errorReply(res, 404, "NotFound", "no such endpoint");
  const repoId = `${parts[2]}/${parts[3]}`;
  const rest = parts.slice(4);
  if (injectedOrRenamed(req, res, entry, repoId, undefined,
                        (to) => `/api/models/${to}${rest.length ? "/" + rest.join("/") : ""}${url.search}`)) return;
  let kind = "info";
  let rev = "main";
  if (rest.length === 2 && rest[0] === "revision") rev = decodeURIComponent(rest[1]);
  else if (rest.length >= 2 && rest[0] === "tree") {
    kind = "tree";
    rev = decodeURIComponent(rest[1]);
  } else if (rest.length !== 0) return errorReply(res, 404, "NotFound", "no such endpoint");
  const repo = openRepo(req, res, entry, repoId, rev, /*gated=*/false);
  if (!repo) return;
  if (kind === "info") {
    const blobsToo = ["true", "True", "1"].includes(url.searchParams.get("blobs") || "");
    const siblings = [...repo.files].map(([name, f]) => {
      const s = { rfilename: name };
      if (blobsToo) {
        s.size = f.buf.length;
        s.blobId = f.pointerSha1 || f.sha1;
        if (f.pointerSha1) s.lfs = { sha256: f.sha256, size: f.buf.length, pointerSize: f.pointerSize };
      }
      return s;
    });
    return replyJson(req, res, entry, {
      _id: repo.commit.slice(0, 24),
      id: repoId,
      modelId: repoId,
      author: parts[2],
      sha: repo.commit,
      lastModified: "2024-01-01T00:00:00.000Z",
      createdAt: "2024-01-01T00:00:00.000Z",
      private: repo.private,
      gated: repo.gated ? "auto" : false,
      disabled: false,
      downloads: 0,
      likes: 0,
      tags: [],
      siblings,
    });
  }
  // The tree under path: its direct entries, or every entry below it with recursive=true.
  const under = rest.slice(2).map(decodeURIComponent).join("/");
  const recursive = ["true", "True", "1"].includes(url.searchParams.get("recursive") || "");
  const dirs = folders(repo);
  if (under && !dirs.has(under)) {
    entry.status = 404;
    return errorReply(res, 404, "EntryNotFound", `${under} does not exist on "${rev}"`);
  }
  const prefix = under ? `${under}/` : "";
  const take = (p) => p.startsWith(prefix) && (recursive || !p.slice(prefix.length).includes("/"));
  const list = [];
  for (const [d, oid] of dirs) if (take(d)) list.push({ type: "directory", oid, size: 0, path: d });
  for (const [name, f] of repo.files) if (take(name)) list.push(treeFile(name, f));
  return replyJson(req, res, entry, list);
}

async function cdn(req, res) {
  const url = new URL(req.url, "http://x");
  const m = /^\/blobs\/([0-9a-f]{64})$/.exec(url.pathname);
  const blob = m && blobs.get(m[1]);
  const entry = record("cdn", req, { file: blob ? blob.file : null });
  if (!blob) {
    entry.status = 404;
    res.writeHead(404);
    return res.end();
  }
  const status = takeFault("status", "cdn", req.method, blob.file);
  if (status) {
    entry.status = status.status;
    const h = status.retryAfter !== undefined ? { "Retry-After": String(status.retryAfter) } : {};
    res.writeHead(status.status, h);
    return res.end("injected");
  }
  // The repository the hub redirected from (repositories may share a blob).
  const owner = repos.get(url.searchParams.get("repo") || blob.repo);
  if (owner && owner.hostile) {
    const ctx = { server: "cdn", req, res, repo: owner, file: blob.file, entry: { buf: blob.buf, sha256: m[1] },
                  cdnBase, trapBase, log: entry };
    if (await misbehave(owner.hostile, ctx)) return;
  }
  inFlight += 1;
  maxInFlight = Math.max(maxInFlight, inFlight);
  try {
    await serveBytes(req, res, blob.buf, { ETag: `"${m[1]}"` }, "cdn", blob.file, entry);
  } finally {
    inFlight -= 1;
  }
}

const wrap = (fn) => (req, res) =>
  fn(req, res).catch((e) => {
    try {
      res.writeHead(500);
      res.end(String(e));
    } catch {
      res.socket?.destroy();
    }
  });

const listen = (server, host) =>
  new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, host, () => resolve(server.address().port));
  });

async function trap(req, res) {
  record("trap", req, { status: 200 });
  res.writeHead(200, { "Content-Type": "text/plain" });
  res.end("trap");
}

const hostOf = (h) => (h.includes(":") ? `[${h}]` : h);
const hubServer = http.createServer(wrap(hub));
const cdnServer = http.createServer(wrap(cdn));
const hubHost = config.host || "127.0.0.1";
const port = await listen(hubServer, hubHost);
let cdnBase;
try {
  const cdnHost = config.cdnHost || "127.0.0.2";
  cdnBase = `http://${hostOf(cdnHost)}:${await listen(cdnServer, cdnHost)}`;
} catch {
  cdnBase = `http://${hostOf(hubHost)}:${await listen(cdnServer, hubHost)}`;
}
let trapBase = "";
if (config.trapHost) {
  const trapServer = http.createServer(wrap(trap));
  trapBase = `http://${hostOf(config.trapHost)}:${await listen(trapServer, config.trapHost)}`;
}
process.stdout.write(JSON.stringify({ port, cdn: cdnBase, trap: trapBase, trapPort: trapBase ? Number(trapBase.split(":").pop()) : 0 }) + "\n");
process.stdin.on("end", () => process.exit(0));
process.stdin.on("error", () => process.exit(0));
process.stdin.resume();
process.on("SIGTERM", () => process.exit(0));
