#!/usr/bin/env node
// The risk check of agents/risk.py as a remote agent (docs/remote-agents.md, protocol v1),
// on Node's standard library only. Exact decimal arithmetic on BigInt, so the same orders
// give the same answers as the Python RiskAgent.
//
//   node risk-agent.js [--port N] [--host ADDR]      (port 0: any; the chosen one is printed)
//
// RISK_AGENT_TEST_HOOKS=1 turns on the hooks the tests use to play a faulty service:
// RISK_AGENT_FAULT (see `fault` below), RISK_AGENT_LOG (one JSON line per call) and
// GET /_stats (connections open and accepted, slow calls pending and aborted: a slow call's
// client that hangs up stops its work, logged as an 'aborted' line).
'use strict';

const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');

// post_process is sent back the result execute gave, however large the service made it.
const MAX_BODY = Number(process.env.RISK_AGENT_MAX_BODY || 64 * 1024 * 1024);
const MAX_MARGIN_SHARE = { m: 30n, s: 2 }; // 0.30
// What its health answer reports: the worker labels results and audit events with it.
const VERSION = process.env.RISK_AGENT_VERSION || '1.0.0';

// decimals: {m: BigInt mantissa, s: scale}, value = m / 10^s ------------------------------

function parseDecimal(text) {
  const match = /^([+-]?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (!match) return null;
  const frac = match[3] || '';
  let m = BigInt(match[2] + frac);
  let s = frac.length - Number(match[4] || 0);
  if (s < 0) { m *= 10n ** BigInt(-s); s = 0; }
  return { m: match[1] === '-' ? -m : m, s };
}

function mul(a, b) { return { m: a.m * b.m, s: a.s + b.s }; }

function rescale(a, s) { return a.m * 10n ** BigInt(s - a.s); } // s >= a.s

function compare(a, b) {
  const s = Math.max(a.s, b.s);
  const x = rescale(a, s); const y = rescale(b, s);
  return x < y ? -1 : x > y ? 1 : 0;
}

// n / d rounded half-even to an integer (n >= 0, d > 0), as Python's Decimal rounds.
function divHalfEven(n, d) {
  const q = n / d; const r = n % d;
  if (2n * r > d || (2n * r === d && q % 2n === 1n)) return q + 1n;
  return q;
}

// a / b rounded half-even to `places` decimals, as a BigInt mantissa of scale `places`.
function divide(a, b, places) {
  // value = (a.m / 10^a.s) / (b.m / 10^b.s); times 10^places
  let n = a.m * 10n ** BigInt(b.s + places); let d = b.m * 10n ** BigInt(a.s);
  return divHalfEven(n, d);
}

function format(m, s) {
  const neg = m < 0n; let digits = (neg ? -m : m).toString().padStart(s + 1, '0');
  const text = s ? digits.slice(0, -s) + '.' + digits.slice(-s) : digits;
  return (neg ? '-' : '') + text;
}

function quantize(a, places) {
  if (a.s <= places) return format(rescale(a, places), places);
  return format(divHalfEven(a.m, 10n ** BigInt(a.s - places)), places);
}

function digitsOf(a) { // significant digits and decimal places, as pydantic counts them
  const m = a.m < 0n ? -a.m : a.m; let s = a.s; let text = m.toString();
  while (s > 0 && text.endsWith('0')) { text = text.slice(0, -1); s -= 1; }
  return { digits: Math.max(text.replace(/^0+/, '').length, s), places: s };
}

// reference data ----------------------------------------------------------------------

function loadContracts() {
  const file = path.join(__dirname, '..', '..', 'data', 'futures.csv');
  const [header, ...rows] = fs.readFileSync(file, 'utf8').trim().split(/\r?\n/);
  const cols = header.split(',');
  const out = new Map();
  for (const row of rows) {
    const cells = row.split(',');
    const rec = Object.fromEntries(cols.map((c, i) => [c, cells[i]]));
    out.set(rec.symbol, {
      multiplier: parseDecimal(rec.contract_multiplier),
      rate: parseDecimal(rec.margin_rate),
    });
  }
  return out;
}
const CONTRACTS = loadContracts();

// the order, validated as agents/risk.py's Order model does -------------------------------

class Invalid extends Error {}

function decimalField(value, name, maxDigits, places) {
  let d = null;
  if (typeof value === 'number' && Number.isFinite(value)) d = parseDecimal(String(value));
  else if (typeof value === 'string') d = parseDecimal(value.trim());
  if (d === null) throw new Invalid(`${name}: not a decimal`);
  if (d.m <= 0n) throw new Invalid(`${name}: must be greater than 0`);
  const size = digitsOf(d);
  if (size.places > places) throw new Invalid(`${name}: at most ${places} decimal places`);
  if (size.digits > maxDigits) throw new Invalid(`${name}: at most ${maxDigits} digits`);
  return d;
}

function order(payload) {
  const known = new Set(['symbol', 'side', 'quantity', 'price', 'available_funds', 'urgent']);
  for (const key of Object.keys(payload)) {
    if (!known.has(key)) throw new Invalid(`${key}: extra fields not permitted`);
  }
  const { symbol, side, quantity } = payload;
  if (typeof symbol !== 'string' || symbol.length < 1 || symbol.length > 16) {
    throw new Invalid('symbol: a string of 1 to 16 characters');
  }
  if (side !== 'buy' && side !== 'sell') throw new Invalid("side: 'buy' or 'sell'");
  if (!Number.isInteger(quantity) || quantity <= 0 || quantity > 1000000) {
    throw new Invalid('quantity: an integer from 1 to 1000000');
  }
  if (payload.urgent !== undefined && typeof payload.urgent !== 'boolean') {
    throw new Invalid('urgent: a boolean');
  }
  return {
    symbol, side, quantity: { m: BigInt(quantity), s: 0 },
    price: decimalField(payload.price, 'price', 18, 6),
    funds: decimalField(payload.available_funds, 'available_funds', 20, 2),
  };
}

function riskCheck(o) {
  const contract = CONTRACTS.get(o.symbol);
  if (!contract) throw new Invalid(`unknown symbol '${o.symbol}'`);
  const margin = mul(mul(mul(o.quantity, contract.multiplier), o.price), contract.rate);
  const approved = compare(margin, mul(o.funds, MAX_MARGIN_SHARE)) <= 0;
  const share = Number(format(divide(margin, o.funds, 6), 6));
  return {
    symbol: o.symbol,
    side: o.side,
    margin: quantize(margin, 2),
    margin_share: share,
    approved,
    reason: approved ? null : 'margin exceeds 30% of funds',
  };
}

// the protocol's four steps ----------------------------------------------------------------

const STEPS = {
  can_handle: (req) => ({ can_handle: ['risk_check', 'trade'].includes(req.task.intent) }),
  prepare_context: (req) => ({ context: { order: req.task.payload } }),
  execute: (req) => {
    // Without prepare_context (RISK_AGENT_METHODS) the context is empty: the task has it all.
    const output = riskCheck(order((req.context && req.context.order) || req.task.payload));
    return { result: { status: 'success', output } };
  },
  post_process: (req) => {
    const share = req.result.output && req.result.output.margin_share;
    return typeof share === 'number' ? { metrics: { risk_score: Math.min(1, share) } } : {};
  },
};

// the one-call forms: the whole contract of one task in one call, or of several tasks in one
// request, each answered on its own (a task that fails has its own problem, the others go on)

function run(req) {
  if (!STEPS.can_handle(req).can_handle) return { can_handle: false };
  const { context } = STEPS.prepare_context(req);
  const { result } = STEPS.execute({ ...req, context });
  const post = STEPS.post_process({ ...req, result });
  if (post.result) return { result: post.result };
  return { result: { ...result, metrics: { ...(result.metrics || {}), ...(post.metrics || {}) } } };
}

function runOne(one) {
  const id = one && one.task && typeof one.task.id === 'string' ? one.task.id : '';
  if (!id || one.protocol !== 1) {
    return { id, problem: { title: 'not a protocol v1 request', status: 400 } };
  }
  try {
    return { id, ...run(one) };
  } catch (err) {
    if (err instanceof Invalid) return { id, problem: { title: 'invalid input', status: 422, detail: err.message } };
    return { id, problem: { title: 'internal error', status: 500, detail: String(err && err.message) } };
  }
}

function runBatch(req) {
  if (!Array.isArray(req.runs)) throw new Invalid('runs: a list of run requests');
  const answers = [];
  req.runs.forEach((one, i) => {
    const kind = HOOKS && one.task && one.task.payload && one.task.payload.batch;
    if (kind) return answers.push(...batchHook(kind, one, req.runs, i));
    if (FAULT === 'noop') return answers.push({ id: one.task.id, result: { status: 'success', output: {} } });
    return answers.push(runOne(one));
  });
  return { answers };
}

// payload.batch (with the hooks on): this task's answer in a batch is a bad one, so one batch
// carries bad and good answers side by side.
function batchHook(kind, one, runs, i) {
  const { id } = one.task;
  const ok = { status: 'success', output: {} };
  switch (kind) {
    case 'omit': return []; // no answer for this task
    case 'twice': return [{ id, result: ok }, { id, result: ok }];
    case 'steal': { // answers with the id of the next task of the batch (the previous if last)
      const other = runs[i + 1 < runs.length ? i + 1 : i - 1];
      return [{ id: other ? other.task.id : `${id}-other`, result: ok }];
    }
    case 'huge': return [{ id, result: { status: 'success', output: 'x'.repeat(one.task.payload.size) } }];
    case 'malformed': return [{ id, result: { status: 'maybe' } }];
    case 'nan': return [{ id, result: { status: 'success', output: {}, metrics: { score: NAN } } }];
    default: return [{ id, problem: { title: 'unknown batch hook', status: 400, detail: kind } }];
  }
}

// test hooks: a faulty service on demand ---------------------------------------------------

const HOOKS = process.env.RISK_AGENT_TEST_HOOKS === '1';
// kind[:n[:k]], applied to execute: status500:N (the first N calls of each task answer 500),
// retry_after:S (the first call of each task answers 429 with Retry-After: S),
// slow:MS (calls of tasks with a deadline answer after MS ms), garbage, content_type,
// huge:BYTES (a 200 whose output is that many bytes), redirect (a 302 to /v1/elsewhere that
// sets a cookie: a client must follow neither), nonce (a fresh random number in
// every output: not idempotent), noop (success with an empty output, no work: for the
// drain benchmark), hold:MS (the real answer, after MS ms: every worker has calls in flight
// at any moment, for the crash test), poison:SYMBOL (every call of an order for SYMBOL
// answers 500, the others are served: one bad task among healthy traffic).
const FAULT = HOOKS ? (process.env.RISK_AGENT_FAULT || '') : '';
const LOG = HOOKS ? process.env.RISK_AGENT_LOG : undefined;
// RISK_AGENT_METHODS=execute[,…]: a service that implements only these contract methods
// (its health answer says so; the others answer 404).
const METHODS = HOOKS && process.env.RISK_AGENT_METHODS
  ? process.env.RISK_AGENT_METHODS.split(',') : null;
// What it implements unless told otherwise: the four steps and the one-call forms.
const ALL_METHODS = ['can_handle', 'prepare_context', 'execute', 'post_process', 'run', 'run_batch'];
const seen = new Map(); // task id -> execute calls so far
const stats = { open: 0, accepted: 0, pending: 0, aborted: 0, elsewhere: 0, cookies: 0, requests: 0 };

function fault(req, res) {
  const [kind, arg] = FAULT.split(':');
  if (kind === 'noop') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"result":{"status":"success","output":{}}}');
    return true;
  }
  if (kind === 'poison') {
    if (!req.task.payload || req.task.payload.symbol !== arg) return false;
    res.writeHead(500, { 'content-type': 'application/problem+json' });
    res.end('{"title":"poisoned"}');
    return true;
  }
  const calls = (seen.get(req.task.id) || 0) + 1;
  seen.set(req.task.id, calls);
  const n = Number(arg || 0);
  const send = (status, type, body, headers = {}) => {
    res.writeHead(status, { 'content-type': type, ...headers });
    res.end(body);
    return true;
  };
  switch (kind) {
    case 'status500':
      return calls <= n && send(500, 'application/problem+json', '{"title":"boom"}');
    case 'retry_after':
      return calls === 1 && send(429, 'application/problem+json', '{"title":"slow down"}',
        { 'retry-after': String(n) });
    case 'slow': {
      if (req.time_left_ms === null || req.time_left_ms === undefined) return false;
      // calls held open: a client that gives up (a deadline, a cancelled task) must close
      // its connection, and the work stops here when it does
      stats.pending = (stats.pending || 0) + 1;
      const timer = setTimeout(() => send(200, 'application/json', '{"result":{"status":"success"}}'), n);
      res.on('close', () => {
        stats.pending -= 1;
        if (res.writableFinished) return;
        clearTimeout(timer);
        stats.aborted += 1;
        if (LOG) fs.appendFileSync(LOG, JSON.stringify({ step: 'aborted', task: req.task.id, at_ms: Date.now() }) + '\n');
      });
      return true;
    }
    case 'garbage':
      return send(200, 'application/json', 'this is {not json password=hunter2');
    case 'content_type':
      return send(200, 'text/html', '<html>{"result":{"status":"success"}}</html>');
    case 'redirect':
      return send(302, 'application/json', '{}',
        { location: '/v1/elsewhere', 'set-cookie': 'session=steer; Path=/' });
    case 'huge':
      return send(200, 'application/json', `{"result":{"status":"success","output":"${'x'.repeat(n)}"}}`);
    case 'hold': {
      let result;
      try {
        result = STEPS.execute(req);
      } catch {
        return false; // an invalid order is answered at once, as without the fault
      }
      setTimeout(() => send(200, 'application/json', JSON.stringify(result)), n);
      return true;
    }
    case 'nonce': {
      const output = { ...riskCheck(order(req.context.order)), nonce: Math.random() };
      return send(200, 'application/json', JSON.stringify({ result: { status: 'success', output } }));
    }
    default:
      return false;
  }
}

