// What the client tests share: a `pincer gateway` with token auth on the
// embedded mock (started by tests/sdk/gateway.mjs), OpenClaw's own CLI run
// against it from a throw-away HOME, a store reader, and a hard deadline.
// tests/clients/run starts these scripts with the Node 24 of the installed
// packages and sets PINCER_CLIENTS_DIR to where they are.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { pathToFileURL } from 'node:url';
import { startGateway, stopGateway } from '../sdk/gateway.mjs';

export const clientsDir = process.env.PINCER_CLIENTS_DIR;
export const packageDir = path.join(clientsDir, 'node_modules', 'openclaw');
export const TOKEN = 'client-test-token-5f1c';

// A mock marker (docs/mock-llm.md) asking for the reply `text` (and the
// step's other keys). The text is written as JSON \u escapes, so the
// message a client shows never holds the reply: seeing it proves the model
// answered.
export function replyMarker(text, step = {}) {
  const escaped = [...text].map((c) => `\\u${c.codePointAt(0).toString(16).padStart(4, '0')}`).join('');
  const rest = JSON.stringify(step).slice(1, -1);
  return `[[mock:{"text":"${escaped}"${rest ? `,${rest}` : ''}}]]`;
}

// An ESM package of the installed folder (the scripts live outside it).
export async function importInstalled(name) {
  const require = createRequire(path.join(clientsDir, 'package.json'));
  return import(pathToFileURL(require.resolve(name)).href);
}

// What the deadline stops: children still running and the gateway.
const running = new Set();

// Has the deadline call `stop` unless the returned function is called first.
export function stopAtDeadline(stop) {
  running.add(stop);
  return () => running.delete(stop);
}

// Ends the process with a failure after `ms`, stopping whatever this script
// started, so a hung client cannot hold the test past ctest's timeout.
export function deadline(ms) {
  setTimeout(() => {
    console.error(`FAIL the test did not finish in ${ms} ms`);
    for (const stop of running) stop();
    process.exit(1);
  }, ms).unref();
}

// Starts the gateway with token auth (`extra`: more of `gateway`'s keys)
// in a temporary PINCER_HOME, the state directory.
export async function startTokenGateway(pincer, extra = {}) {
  const gw = await startGateway(pincer, { gateway: { auth: { mode: 'token', token: TOKEN }, ...extra } });
  gw.url = `ws://127.0.0.1:${gw.port}`;
  gw.stopNow = () => gw.child.kill('SIGKILL');
  running.add(gw.stopNow);
  return gw;
}

export async function stopTokenGateway(gw) {
  if (!gw) return;
  running.delete(gw.stopNow);
  await stopGateway(gw);
}

// A fresh HOME for OpenClaw and the environment its clients run in: no
// network beyond the gateway, no updates, channels or discovery.
export function clientEnv(gw) {
  const home = mkdtempSync(path.join(os.tmpdir(), 'pincer-openclaw-'));
  return {
    home,
    env: {
      HOME: home,
      PATH: process.env.PATH,
      TERM: 'xterm-256color',
      OPENCLAW_OFFLINE: '1',
      OPENCLAW_NO_AUTO_UPDATE: '1',
      OPENCLAW_SKIP_CHANNELS: '1',
      OPENCLAW_DISABLE_BONJOUR: '1',
      OPENCLAW_GATEWAY_URL: gw.url,
      OPENCLAW_GATEWAY_TOKEN: TOKEN,
    },
    remove: () => rmSync(home, { recursive: true, force: true }),
  };
}

// The argv that runs OpenClaw's CLI with this Node.
export const openclawArgv = (args) => [process.execPath, path.join(packageDir, 'openclaw.mjs'), ...args];

// Runs `openclaw ARGS`; resolves {code, stdout, stderr}, code null when it
// was killed after `ms`.
export function openclaw(client, args, ms = 60000) {
  const [cmd, ...argv] = openclawArgv(args);
  const child = spawn(cmd, argv, { env: client.env, cwd: client.home, stdio: ['ignore', 'pipe', 'pipe'] });
  const kill = () => child.kill('SIGKILL');
  running.add(kill);
  const timer = setTimeout(kill, ms);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => { stdout += d; });
  child.stderr.on('data', (d) => { stderr += d; });
  return new Promise((resolve) => {
    child.on('close', (code) => {
      clearTimeout(timer);
      running.delete(kill);
      resolve({ code, stdout, stderr });
    });
  });
}

// `openclaw gateway call METHOD --json`: the answer, or {error} with what
// the CLI printed when it failed.
export async function call(client, method, params = {}) {
  const r = await openclaw(client, ['gateway', 'call', method, '--json', '--params', JSON.stringify(params)]);
  if (r.code !== 0) return { error: (r.stderr + r.stdout).trim() || `exit ${r.code}` };
  try {
    return JSON.parse(r.stdout);
  } catch {
    return { error: `not JSON: ${r.stdout.slice(0, 200)}` };
  }
}

// The text of a history message, whichever of OpenClaw's shapes it has.
export function textOf(message) {
  const c = message?.content;
  if (typeof c === 'string') return c;
  if (Array.isArray(c)) return c.filter((p) => p.type === 'text').map((p) => p.text).join('');
  return '';
}

// A run's status in the gateway's store ($PINCER_HOME/state.db), read-only.
export function runStatus(gw, runId) {
  const db = new DatabaseSync(path.join(gw.home, 'state.db'), { readOnly: true });
  try {
    return db.prepare('SELECT status FROM runs WHERE run_id = ?').get(runId)?.status ?? null;
  } finally {
    db.close();
  }
}

// Polls `probe` every 200 ms until it returns a truthy value or `ms` pass.
export async function waitFor(probe, ms) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v || Date.now() >= end) return v;
    await new Promise((r) => setTimeout(r, 200));
  }
}
