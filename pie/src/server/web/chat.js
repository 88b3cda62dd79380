// Chat: a conversation with the selected model, kept in this browser (localStorage). Answers stream in as
// Markdown; Stop cancels the request (the server frees its sequence when the connection closes);
// Regenerate answers the last message again. Reasoning (reasoning_content) is shown folded.
import {streamChat} from './api.js';
import {renderMarkdown} from './markdown.js';
import {$, numberField, reportError, selectedModel} from './ui.js';

const STORE = 'orchard.chat.v1';
const SETTINGS = {
  system: 'chat-system', temperature: 'chat-temperature', top_p: 'chat-top-p', top_k: 'chat-top-k',
  min_p: 'chat-min-p', presence_penalty: 'chat-presence', frequency_penalty: 'chat-frequency',
  max_tokens: 'chat-max-tokens', seed: 'chat-seed',
};

// messages: {role: 'user' | 'assistant', content, reasoning?, meta?, error?}
let state = {messages: [], settings: {}};
let running = null;  // {controller, reply}
const views = new Map();  // message -> its view

function load() {
  try {
    const saved = JSON.parse(localStorage.getItem(STORE));
    if (saved && Array.isArray(saved.messages)) state = {messages: saved.messages, settings: saved.settings ?? {}};
  } catch {
    // a corrupt store starts afresh
  }
}

function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(state));
  } catch {
    // storage full or off: the conversation lives on in the page
  }
}

function readSettings() {
  for (const [name, id] of Object.entries(SETTINGS)) state.settings[name] = $(id).value;
  save();
}

function applySettings() {
  for (const [name, id] of Object.entries(SETTINGS)) {
    if (state.settings[name] !== undefined) $(id).value = state.settings[name];
  }
}

function requestBody(history) {
  const messages = [];
  const system = $('chat-system').value.trim();
  if (system) messages.push({role: 'system', content: system});
  for (const m of history) {
    // A reply that failed before any text is not part of the conversation the model sees.
    if (m.role === 'assistant' && !m.content) continue;
    messages.push({role: m.role, content: m.content});
  }
  const body = {model: selectedModel(), messages, stream_options: {include_usage: true}};
  for (const name of ['temperature', 'top_p', 'min_p', 'presence_penalty', 'frequency_penalty', 'max_tokens', 'seed']) {
    const v = numberField(SETTINGS[name]);
    if (v !== undefined) body[name] = v;
  }
  const topK = numberField('chat-top-k');
  if (topK) body.top_k = topK;
  return body;
}

// --- views -----------------------------------------------------------------------------------------
function messageView(message) {
  const article = document.createElement('article');
  article.className = `msg msg-${message.role}`;
  const role = document.createElement('h3');
  role.className = 'msg-role';
  role.textContent = message.role === 'user' ? 'You' : 'Assistant';
  const reasoning = document.createElement('details');
  reasoning.className = 'reasoning';
  const reasoningSummary = document.createElement('summary');
  const reasoningText = document.createElement('div');
  reasoning.append(reasoningSummary, reasoningText);
  const content = document.createElement('div');
  content.className = 'msg-content';
  const meta = document.createElement('p');
  meta.className = 'msg-meta';
  const error = document.createElement('p');
  error.className = 'msg-error';
  article.append(role, reasoning, content, meta, error);

  let timer = null;
  const view = {
    element: article,
    // final: render now, highlighted; otherwise at most every 80 ms while the answer streams.
    update(final = false) {
      if (!final) {
        if (!timer) timer = setTimeout(() => view.update(true, false), 80);
        return;
      }
      clearTimeout(timer);
      timer = null;
      reasoning.hidden = !message.reasoning;
      if (message.reasoning) {
        reasoningSummary.textContent = running?.reply === message && !message.content ? 'Reasoning (thinking…)'
          : `Reasoning (${message.reasoning.length} characters)`;
        reasoningText.textContent = message.reasoning;
      }
      if (message.role === 'user') {
        content.classList.add('plain');
        content.textContent = message.content;
      } else {
        renderMarkdown(content, message.content || (running?.reply === message ? '…' : ''), true);
      }
      meta.textContent = message.meta ?? '';
      meta.hidden = !message.meta;
      error.textContent = message.error ?? '';
      error.hidden = !message.error;
      article.setAttribute('aria-busy', running?.reply === message ? 'true' : 'false');
    },
  };
  return view;
}

