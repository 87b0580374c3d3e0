// OpenClaw's Control UI, unchanged, served by `pincer gateway` itself
// (gateway.controlUi.root) and run in headless chromium through
// puppeteer-core. It must visit every top-level view of the sidebar, load an
// existing session's history, start a new conversation and show the mock's
// reply after a message sent there, list the new session in the sidebar,
// stop a slow run with Stop (the store then holds the run as aborted) and
// then show the chat idle with each message once; and along the way get no
// "unknown method" or other error answer, show no error toast or notice,
// and log no console error.
//
//   node browser.mjs PINCER_BINARY OUT_DIR      (through tests/clients/run)
//
// OUT_DIR receives control-ui-methods.txt (every RPC method the UI called,
// how often, and the gateway's first error for it) and screenshots.
// Exits 0 when every check holds, 1 otherwise.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { checker, finish } from '../sdk/gateway.mjs';
import {
  clientEnv, deadline, importInstalled, openclaw, packageDir, replyMarker, runStatus, startTokenGateway,
  stopAtDeadline, stopTokenGateway, TOKEN, waitFor,
} from './openclaw.mjs';

const pincer = process.argv[2] && path.resolve(process.argv[2]);
const out = process.argv[3] && path.resolve(process.argv[3]);
if (!pincer || !out) {
  console.error('usage: node browser.mjs PINCER_BINARY OUT_DIR');
  process.exit(2);
}
mkdirSync(out, { recursive: true });
deadline(240000);
const { failures, check } = checker();

// Where the UI shows a failure: toasts, the chat's error notices.
const ERRORS = '.app-toast, .chat-error, .chat-history-error, [role="alert"]';

// The sidebar's links to sessions.
const SESSION_LINKS = 'a.sidebar-recent-session__link';

// What the UI said and asked over its WebSocket, from the DevTools protocol.
const methods = new Map(); // method -> {calls, error}
const pending = new Map(); // request id -> method
const runIds = [];
function onFrame(payload, sent) {
  let frame;
  try {
    frame = JSON.parse(payload);
  } catch {
    return;
  }
  if (sent && frame.type === 'req') {
    const m = methods.get(frame.method) ?? { calls: 0, error: null };
    m.calls++;
    methods.set(frame.method, m);
    pending.set(frame.id, frame.method);
  } else if (!sent && frame.type === 'res' && pending.has(frame.id)) {
    const method = pending.get(frame.id);
    pending.delete(frame.id);
    const m = methods.get(method);
    if (!frame.ok && !m.error) m.error = `${frame.error?.code}: ${frame.error?.message}`;
    if (frame.ok && method === 'chat.send' && frame.payload?.runId) runIds.push(frame.payload.runId);
  }
}

const consoleErrors = [];
const shownErrors = new Set();

// Texts of the error toasts and notices on screen now; each is remembered.
async function errorsShown(page) {
  const texts = await page.$$eval(ERRORS, (els) => els.filter((e) => e.offsetParent !== null)
    .map((e) => e.textContent.trim().replace(/\s+/g, ' ')).filter(Boolean));
  for (const t of texts) shownErrors.add(t);
  return texts;
}

// Whether `later` is shown after (below) `earlier` on the page. Only text
// shown counts: the chat also reads each reply out to screen readers from a
// visually hidden live region placed before the transcript.
const shownAfter = (page, earlier, later) => page.evaluate((a, b) => {
  const shown = (n) => {
    const r = n.parentElement?.getBoundingClientRect();
    return !!r && r.width > 1 && r.height > 1;
  };
  const find = (s) => {
    const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) if (n.textContent.includes(s) && shown(n)) return n;
    return null;
  };
  const x = find(a);
  const y = find(b);
  return !!(x && y && x.compareDocumentPosition(y) & Node.DOCUMENT_POSITION_FOLLOWING);
}, earlier, later);

// How many shown text nodes hold `text` (as shownAfter, what is on screen).
const shownCount = (page, text) => page.evaluate((t) => {
  let n = 0;
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let x = walk.nextNode(); x; x = walk.nextNode()) {
    const r = x.parentElement?.getBoundingClientRect();
    if (x.textContent.includes(t) && r && r.width > 1 && r.height > 1) n++;
  }
  return n;
}, text);

