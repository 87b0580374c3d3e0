// OpenClaw's terminal UI, unchanged, against a real `pincer gateway`, in a
// detached tmux session of a fixed size: it must show the mock's reply to
// the message given with --message, then to one typed into it, and report
// no failed call on its status line.
//
//   node tui.mjs PINCER_BINARY      (through tests/clients/run)
//
// Exits 0 when every check holds, 1 otherwise; prints the screen when one
// does not.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { checker, finish } from '../sdk/gateway.mjs';
import {
  clientEnv, deadline, openclawArgv, replyMarker, startTokenGateway, stopAtDeadline, stopTokenGateway, TOKEN, waitFor,
} from './openclaw.mjs';

const pincer = process.argv[2] && path.resolve(process.argv[2]);
if (!pincer) {
  console.error('usage: node tui.mjs PINCER_BINARY');
  process.exit(2);
}
deadline(120000);
const { failures, check } = checker();

// A tmux server of this test's own, so nothing else's sessions are touched.
const socket = `pincer-tui-${process.pid}`;
const tmux = (...args) => execFileSync('tmux', ['-L', socket, '-f', '/dev/null', ...args], { encoding: 'utf8' });
const quote = (s) => `'${s.replaceAll("'", "'\\''")}'`;
// The screen and what scrolled off it, wrapped lines joined; empty once
// the TUI has exited (its session, and with it the server, is gone).
function screen() {
  try {
    return tmux('capture-pane', '-p', '-J', '-S', '-500', '-t', 'tui');
  } catch {
    return '';
  }
}

// The screen once it shows `text`, or as it is after 20 s.
const screenWith = async (text) => await waitFor(() => {
  const s = screen();
  return s.includes(text) && s;
}, 20000) || screen();

let gw;
let client;
let forget;
let shown = '';
try {
  gw = await startTokenGateway(pincer);
  client = clientEnv(gw);
  const first = 'tui reply to the first message';
  const typed = 'tui reply to the typed message';
  const env = Object.entries(client.env).map(([k, v]) => `${k}=${quote(v)}`);
  const argv = openclawArgv(['tui', '--url', gw.url, '--token', TOKEN, '--session', 'tui',
    '--message', `first ${replyMarker(first)}`]);
  const stop = () => execFileSync('tmux', ['-L', socket, 'kill-server'], { stdio: 'ignore' });
  forget = stopAtDeadline(stop);
  tmux('new-session', '-d', '-s', 'tui', '-x', '160', '-y', '50', '-c', client.home,
    ['env', ...env, ...argv.map(quote)].join(' '));

  shown = await screenWith(first);
  check(shown.includes(first), 'shows the reply to --message');

  tmux('send-keys', '-t', 'tui', '-l', `typed ${replyMarker(typed)}`);
  tmux('send-keys', '-t', 'tui', 'Enter');
  shown = await screenWith(typed);
  check(shown.includes(typed), 'shows the reply to a typed message');

  const failed = shown.split('\n').filter((l) => /unknown method|failed/i.test(l)).map((l) => l.trim());
  check(failed.length === 0, `reports no failed call ${JSON.stringify(failed)}`);
} catch (e) {
  failures.push(String(e && e.stack ? e.stack : e));
  console.error(e);
} finally {
  if (failures.length) console.log(`--- the screen ---\n${shown.replace(/\n+$/, '')}\n---`);
  if (forget) {
    forget();
    try {
      tmux('kill-server');
    } catch {
      // already gone: the TUI exited and took its only session with it
    }
  }
  client?.remove();
  await stopTokenGateway(gw);
}
finish(failures);
