// server.mjs - the static HTTP server the browser test loads everything from, on 127.0.0.1 only.
//
//   const server = await startServer({ '/tjs/': DIR, '/ort/': DIR, ... });
//   server.origin      // http://127.0.0.1:PORT
//   server.foreign     // every request that named another host (see below)
//   await server.close();
//
// Each mount maps a URL prefix to a folder; GET and HEAD of a file under it are answered with the
// file (a path that leaves the folder, or names no file, is 404). Chromium is started with this
// server as its proxy: loopback addresses bypass a proxy, so a request that reaches the server in
// proxy form (an absolute URL, or CONNECT) is one for another host. It is refused (403) and
// recorded in `foreign` as { request, web }, whatever in the browser made it: `web` is true when
// the request carries the headers a page or worker's fetch has (Sec-Fetch-Mode, Origin or
// Referer); the browser's own background requests (component updates, network time, account
// checks) and CONNECT tunnels, whose headers the proxy does not see, have it false.
import fs from 'fs';
import http from 'http';
import path from 'path';

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.map': 'application/json; charset=utf-8',
};

export async function startServer(mounts) {
  const roots = Object.entries(mounts).map(([prefix, dir]) => [prefix, path.resolve(dir)]);
  const foreign = [];
  const served = [];
  const missing = [];

  const fileFor = (urlPath) => {
    let decoded;
    try {
      decoded = decodeURIComponent(urlPath);
    } catch {
      return null;
    }
    for (const [prefix, root] of roots) {
      if (!decoded.startsWith(prefix)) continue;
      const file = path.resolve(root, '.' + path.posix.normalize('/' + decoded.slice(prefix.length)));
      if (file !== root && !file.startsWith(root + path.sep)) return null;
      return fs.existsSync(file) && fs.statSync(file).isFile() ? file : null;
    }
    return null;
  };

  const server = http.createServer((req, res) => {
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(req.url)) {  // proxy form: a request for another host
      const h = req.headers;
      foreign.push({ request: `${req.method} ${req.url}`, web: Boolean(h['sec-fetch-mode'] || h.origin || h.referer) });
      res.writeHead(403, { 'content-type': 'text/plain' }).end('no network in this test\n');
      return;
    }
    const urlPath = req.url.split('?')[0];
    const file = (req.method === 'GET' || req.method === 'HEAD') ? fileFor(urlPath) : null;
    if (!file) {
      missing.push(`${req.method} ${urlPath}`);
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    served.push(urlPath);
    const size = fs.statSync(file).size;
    res.writeHead(200, {
      'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream',
      'content-length': size,
      'cache-control': 'no-store',
    });
    if (req.method === 'HEAD') res.end();
    else fs.createReadStream(file).pipe(res);
  });
  // A CONNECT tunnel (https or wss through the proxy) is refused the same way.
  server.on('connect', (req, socket) => {
    foreign.push({ request: `CONNECT ${req.url}`, web: false });
    socket.end('HTTP/1.1 403 Forbidden\r\n\r\n');
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address();
  return {
    origin: `http://127.0.0.1:${port}`,
    port,
    foreign,
    served,
    missing,
    close: () => new Promise((resolve) => {
      server.closeAllConnections?.();
      server.close(() => resolve());
    }),
  };
}