// What the chat shows while it thinks a run or a send is under way: the
// working indicator with its timer, an outbox entry's send status, Stop.
const BUSY = '.chat-working-indicator, .chat-send-status, button.chat-send-btn--stop';
const idleSoon = (page) => waitFor(() => page.$$eval(BUSY, (els) => els.every((e) => e.offsetParent === null)), 10000);

const bodyHas = (page, text) => page.evaluate((t) => document.body.innerText.includes(t), text);

// Waits up to `ms` for `text` on the page.
const waitText = (page, text, ms) => waitFor(() => bodyHas(page, text), ms);

// Lets a view settle: its calls answered, then a moment to render.
async function settle(page) {
  await page.waitForNetworkIdle({ idleTime: 300, timeout: 5000 }).catch(() => {});
  await new Promise((r) => setTimeout(r, 700));
}

// Types `text` into the chat's composer and sends it with Enter; false when
// there is no composer or it did not take the text whole.
async function send(page, text) {
  // Keys typed while the view still renders land elsewhere, or in a
  // composer that the next render replaces.
  await settle(page);
  // The chat's composer, or the new-conversation page's first prompt: the
  // one shown (a chat pane kept in the background holds another).
  const shown = await page.waitForFunction(() => [...document.querySelectorAll('main textarea')]
    .find((e) => e.offsetParent !== null), { timeout: 20000 }).catch(() => null);
  const composer = shown?.asElement();
  if (!composer) return false;
  await composer.focus();
  await composer.type(text);
  // The keys go where the focus is: the chat may move it to another of its
  // composers (it keeps more than one on the page) while they arrive, and
  // Enter sends that one.
  const whole = await page.evaluate(() => {
    const e = document.activeElement;
    return e?.tagName === 'TEXTAREA' && e.closest('main') ? e.value : '';
  }) === text;
  await page.keyboard.press('Enter');
  return whole;
}

const shot = (page, name) => page.screenshot({ path: path.join(out, `${name}.png`) });

function writeMethods() {
  const lines = [...methods].sort(([a], [b]) => a.localeCompare(b))
    .map(([name, m]) => `${name}\t${m.calls}\t${m.error ?? 'ok'}`);
  writeFileSync(path.join(out, 'control-ui-methods.txt'), `${lines.join('\n')}\n`);
}

