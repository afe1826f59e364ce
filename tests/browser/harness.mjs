// Browser-test harness: a static file server on 127.0.0.1 and Debian's Chromium driven by
// playwright-core. WebGPU runs on the CPU through SwiftShader; playwright never downloads a browser.
import { createServer } from 'node:http';
import { readFile, stat } from 'node:fs/promises';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

/** The trunk output folder (`dist/` at the repository root unless DIST says otherwise). */
export const DIST = resolve(process.env.DIST ?? join(fileURLToPath(import.meta.url), '../../../dist'));

/** The browser binary: Debian's chromium unless CHROMIUM names another Chromium-based browser. */
export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';

const BASE_FLAGS = [
  '--no-sandbox',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-quic',
  '--no-first-run',
];

/** WebGPU on the CPU through SwiftShader (no shader-f16, but subgroups and timestamps). */
export const WEBGPU_FLAGS = [
  '--enable-unsafe-webgpu',
  '--enable-features=Vulkan',
  '--use-vulkan=swiftshader',
  '--use-webgpu-adapter=swiftshader',
];

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.wasm': 'application/wasm',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
};

/** Serves `root` on 127.0.0.1 at a free port. Returns `{ url, close }`. */
export async function serveStatic(root = DIST) {
  await stat(join(root, 'index.html')).catch(() => {
    throw new Error(`${root}/index.html is missing: build the page first (trunk build --config trunk.toml)`);
  });
  const server = createServer(async (req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://localhost').pathname);
    const file = normalize(join(root, path.endsWith('/') ? `${path}index.html` : path));
    if (file !== root && !file.startsWith(root + sep)) {
      res.writeHead(403).end();
      return;
    }
    try {
      const body = await readFile(file);
      res.writeHead(200, { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream' });
      res.end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}/`,
    close: () => new Promise((ok) => server.close(ok)),
  };
}

/**
 * Launches headless Chromium (playwright gives it a fresh temporary profile). `webgpu: false`
 * leaves out the WebGPU flags, as a browser without WebGPU.
 */
export function launch({ webgpu = true } = {}) {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [...BASE_FLAGS, ...(webgpu ? WEBGPU_FLAGS : [])],
  });
}

/**
 * Opens `url` in a new page, recording console errors, uncaught exceptions and every request,
 * so a failing test can say what the page said.
 */
export async function openPage(browser, url) {
  const page = await browser.newPage();
  const log = [];
  const requests = [];
  page.on('console', (m) => log.push(`console.${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => log.push(`uncaught: ${e.message}`));
  page.on('request', (r) => requests.push(r.url()));
  await page.goto(url);
  return { page, log, requests };
}
