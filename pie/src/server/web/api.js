// The server's API as the page uses it: the API key, JSON requests, errors in words, and streamed chat
// answers (server-sent events). Every call goes through the same key the server's other clients use.
const KEY = 'orchard.apiKey';

export function apiKey() {
  return sessionStorage.getItem(KEY) ?? localStorage.getItem(KEY) ?? '';
}

// remember: localStorage (kept across visits); otherwise sessionStorage (this tab only).
export function setApiKey(key, remember) {
  sessionStorage.removeItem(KEY);
  localStorage.removeItem(KEY);
  if (key) (remember ? localStorage : sessionStorage).setItem(KEY, key);
}

export function keyRemembered() {
  return localStorage.getItem(KEY) !== null;
}

// kind: 'auth' (401: no key or a wrong one), 'http' (another error answer), 'network' (no answer, or a
// stream cut short: the server is down or went away).
export class ApiError extends Error {
  constructor(message, {status = 0, code = null, param = null, location = null, kind = 'http'} = {}) {
    super(message);
    this.name = 'ApiError';
    Object.assign(this, {status, code, param, location, kind});
  }
}

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  const key = apiKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function errorOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: the status says it
  }
  const e = body?.error;
  const message = typeof e === 'string' ? e : e?.message ?? `HTTP ${response.status} ${response.statusText}`;
  return new ApiError(message, {
    status: response.status, code: e?.code ?? null, param: e?.param ?? null, location: e?.location ?? null,
    kind: response.status === 401 ? 'auth' : 'http',
  });
}

export async function request(method, path, body, {signal} = {}) {
  let response;
  try {
    response = await fetch(path, {
      method, headers: headers(body !== undefined), signal, cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    throw new ApiError(`cannot reach the server (${err.message})`, {kind: 'network'});
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

export async function getJson(path, options) {
  return (await request('GET', path, undefined, options)).json();
}

export async function getText(path, options) {
  return (await request('GET', path, undefined, options)).text();
}

export async function postJson(path, body, options) {
  return (await request('POST', path, body, options)).json();
}

// Streams a chat completion (body without "stream"): onChunk(chunk) for each chunk, in order. Resolves at
// the end of the answer ([DONE]). Throws ApiError for an error answer or error event, or when the stream
// ends before [DONE] (kind 'network'); an AbortError when `signal` stops it (the server then cancels the
// request: it notices the connection close).
export async function streamChat(body, onChunk, signal) {
  const response = await request('POST', '/v1/chat/completions', {...body, stream: true}, {signal});
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    let part;
    try {
      part = await reader.read();
    } catch (err) {
      if (err.name === 'AbortError' || signal?.aborted) throw new DOMException('stopped', 'AbortError');
      throw new ApiError(`the connection to the server was lost mid-answer (${err.message})`, {kind: 'network'});
    }
    if (part.done) break;
    buffer += decoder.decode(part.value, {stream: true});
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart())
        .join('\n');
      if (!data) continue;  // a comment: the server's keep-alive
      if (data === '[DONE]') return;
      const chunk = JSON.parse(data);
      if (chunk.error) {
        throw new ApiError(chunk.error.message ?? String(chunk.error), {code: chunk.error.code ?? null});
      }
      onChunk(chunk);
    }
  }
  throw new ApiError('the server closed the stream before the answer was finished', {kind: 'network'});
}