let gw;
let client;
let browser;
let page;
try {
  gw = await startTokenGateway(pincer, { controlUi: { root: path.join(packageDir, 'dist', 'control-ui') } });
  client = clientEnv(gw);

  // A session with a history before the UI opens.
  const earlier = 'an earlier answer from the mock';
  const r = await openclaw(client, ['agent', '--session-key', 'earlier',
    '--message', `before ${replyMarker(earlier)}`]);
  check(r.code === 0, `a session exists before the UI opens (exit ${r.code})`);

  const { default: puppeteer } = await importInstalled('puppeteer-core');
  browser = await puppeteer.launch({
    executablePath: process.env.PINCER_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const forget = stopAtDeadline(() => browser.process()?.kill('SIGKILL'));
  page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 900 });
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(`uncaught: ${e.message}`));
  const cdp = await page.createCDPSession();
  await cdp.send('Network.enable');
  cdp.on('Network.webSocketFrameSent', (e) => onFrame(e.response.payloadData, true));
  cdp.on('Network.webSocketFrameReceived', (e) => onFrame(e.response.payloadData, false));

  const url = `http://127.0.0.1:${gw.port}/?gatewayUrl=${encodeURIComponent(gw.url)}#token=${TOKEN}`;
  await page.goto(url, { waitUntil: 'load', timeout: 30000 });
  const nav = await page.waitForSelector('nav.sidebar-nav a.nav-item[href]', { timeout: 20000 }).catch(() => null);
  check(nav !== null, 'the UI loads and shows its sidebar');
  await settle(page);
  await shot(page, 'home');

  // Every top-level view the sidebar offers.
  const hrefs = await page.$$eval('nav.sidebar-nav a.nav-item[href]', (as) => as.map((a) => a.getAttribute('href')));
  const views = [...new Set(hrefs)];
  check(views.length >= 2, `the sidebar offers views ${JSON.stringify(views)}`);
  for (const href of views) {
    await page.click(`nav.sidebar-nav a.nav-item[href="${href}"]`);
    await settle(page);
    const name = href.replace(/[^a-z0-9]+/gi, '-').replace(/^-|-$/g, '') || 'root';
    await shot(page, `view-${name}`);
    const shown = await errorsShown(page);
    check(new URL(page.url()).pathname === href && shown.length === 0,
      `view ${href}: opens and shows no error ${shown.length ? JSON.stringify(shown) : ''}`);
  }

  // The existing session's history.
  const link = await page.waitForSelector(`${SESSION_LINKS}[href$="/earlier"]`, { timeout: 10000 })
    .catch(() => null);
  check(link !== null, 'the sidebar lists the existing session');
  // Near its left edge: the row's pin and archive buttons sit over its middle.
  if (link) await link.click({ offset: { x: 8, y: 8 } });
  check(await waitText(page, earlier, 15000), 'the existing session shows its history');
  await shot(page, 'history');

  // A message in a new conversation, and the mock's reply after it.
  const sessions = () => page.$$eval(SESSION_LINKS, (as) => as.map((a) => a.getAttribute('href')));
  const known = await sessions();
  const start = await page.waitForSelector('a.sidebar-new-session', { timeout: 10000 }).catch(() => null);
  check(start !== null, 'the sidebar offers a new conversation');
  if (start) await start.click();
  const reply = 'the mock answers the browser';
  check(await send(page, `hello from the browser ${replyMarker(reply)}`), 'the chat takes a typed message');
  const replied = await waitText(page, reply, 20000);
  check(replied && await shownAfter(page, 'hello from the browser', reply), 'shows the reply after the message');
  check(await idleSoon(page), 'shows the chat idle once the reply is in');
  await shot(page, 'reply');
  const added = await waitFor(async () => (await sessions()).find((href) => !known.includes(href)), 10000);
  check(added !== undefined, `the sidebar lists the new session ${added ?? JSON.stringify(known)}`);

  // Stop on a slow run: about 12 s of words unless stopped.
  const before = runIds.length;
  check(await send(page, `slow ${replyMarker('slow words '.repeat(30).trim(), { delay_ms: 200 })}`),
    'the chat takes a second message');
  const stop = await page.waitForSelector('button.chat-send-btn--stop', { visible: true, timeout: 10000 })
    .catch(() => null);
  check(stop !== null, 'shows Stop during a slow run');
  if (stop) await stop.click();
  const runId = await waitFor(() => runIds[before], 5000);
  const status = runId ? await waitFor(() => ['aborted', 'ok', 'error', 'timeout'].includes(runStatus(gw, runId))
    && runStatus(gw, runId), 20000) : null;
  check(status === 'aborted', `Stop ends the run as aborted (run ${runId ?? 'never started'}: ${status})`);
  check(await idleSoon(page), 'shows the chat idle once stopped (no working timer, no pending send)');
  await shot(page, 'stopped');
  for (const text of ['hello from the browser', reply, 'slow [[mock']) {
    const n = await shownCount(page, text);
    check(n === 1, `shows "${text}" once (${n} times)`);
  }

  await errorsShown(page);
  forget();
} catch (e) {
  failures.push(String(e && e.stack ? e.stack : e));
  console.error(e);
} finally {
  if (page) await shot(page, 'last').catch(() => {});
  writeMethods();
  const unknown = [...methods].filter(([, m]) => /unknown method/i.test(m.error ?? '')).map(([n]) => n);
  check(unknown.length === 0, `no "unknown method" answer ${unknown.length ? JSON.stringify(unknown) : ''}`);
  const refused = [...methods].filter(([n, m]) => m.error && !unknown.includes(n)).map(([n, m]) => `${n}: ${m.error}`);
  check(refused.length === 0, `no other error answer ${refused.length ? JSON.stringify(refused) : ''}`);
  check(shownErrors.size === 0, `no error toast or notice ${shownErrors.size ? JSON.stringify([...shownErrors]) : ''}`);
  const logged = [...new Set(consoleErrors.map((t) => t.slice(0, 160)))];
  check(logged.length === 0, `no console error ${logged.length ? JSON.stringify(logged) : ''}`);
  console.log(`methods the UI called: ${path.join(out, 'control-ui-methods.txt')}`);
  await browser?.close().catch(() => {});
  client?.remove();
  await stopTokenGateway(gw);
}
finish(failures);