function render() {
  const log = $('chat-log');
  log.replaceChildren();
  views.clear();
  for (const m of state.messages) {
    const view = messageView(m);
    views.set(m, view);
    log.append(view.element);
    view.update(true);
  }
  $('chat-empty').hidden = state.messages.length > 0;
  updateButtons();
  scrollToEnd(true);
}

function scrollToEnd(force) {
  const log = $('chat-log');
  const nearEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 80;
  if (force || nearEnd) log.scrollTop = log.scrollHeight;
  const last = log.lastElementChild;
  // On a phone the log does not scroll by itself: the page does.
  if ((force || nearEnd) && last && getComputedStyle(log).maxHeight === 'none') last.scrollIntoView({block: 'end'});
}

function updateButtons() {
  const busy = running !== null;
  $('chat-send').hidden = busy;
  $('chat-stop').hidden = !busy;
  const last = state.messages[state.messages.length - 1];
  $('chat-regenerate').disabled = busy || !last || last.role !== 'assistant';
  $('chat-clear').disabled = busy;
}

function announce(text) {
  $('chat-status').textContent = text;
}

// --- generation --------------------------------------------------------------------------------------
async function answer() {
  const reply = {role: 'assistant', content: '', reasoning: ''};
  const history = state.messages.slice();
  state.messages.push(reply);
  const controller = new AbortController();
  running = {controller, reply};
  render();
  announce('Answering…');
  const start = performance.now();
  let first = null;
  let usage = null;
  let finish = null;
  const view = views.get(reply);
  try {
    await streamChat(requestBody(history), (chunk) => {
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices ?? []) {
        const delta = choice.delta ?? {};
        if (delta.content) reply.content += delta.content;
        if (delta.reasoning_content) reply.reasoning += delta.reasoning_content;
        if ((delta.content || delta.reasoning_content) && first === null) first = performance.now();
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      view.update();
      scrollToEnd(false);
    }, controller.signal);
    const seconds = (performance.now() - (first ?? start)) / 1000;
    const tokens = usage?.completion_tokens;
    const parts = [];
    if (tokens !== undefined) parts.push(`${tokens} tokens`);
    if (tokens > 1 && seconds > 0) parts.push(`${(tokens / seconds).toFixed(1)} tokens/s`);
    if (first !== null) parts.push(`first token after ${((first - start) / 1000).toFixed(2)} s`);
    if (finish === 'length') parts.push('cut at max tokens');
    reply.meta = parts.join(' · ');
    announce(`Answer complete${tokens !== undefined ? `, ${tokens} tokens` : ''}.`);
  } catch (err) {
    if (err.name === 'AbortError') {
      reply.meta = 'Stopped.';
      announce('Stopped.');
    } else {
      // The page says what happened here, beside the answer; the key form opens when the key is at fault.
      reply.error = reportError(err, {notice: false});
      announce(reply.error);
    }
  } finally {
    running = null;
    save();
    view.update(true);
    updateButtons();
    scrollToEnd(false);
  }
}

function send() {
  const input = $('chat-input');
  const text = input.value.trim();
  if (!text || running) return;
  input.value = '';
  state.messages.push({role: 'user', content: text});
  save();
  answer();
}

function regenerate() {
  if (running) return;
  const last = state.messages[state.messages.length - 1];
  if (!last || last.role !== 'assistant') return;
  state.messages.pop();
  answer();
}

function stop() {
  running?.controller.abort();
}

function clear() {
  if (running) return;
  state.messages = [];
  save();
  render();
  announce('New conversation.');
  $('chat-input').focus();
}

export function initChat() {
  load();
  applySettings();
  if (window.matchMedia('(max-width: 760px)').matches) $('chat-settings').open = false;
  for (const id of Object.values(SETTINGS)) $(id).addEventListener('change', readSettings);
  $('chat-form').addEventListener('submit', (e) => {
    e.preventDefault();
    send();
  });
  $('chat-input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  $('chat-stop').addEventListener('click', stop);
  $('chat-regenerate').addEventListener('click', regenerate);
  $('chat-clear').addEventListener('click', clear);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && running) stop();
  });
  render();
}