// payload.hostile (with the hooks on): this one task's execute answers a hostile value, so
// one service serves hostile and good tasks side by side, as the hardening probes need.
const HOSTILE = {
  nan: () => [200, {}, '{"result":{"status":"success","output":{},"metrics":{"score":NaN}}}'],
  infinity: () => [200, {}, '{"result":{"status":"success","output":{},"metrics":{"score":-Infinity}}}'],
  overflow: () => [200, {}, '{"result":{"status":"success","output":{"x":1e400}}}'],
  wide_int: () => [200, {}, '{"result":{"status":"success","output":{"n":123456789012345678901234567890}}}'],
  retry_forever: () => [503, { 'retry-after': '999999999' }, '{"title":"come back later"}'],
  retry_9999: () => [429, { 'retry-after': 'Fri, 31 Dec 9999 23:59:59 GMT' }, '{"title":"later"}'],
  echo_detail: (auth) => [403, {}, JSON.stringify({ detail: `denied for ${auth}` })],
  echo_message: (auth) => [200, {}, JSON.stringify({
    result: { status: 'failed', error: { code: 'denied', message: `bad credentials ${auth}` } } })],
  echo_output: (auth) => [200, {}, JSON.stringify({ result: { status: 'success', output: { seen: auth } } })],
};

function hostile(kind, req, res) {
  const make = HOSTILE[kind];
  if (!make) return problem(res, 400, 'unknown hostile kind', kind);
  const [status, headers, body] = make(req.headers.authorization || '');
  const type = status === 200 ? 'application/json' : 'application/problem+json';
  res.writeHead(status, { 'content-type': type, ...headers });
  return res.end(body);
}

