// OpenClaw's own CLI, unchanged, against a real `pincer gateway`: `agent`
// naming its session by id and by key, `health`, `gateway call` of the
// read methods, `gateway stability` and `gateway usage-cost`. Each must exit
// 0 and print the mock's reply or an answer of the right shape.
//
//   node cli.mjs PINCER_BINARY      (through tests/clients/run)
//
// Exits 0 when every check holds, 1 otherwise.
import path from 'node:path';
import { checker, finish } from '../sdk/gateway.mjs';
import {
  TOKEN, call, clientEnv, deadline, openclaw, replyMarker, startTokenGateway, stopTokenGateway, textOf,
} from './openclaw.mjs';

const pincer = process.argv[2] && path.resolve(process.argv[2]);
if (!pincer) {
  console.error('usage: node cli.mjs PINCER_BINARY');
  process.exit(2);
}
deadline(150000);
const { failures, check } = checker();

// What a failed command said, for the check's line: its line naming an
// unknown method, else one naming an error, else its last.
function said(r) {
  if (r.code === 0) return '';
  const lines = (r.stderr + r.stdout).trim().split('\n');
  const line = lines.find((l) => /unknown method/i.test(l)) ?? lines.find((l) => /error|fail/i.test(l)) ?? lines.pop();
  return ` (exit ${r.code}: ${line.trim()})`;
}

// Runs `openclaw ARGS --json` and checks it exits 0 with a JSON object that
// `shape` accepts.
async function jsonCommand(client, args, shape, what) {
  const r = await openclaw(client, [...args, '--json']);
  let answer = null;
  try {
    answer = r.code === 0 ? JSON.parse(r.stdout) : null;
  } catch {
    check(false, `${what}: prints JSON, not ${JSON.stringify(r.stdout.slice(0, 120))}`);
    return;
  }
  check(r.code === 0 && answer !== null && typeof answer === 'object' && shape(answer), `${what}${said(r)}`);
}

// Runs `openclaw ARGS` (plain) and checks it exits 0 and prints something.
async function plainCommand(client, args, what) {
  const r = await openclaw(client, args);
  check(r.code === 0 && r.stdout.trim() !== '', `${what}${said(r)}`);
}

let gw;
let client;
try {
  gw = await startTokenGateway(pincer);
  client = clientEnv(gw);

  for (const [flag, name, reply] of [
    ['--session-key', 'cli-key', 'reply by session key'],
    ['--session-id', 'cli-session-id', 'reply by session id'],
  ]) {
    const r = await openclaw(client, ['agent', flag, name, '--message', `question ${replyMarker(reply)}`]);
    check(r.code === 0 && r.stdout.includes(reply), `agent ${flag} ${name}: prints the mock's reply${said(r)}`);
  }

  await plainCommand(client, ['health'], 'health');
  await jsonCommand(client, ['health'], (a) => a.ok === true, 'health --json: ok');

  const list = await call(client, 'sessions.list');
  const keys = (list.sessions ?? []).map((s) => s.key);
  check(keys.some((k) => k.endsWith('cli-key')),
    `gateway call sessions.list: lists cli-key ${list.error ?? JSON.stringify(keys)}`);
  const status = await call(client, 'status');
  check(!status.error && Object.keys(status).length > 0, `gateway call status ${status.error ?? ''}`);
  const models = await call(client, 'models.list');
  check((models.models ?? []).some((m) => m.id === 'mock-model'),
    `gateway call models.list: lists mock-model ${models.error ?? ''}`);
  const history = await call(client, 'chat.history', { sessionKey: 'cli-key' });
  const texts = (history.messages ?? []).filter((m) => m.role === 'assistant').map(textOf);
  check(texts.includes('reply by session key'),
    `gateway call chat.history: holds the reply ${history.error ?? JSON.stringify(texts)}`);

  // Every other implemented read, each with what its answer must hold
  // after the two runs above.
  const reads = [
    ['chat.startup', { sessionKey: 'cli-key' }, (a) => (a.messages ?? []).length >= 2],
    ['chat.metadata', { sessionKey: 'cli-key' }, (a) => typeof a === 'object' && !a.error],
    ['sessions.describe', { key: 'cli-key' }, (a) => a.session && a.session.key.endsWith('cli-key')],
    ['sessions.resolve', { key: 'cli-key' }, (a) => a.ok === true && a.key.endsWith('cli-key')],
    ['agent.identity.get', {}, (a) => a.agentId === 'main' && typeof a.name === 'string'],
    ['agents.list', {}, (a) => a.defaultId === 'main' && (a.agents ?? []).length === 1],
    ['config.get', {}, (a) => a.valid === true && !JSON.stringify(a).includes(TOKEN)],
    ['models.authStatus', {}, (a) => Array.isArray(a.providers) && a.providers.length > 0],
    ['system.info', {}, (a) => typeof a === 'object' && !a.error && Object.keys(a).length > 0],
    ['diagnostics.stability', {}, (a) => a.pincer && a.pincer.runs.started >= 2],
    ['usage.cost', {}, (a) => a.totals && a.totals.totalTokens > 0],
    ['update.status', {}, (a) => 'updateAvailable' in a],
  ];
  for (const [method, params, shape] of reads) {
    const a = await call(client, method, params);
    check(!a.error && shape(a), `gateway call ${method} ${a.error ?? JSON.stringify(a).slice(0, 200)}`);
  }

  await plainCommand(client, ['gateway', 'stability'], 'gateway stability');
  await jsonCommand(client, ['gateway', 'stability'], (a) => a.pincer?.runs?.started >= 2 || a.count === 0,
    'gateway stability --json');
  await plainCommand(client, ['gateway', 'usage-cost'], 'gateway usage-cost');
  await jsonCommand(client, ['gateway', 'usage-cost'], (a) => a.totals?.totalTokens > 0,
    'gateway usage-cost --json: counts the two runs\' tokens');
} catch (e) {
  failures.push(String(e && e.stack ? e.stack : e));
  console.error(e);
} finally {
  client?.remove();
  await stopTokenGateway(gw);
}
finish(failures);
