// What the SDK tests share: a real `pincer gateway` on an ephemeral
// loopback port in a throw-away PINCER_HOME, and a check list.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

// Prints each check and remembers the ones that failed.
export function checker() {
  const failures = [];
  const check = (ok, what) => {
    console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
    if (!ok) failures.push(what);
  };
  return { failures, check };
}

// Starts the gateway (`config`: an object written as its config file, or
// none); resolves once its "listening" line names the port. Its store is
// SQLite in its home, or PINCER_STORE_URL's when that is set (the *_pg
// tests: tests/support/pg_cluster run).
export function startGateway(pincer, config) {
  const home = mkdtempSync(path.join(os.tmpdir(), 'pincer-sdk-'));
  const args = ['gateway', '--port', '0'];
  if (config) {
    const file = path.join(home, 'config.json');
    writeFileSync(file, JSON.stringify(config));
    args.push('--config', file);
  }
  const child = spawn(pincer, args, {
    cwd: home,
    env: {
      PINCER_HOME: home,
      PATH: process.env.PATH,
      ...(process.env.PINCER_STORE_URL ? { PINCER_STORE_URL: process.env.PINCER_STORE_URL } : {}),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('the gateway did not start')), 15000);
    child.on('exit', (code) => reject(new Error(`the gateway exited: ${code}`)));
    child.stdout.on('data', (d) => {
      out += d;
      const line = out.split('\n').find((l) => l.includes('"listening"'));
      if (line) {
        clearTimeout(timer);
        resolve({ child, home, port: JSON.parse(line).port });
      }
    });
  });
}

// Stops the gateway (SIGTERM, waits for its exit) and removes its home.
export async function stopGateway(gw) {
  if (!gw) return;
  const gone = new Promise((resolve) => gw.child.on('exit', resolve));
  gw.child.kill('SIGTERM');
  await gone;
  rmSync(gw.home, { recursive: true, force: true });
}

// Runs `body(gw)` against a gateway started with `config` (null: none),
// then stops it; an exception is a failure.
export async function withGateway(pincer, config, failures, body) {
  let gw;
  try {
    gw = await startGateway(pincer, config);
    await body(gw);
  } catch (e) {
    failures.push(String(e && e.stack ? e.stack : e));
    console.error(e);
  } finally {
    await stopGateway(gw);
  }
}

// Exits 0 when every check held, 1 otherwise.
export function finish(failures) {
  process.exit(failures.length ? 1 : 0);
}