// HTTP ---------------------------------------------------------------------------------------

// A number JSON.stringify cannot write (it writes null): the 'nan' batch hook's, put in the text.
const NAN = '__NaN__';

function json(res, status, body) {
  let text = JSON.stringify(body);
  if (HOOKS) text = text.split(`"${NAN}"`).join('NaN');
  res.writeHead(status, { 'content-type': status < 300 ? 'application/json' : 'application/problem+json' });
  res.end(text);
}

function problem(res, status, title, detail) {
  json(res, status, { type: 'about:blank', title, status, detail });
}

function handle(req, res, raw) {
  if (req.method === 'GET' && req.url === '/v1/health') {
    // With the hooks on and no RISK_AGENT_METHODS, a service of the first protocol: no list.
    const methods = HOOKS ? METHODS : ALL_METHODS;
    return json(res, 200, methods ? { status: 'ok', version: VERSION, methods } : { status: 'ok', version: VERSION });
  }
  if (HOOKS && req.method === 'GET' && req.url === '/_stats') return json(res, 200, stats);
  if (HOOKS && req.headers.cookie) stats.cookies += 1;
  if (HOOKS && req.url === '/v1/elsewhere') stats.elsewhere += 1;
  const step = req.url.startsWith('/v1/') ? req.url.slice(4) : null;
  if (!ALL_METHODS.includes(step || '') || (METHODS && !METHODS.includes(step))) {
    return problem(res, 404, 'no such step', req.url);
  }
  if (req.method !== 'POST') return problem(res, 405, 'method not allowed', req.method);
  if (!(req.headers['content-type'] || '').startsWith('application/json')) {
    return problem(res, 415, 'unsupported media type', 'send application/json');
  }
  let body;
  try {
    body = JSON.parse(raw);
  } catch (err) {
    return problem(res, 400, 'invalid JSON', err.message);
  }
  const batch = step === 'run_batch';
  if (body === null || typeof body !== 'object' || body.protocol !== 1 || !(batch || body.task)) {
    return problem(res, 400, 'not a protocol v1 request', 'needs protocol 1 and a task');
  }
  if (LOG) {
    const each = batch ? (Array.isArray(body.runs) ? body.runs : []) : [body];
    stats.requests += 1; // the lines of one batch share their request's number
    const lines = each.map((one) => JSON.stringify({ step, task: one.task && one.task.id,
      attempt: one.attempt, key: one.idempotency_key, time_left_ms: one.time_left_ms,
      at_ms: Date.now(), request: stats.requests, body: one }) + '\n');
    fs.appendFileSync(LOG, lines.join(''));
  }
  if (batch) {
    if (FAULT === 'garbage') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end('this is {not json password=hunter2');
    }
    const hold = FAULT.startsWith('hold:') ? Number(FAULT.split(':')[1]) : 0;
    let answer;
    try {
      answer = runBatch(body);
    } catch (err) {
      return problem(res, 400, 'bad request', String(err && err.message));
    }
    if (hold) return void setTimeout(() => json(res, 200, answer), hold);
    return json(res, 200, answer);
  }
  const payload = body.task.payload || {};
  if (HOOKS && step === 'execute' && typeof payload.hostile === 'string') {
    return hostile(payload.hostile, req, res);
  }
  if ((step === 'execute' || step === 'run') && FAULT && fault(body, res)) return undefined;
  try {
    return json(res, 200, step === 'run' ? run(body) : STEPS[step](body));
  } catch (err) {
    if (err instanceof Invalid) return problem(res, 422, 'invalid input', err.message);
    return problem(res, 500, 'internal error', String(err && err.message));
  }
}

const server = http.createServer({ keepAliveTimeout: 65000 }, (req, res) => {
  const chunks = []; let size = 0;
  req.on('data', (chunk) => {
    size += chunk.length;
    if (size > MAX_BODY) { problem(res, 413, 'body too large', `over ${MAX_BODY} bytes`); req.destroy(); }
    else chunks.push(chunk);
  });
  req.on('end', () => { if (size <= MAX_BODY) handle(req, res, Buffer.concat(chunks).toString('utf8')); });
});
server.on('connection', (socket) => {
  stats.open += 1; stats.accepted += 1;
  socket.on('close', () => { stats.open -= 1; });
});

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

server.listen(Number(arg('--port', '8787')), arg('--host', '127.0.0.1'), () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => server.close(() => process.exit(0)));
