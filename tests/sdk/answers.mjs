// The official OpenAI SDK against a real `pincer gateway` on loopback:
// what it reads of an answer. The same text plain and streamed (a run
// that calls a tool after some text), a stream that stays silent behind
// keep-alive comments, the x-request-id the SDK exposes, and a provider's
// error as the SDK's APIError with the provider's status class and
// message, secrets masked.
//
//   node answers.mjs PINCER_BINARY
//
// Exits 0 when every check holds, 1 otherwise.
import path from 'node:path';
import OpenAI from 'openai';
import { checker, finish, withGateway } from './gateway.mjs';

const pincer = process.argv[2] && path.resolve(process.argv[2]);
if (!pincer) {
  console.error('usage: node answers.mjs PINCER_BINARY');
  process.exit(2);
}
const { failures, check } = checker();
const ask = (text, stream) => ({ model: 'pincer', messages: [{ role: 'user', content: text }], ...(stream ? { stream } : {}) });

async function streamed(s) {
  let out = '';
  for await (const chunk of s) out += chunk.choices[0]?.delta?.content ?? '';
  return out;
}

// The SDK's error for a call, or null when it did not throw.
async function errorOf(promise) {
  try {
    await promise;
    return null;
  } catch (e) {
    return e;
  }
}

await withGateway(pincer, { gateway: { http: { sseKeepAliveMs: 100 } } }, failures, async (gw) => {
  const base = `http://127.0.0.1:${gw.port}/v1`;
  const client = new OpenAI({ apiKey: 'unused', baseURL: base, timeout: 20000 });

  // (1) the embedded mock's demo: "Let me check the time.", the clock
  // tool, then the echo: two model calls, one text
  const want = 'Let me check the time.\n\nhello from the sdk';
  const plain = await client.chat.completions.create(ask('hello from the sdk'));
  const text = await streamed(await client.chat.completions.create(ask('hello from the sdk', true)));
  check(plain.choices[0].message.content === want, `plain answer: ${JSON.stringify(plain.choices[0].message.content)}`);
  check(text === want, `streamed answer is the plain one: ${JSON.stringify(text)}`);

  // (2) a first token after 800 ms: keep-alive comments (100 ms), which the
  // SDK skips
  const late = '[[mock:{"text":"late words","ttft_ms":800}]]';
  const raw = await fetch(`${base}/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(ask(late, true)),
  });
  const body = await raw.text();
  const before = body.slice(0, body.indexOf('"content":"late')).split('\n: keep-alive\n\n').length - 1;
  check(before >= 3, `${before} keep-alive comments before the first token`);
  const lateText = await streamed(await client.chat.completions.create(ask(late, true)));
  check(lateText === 'late words', `the SDK parses a stream with comments: ${JSON.stringify(lateText)}`);

  // (3) x-request-id: the client's echoed, else one made
  const mine = { headers: { 'x-request-id': 'sdk-request-1' } };
  const { data, response } = await client.chat.completions.create(ask('id please'), mine).withResponse();
  check(response.headers.get('x-request-id') === 'sdk-request-1' && data._request_id === 'sdk-request-1',
    `the client's x-request-id comes back (${data._request_id})`);
  const made = await client.chat.completions.create(ask('id please', true)).withResponse();
  const madeId = made.response.headers.get('x-request-id');
  check(/^req_[0-9a-f]{24}$/.test(madeId ?? ''), `a streamed answer gets one made: ${madeId}`);
  await streamed(made.data);
  const models = await client.models.list().withResponse();
  check(/^req_[0-9a-f]{24}$/.test(models.response.headers.get('x-request-id') ?? ''), '/v1/models has one too');

});

// (4) the provider's errors: status class, type and message, key masked.
// A gateway each, and no SDK retries: a failure cools the provider's one
// profile down for the process (§1.11), so a second request would meet
// the cooldown instead of the provider.
const said = 'Provider says no to sk-live-0123456789abcdef';
for (const [status, want, type] of [[400, 400, 'invalid_request_error'], [429, 429, 'rate_limit_error'],
  [500, 502, 'upstream_error']]) {
  for (const stream of [false, true]) {
    await withGateway(pincer, null, failures, async (gw) => {
      const client = new OpenAI({ apiKey: 'unused', baseURL: `http://127.0.0.1:${gw.port}/v1`, timeout: 20000 });
      const marker = `x [[mock:{"kind":"error","status":${status},"message":"${said}"}]]`;
      const e = await errorOf((async () => {
        const r = await client.chat.completions.create(ask(marker, stream), { maxRetries: 0 });
        if (stream) await streamed(r);
      })());
      const how = `provider ${status}${stream ? ', streamed' : ''}`;
      check(e instanceof OpenAI.APIError, `${how}: an APIError (${e})`);
      if (!e) return;
      // a stream's error event comes after its 200: the SDK has no status
      check(stream || e.status === want, `${how}: status ${e.status}`);
      check(e.type === type, `${how}: type ${e.type}`);
      check(e.message.includes('Provider says no to sk-***') && !e.message.includes('0123456789'),
        `${how}: the provider's message, masked: ${e.message}`);
      check(stream || /^req_[0-9a-f]{24}$/.test(e.request_id ?? ''), `${how}: request id ${e.request_id}`);
    });
  }
}
finish(failures);
