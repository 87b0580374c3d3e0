// The official OpenAI SDK (its own retries on) against a real `pincer
// gateway` on loopback: a call whose first connection is cut after the
// gateway took the request, and a call whose run fails, each yield
// exactly one run, plain and streamed, because every call carries an
// Idempotency-Key that the SDK's retries repeat.
//
//   node idempotency.mjs PINCER_BINARY
//
// Exits 0 when every check holds, 1 otherwise.
import { execFileSync } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import OpenAI from 'openai';
import { checker, finish, withGateway } from './gateway.mjs';

const pincer = process.argv[2] && path.resolve(process.argv[2]);
if (!pincer) {
  console.error('usage: node idempotency.mjs PINCER_BINARY');
  process.exit(2);
}
const { failures, check } = checker();

// A TCP proxy that holds back the gateway's answer on the first
// connection and cuts it `cutMs` after the request went through: the
// run has started, and the SDK sees a dropped connection (and retries).
function startProxy(port, cutMs) {
  let first = true;
  const server = net.createServer((client) => {
    const upstream = net.connect(port, '127.0.0.1');
    const cut = first;
    first = false;
    client.on('error', () => {});
    upstream.on('error', () => {});
    client.on('data', (d) => {
      upstream.write(d);
      if (cut) setTimeout(() => { client.destroy(); upstream.destroy(); }, cutMs);
    });
    if (!cut) upstream.pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

// Runs of session `key` as the gateway's sessions.list tells them.
function runsOf(gw, key) {
  const out = execFileSync(pincer, ['sessions', 'list', '--json', '--url', `ws://127.0.0.1:${gw.port}`],
    { env: { PINCER_HOME: gw.home, PATH: process.env.PATH }, timeout: 15000 }).toString();
  const s = JSON.parse(out).sessions.find((x) => x.key === key);
  return s ? s.runs : 0;
}

const REPLY = 'one two three four five six seven eight';
const slow = `[[mock:{"text":"${REPLY}","delay_ms":60}]]`;
// a provider failure the SDK would retry (the gateway answers 502)
const failing = 'x [[mock:{"kind":"error","status":500,"message":"The server had an error","ttft_ms":400}]]';

async function call(proxyPort, key, text, stream) {
  const client = new OpenAI({
    apiKey: 'unused', baseURL: `http://127.0.0.1:${proxyPort}/v1`, maxRetries: 3, timeout: 20000,
  });
  const opts = { headers: { 'Idempotency-Key': `key-${key}`, 'x-pincer-session-key': key } };
  const body = { model: 'pincer', messages: [{ role: 'user', content: text }] };
  if (!stream) {
    const r = await client.chat.completions.create(body, opts);
    return { id: r.id, text: r.choices[0].message.content };
  }
  const s = await client.chat.completions.create({ ...body, stream: true }, opts);
  let out = '', id = '';
  for await (const chunk of s) {
    id = chunk.id;
    out += chunk.choices[0]?.delta?.content ?? '';
  }
  return { id, text: out };
}

// A gateway for each half: the failed run cools the provider's one profile
// down for the process (§1.11), which the other half's runs would meet.
for (const stream of [false, true]) {
  await withGateway(pincer, null, failures, async (gw) => {
    const how = stream ? 'streamed' : 'plain';
    // (a) the first connection is cut while the run goes
    let proxy = await startProxy(gw.port, 300);
    const key = `drop-${how}`;
    const r = await call(proxy.address().port, key, slow, stream);
    proxy.close();
    check(r.text === REPLY, `${how}: a dropped connection still gets the answer (${JSON.stringify(r.text)})`);
    check(runsOf(gw, key) === 1, `${how}: a dropped connection made exactly one run`);
    // (b) the run fails, and the first connection is cut before it does
    proxy = await startProxy(gw.port, 150);
    const fkey = `fail-${how}`;
    let status = 0;
    try {
      await call(proxy.address().port, fkey, failing, stream);
    } catch (e) {
      status = e.status ?? -1;
    }
    proxy.close();
    check(status !== 0, `${how}: a failed run is an error to the SDK (status ${status})`);
    check(runsOf(gw, fkey) === 1, `${how}: a failed run made exactly one run`);
  });
}
finish(failures);
