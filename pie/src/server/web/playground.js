// The structured-output playground: a JSON Schema, GBNF or Lark grammar, regex or a set of tools; the
// server compiles it (POST /v1/grammar/compile: its statistics, or the error and where it is), generates
// under it with the token_detail extension (each token sampled or forced, and how many tokens the mask
// allowed at each sampled step), and checks the output against it. Everything shown comes from the server.
/* global Chart */
import {ApiError, postJson, streamChat} from './api.js';
import {EXAMPLES, SOURCE_LABELS} from './examples.js';
import {features} from './markdown.js';
import {$, describeError, numberField, reportError, selectedModel} from './ui.js';

const STORE = 'orchard.playground.v1';
let state = {kind: 'json_schema', sources: {}, prompts: {}, examples: {}};
let running = null;
let compileTimer = null;
let compileSeq = 0;
let chart = null;
let generations = 0;  // finished, whatever the outcome (tests wait on #pg-tokens's data-generations)

function generationEnded() {
  $('pg-tokens').dataset.generations = String(++generations);
}

function load() {
  try {
    const saved = JSON.parse(localStorage.getItem(STORE));
    if (saved && EXAMPLES[saved.kind]) state = {...state, ...saved};
  } catch {
    // start afresh
  }
}

function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(state));
  } catch {
    // not stored: fine
  }
}

const kind = () => state.kind;
const source = () => $('pg-source').value;

// --- the constraint as request fields ----------------------------------------------------------------
// For a compile: the schema goes as its text, so that a syntax error comes back with its place.
function compileFields() {
  switch (kind()) {
    case 'json_schema': return {json_schema: source()};
    case 'grammar': return {grammar: source()};
    case 'lark': return {lark: source()};
    case 'regex': return {regex: source()};
    default: return null;
  }
}

function parseTools() {
  let tools;
  try {
    tools = JSON.parse(source());
  } catch (err) {
    throw new ApiError(`the tools are not valid JSON: ${err.message}`, {param: 'tools'});
  }
  if (!Array.isArray(tools)) throw new ApiError('the tools must be a JSON array of tool definitions', {param: 'tools'});
  return tools;
}

function generationFields() {
  switch (kind()) {
    case 'json_schema': {
      let schema;
      try {
        schema = JSON.parse(source());
      } catch {
        return null;  // the compile step has said where
      }
      return {response_format: {type: 'json_schema', json_schema: {name: 'playground', schema}}};
    }
    case 'tools': {
      const choice = $('pg-tool-choice').value || 'auto';
      const named = choice.startsWith('function:');
      return {
        tools: parseTools(),
        tool_choice: named ? {type: 'function', function: {name: choice.slice(9)}} : choice,
        parallel_tool_calls: $('pg-parallel').checked,
      };
    }
    default: return compileFields();
  }
}

// --- compile --------------------------------------------------------------------------------------
function formatBytes(n) {
  return n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : `${(n / 1024).toFixed(1)} KiB`;
}

// The UTF-16 offset in `text` of a 1-based line and column (columns count characters).
function offsetOf(text, line, column) {
  const lines = text.split('\n');
  let offset = 0;
  for (let i = 0; i < line - 1 && i < lines.length; ++i) offset += lines[i].length + 1;
  const chars = Array.from(lines[Math.min(line, lines.length) - 1] ?? '');
  return offset + chars.slice(0, Math.max(column - 1, 0)).join('').length;
}

function showCompileError(err) {
  const box = $('pg-compile');
  box.replaceChildren();
  const message = document.createElement('p');
  message.className = 'error';
  message.id = 'pg-compile-error';
  message.textContent = describeError(err);
  box.append(message);
  const loc = err.location;
  if (loc?.line) {
    // The line at fault with a caret under the column.
    const text = source();
    const lineText = text.split('\n')[loc.line - 1] ?? '';
    const gutter = `${loc.line} | `;
    const pre = document.createElement('pre');
    pre.className = 'error-at';
    pre.setAttribute('aria-label', `line ${loc.line}, column ${loc.column}`);
    const caret = Array.from(lineText).slice(0, Math.max(loc.column - 1, 0)).map((c) => (c === '\t' ? '\t' : ' ')).join('');
    pre.textContent = `${gutter}${lineText}\n${' '.repeat(gutter.length)}${caret}^`;
    box.append(pre);
    const go = document.createElement('button');
    go.type = 'button';
    go.textContent = `Go to line ${loc.line}, column ${loc.column}`;
    go.addEventListener('click', () => {
      const at = offsetOf(text, loc.line, loc.column);
      const area = $('pg-source');
      area.focus();
      area.setSelectionRange(at, Math.min(at + 1, text.length));
    });
    box.append(go);
  } else if (loc?.pointer !== undefined) {
    const where = document.createElement('p');
    where.className = 'error-at';
    where.textContent = `In the schema at ${loc.pointer || '/'}${loc.keyword ? ` (keyword "${loc.keyword}")` : ''}.`;
    box.append(where);
  }
}

function showCompiled(result) {
  const s = result.stats;
  const box = $('pg-compile');
  const p = document.createElement('p');
  p.className = 'ok';
  p.id = 'pg-compile-ok';
  p.textContent = `Compiles: ${s.states} automaton states, ${s.token_tables} token tables, ${s.uncertain_tokens} ` +
    `tokens checked at run time, ${formatBytes(s.memory_bytes)}; ${result.compile_ms} ms` +
    `${result.ready_ms > result.compile_ms + 0.05 ? ` (${result.ready_ms} ms with its tables)` : ''}` +
    `${result.cached ? ', from the cache' : ''}. Vocabulary: ${result.vocabulary.tokens} tokens.`;
  box.replaceChildren(p);
}

function showToolsParsed() {
  const box = $('pg-compile');
  const select = $('pg-tool-choice');
  const previous = select.value;
  let tools;
  try {
    tools = parseTools();
  } catch (err) {
    showCompileError(err);
    return false;
  }
  const names = tools.map((t) => t?.function?.name).filter((n) => typeof n === 'string');
  select.replaceChildren();
  for (const [value, label] of [['auto', 'auto: text or calls'], ['required', 'required: at least one call'],
    ['none', 'none: text only'], ...names.map((n) => [`function:${n}`, `${n}: a call of it`])]) {
    select.append(new Option(label, value));
  }
  if ([...select.options].some((o) => o.value === previous)) select.value = previous;
  const p = document.createElement('p');
  p.className = 'ok';
  p.id = 'pg-compile-ok';
  p.textContent = `${names.length} tool${names.length === 1 ? '' : 's'}: ${names.join(', ')}. The server builds ` +
    'the call grammar from their parameter schemas when you generate.';
  box.replaceChildren(p);
  return true;
}

async function compile() {
  clearTimeout(compileTimer);
  if (kind() === 'tools') return showToolsParsed();
  const seq = ++compileSeq;
  $('pg-compile').textContent = 'Compiling…';
  try {
    const result = await postJson('/v1/grammar/compile', {model: selectedModel(), ...compileFields()});
    if (seq === compileSeq) showCompiled(result);
    return true;
  } catch (err) {
    if (seq !== compileSeq) return false;
    showCompileError(err);
    if (err.kind !== 'http') reportError(err);
    return false;
  }
}

function scheduleCompile() {
  clearTimeout(compileTimer);
  compileTimer = setTimeout(compile, 500);
}

// --- output ------------------------------------------------------------------------------------------
function visible(text) {
  return text.replace(/\n/g, '↵\n');
}

function tokenSpan(entry, step) {
  const span = document.createElement('span');
  const how = entry.end ? 'end of sequence' : entry.forced ? 'forced' : 'sampled';
  span.className = `tok ${entry.forced ? 'tok-forced' : 'tok-sampled'}${entry.end ? ' tok-end' : ''}`;
  span.textContent = entry.end ? `⟨${entry.token}⟩` : visible(entry.token);
  span.dataset.step = String(step);
  span.dataset.how = how;
  const allowed = entry.allowed === null || entry.allowed === undefined ? '' : `, ${entry.allowed} tokens allowed`;
  span.title = `#${step} ${how}${allowed} (token id ${entry.id})`;
  if (!entry.forced && entry.allowed !== null && entry.allowed !== undefined) {
    const sup = document.createElement('sup');
    sup.textContent = String(entry.allowed);
    sup.setAttribute('aria-hidden', 'true');
    span.append(sup);
  }
  return span;
}

function tableRow(entry, step) {
  const tr = document.createElement('tr');
  const cells = [String(step), entry.end ? `⟨${entry.token}⟩` : JSON.stringify(entry.token).slice(1, -1),
    entry.end ? 'end (sampled)' : entry.forced ? 'forced' : 'sampled',
    entry.allowed === null || entry.allowed === undefined ? '—' : String(entry.allowed)];
  cells.forEach((text, i) => {
    const td = document.createElement('td');
    td.textContent = text;
    if (i === 0 || i === 3) td.className = 'num';
    tr.append(td);
  });
  return tr;
}

function resetOutput() {
  $('pg-tokens').replaceChildren();
  $('pg-table').replaceChildren();
  $('pg-summary').textContent = '';
  const validity = $('pg-validity');
  validity.textContent = '';
  validity.className = 'validity';
  $('pg-json').hidden = true;
  $('pg-calls').hidden = true;
  $('pg-calls').replaceChildren();
  $('pg-chart-box').hidden = true;
}

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

function summarize(entries, finish) {
  const sampled = entries.filter((e) => !e.forced);
  const forced = entries.length - sampled.length;
  const counts = sampled.map((e) => e.allowed).filter((n) => typeof n === 'number');
  let text = `${plural(entries.length, 'token')}: ${sampled.length} sampled, ${forced} forced by the grammar` +
    `${entries.length ? ` (${Math.round((100 * forced) / entries.length)}%)` : ''}.`;
  if (counts.length) {
    text += ` The mask allowed ${Math.min(...counts)} to ${Math.max(...counts)} tokens at a sampled step` +
      ` (${plural(counts.filter((n) => n === 1).length, 'step')} with a single choice).`;
  }
  if (finish === 'length') text += ' The output was cut at max tokens.';
  $('pg-summary').textContent = text;
  if (!features.charts || !counts.length) return;
  $('pg-chart-box').hidden = false;
  const labels = [];
  const data = [];
  entries.forEach((e, i) => {
    if (!e.forced && typeof e.allowed === 'number') {
      labels.push(`#${i + 1} ${e.end ? '⟨end⟩' : e.token}`);
      data.push(e.allowed);
    }
  });
  chart?.destroy();
  chart = new Chart($('pg-chart'), {
    type: 'bar',
    data: {labels, datasets: [{label: 'tokens allowed', data, backgroundColor: '#0b5cad'}]},
    options: {
      animation: false, maintainAspectRatio: false,
      scales: {y: {type: 'logarithmic', min: 1, title: {display: true, text: 'tokens allowed (log)'}},
        x: {ticks: {autoSkip: true, maxRotation: 0}}},
      plugins: {legend: {display: false}},
    },
  });
}

function showValidity(ok, text) {
  const validity = $('pg-validity');
  validity.className = `validity ${ok ? 'ok' : 'bad'}`;
  validity.textContent = text;
}

async function check(fields, text, layout) {
  const body = {model: selectedModel(), ...fields, text};
  if (layout) body.json_layout = layout;
  return (await postJson('/v1/grammar/compile', body)).check;
}

async function validateOutput(content, finish) {
  if (kind() === 'json_schema') {
    try {
      $('pg-json').textContent = JSON.stringify(JSON.parse(content), null, 2);
      $('pg-json').hidden = false;
    } catch {
      // not JSON (cut short): the check below says why
    }
  }
  const result = await check(compileFields(), content);
  const ok = result.accepted;
  showValidity(ok, `${ok ? 'Valid' : 'Not valid'}: ${result.message}` +
    `${!ok && finish === 'length' ? ' (the output was cut at max tokens)' : ''}.`);
}

async function validateCalls(calls, tools, content) {
  const box = $('pg-calls');
  box.hidden = false;
  if (!calls.length) {
    const p = document.createElement('p');
    p.textContent = `No tool call; the answer: ${content || '(empty)'}`;
    box.replaceChildren(p);
    showValidity(true, 'The model answered with text (tool_choice allows it).');
    return;
  }
  let allValid = true;
  box.replaceChildren();
  for (const call of calls) {
    const div = document.createElement('div');
    div.className = 'call';
    const h = document.createElement('h3');
    h.textContent = `Call ${call.index + 1}: ${call.name}`;
    const pre = document.createElement('pre');
    pre.className = 'code';
    try {
      pre.textContent = JSON.stringify(JSON.parse(call.arguments), null, 2);
    } catch {
      pre.textContent = call.arguments;
    }
    const verdict = document.createElement('p');
    const tool = tools.find((t) => t?.function?.name === call.name);
    if (!tool) {
      verdict.textContent = `Not valid: no tool is named ${call.name}.`;
      allValid = false;
    } else {
      const result = await check({json_schema: tool.function.parameters ?? {type: 'object'}}, call.arguments, 'flexible');
      verdict.textContent = `Arguments ${result.accepted ? 'valid' : 'not valid'} against ${call.name}'s parameters: ` +
        `${result.message}.`;
      allValid &&= result.accepted;
    }
    div.append(h, pre, verdict);
    box.append(div);
  }
  showValidity(allValid, allValid ? `Valid: ${calls.length} call${calls.length === 1 ? '' : 's'}, each one's ` +
    'arguments fit its parameters.' : 'Not valid: see the calls below.');
}

async function generate() {
  if (running) return;
  resetOutput();
  let fields;
  try {
    fields = generationFields();
  } catch (err) {
    showCompileError(err);
    showValidity(false, 'Fix the constraint first: it does not compile.');
    generationEnded();
    return;
  }
  const compiled = await compile();
  if (!fields || !compiled) {
    showValidity(false, 'Fix the constraint first: it does not compile.');
    generationEnded();
    return;
  }
  const prompt = $('pg-prompt').value;
  const body = {model: selectedModel(), messages: [{role: 'user', content: prompt}], token_detail: true, ...fields};
  for (const [name, id] of [['temperature', 'pg-temperature'], ['max_tokens', 'pg-max-tokens']]) {
    const v = numberField(id);
    if (v !== undefined) body[name] = v;
  }
  const controller = new AbortController();
  running = controller;
  $('pg-generate').disabled = true;
  $('pg-stop').hidden = false;
  const entries = [];
  const calls = [];
  let content = '';
  let finish = null;
  const tokens = $('pg-tokens');
  const table = $('pg-table');
  tokens.setAttribute('aria-busy', 'true');
  showValidity(true, 'Generating…');
  try {
    await streamChat(body, (chunk) => {
      for (const choice of chunk.choices ?? []) {
        for (const entry of choice.token_detail ?? []) {
          entries.push(entry);
          tokens.append(tokenSpan(entry, entries.length));
          table.append(tableRow(entry, entries.length));
        }
        const delta = choice.delta ?? {};
        if (delta.content) content += delta.content;
        for (const piece of delta.tool_calls ?? []) {
          const call = (calls[piece.index] ??= {index: piece.index, name: '', arguments: ''});
          if (piece.function?.name) call.name = piece.function.name;
          if (piece.function?.arguments) call.arguments += piece.function.arguments;
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    }, controller.signal);
    summarize(entries, finish);
    if (kind() === 'tools') await validateCalls(calls.filter(Boolean), fields.tools, content);
    else await validateOutput(content, finish);
  } catch (err) {
    summarize(entries, finish);
    if (err.name === 'AbortError') {
      showValidity(false, 'Stopped: the output is unfinished.');
    } else {
      if (err.location) showCompileError(err);
      showValidity(false, reportError(err, {notice: err.kind !== 'http'}));
    }
  } finally {
    running = null;
    tokens.setAttribute('aria-busy', 'false');
    $('pg-generate').disabled = false;
    $('pg-stop').hidden = true;
    generationEnded();
  }
}

// --- kinds and examples ----------------------------------------------------------------------------
function fillExamples() {
  const select = $('pg-example');
  select.replaceChildren(new Option('(your own)', ''));
  EXAMPLES[kind()].forEach((ex, i) => select.append(new Option(ex.name, String(i))));
  select.value = state.examples[kind()] ?? '';
}

function useExample(index) {
  const ex = EXAMPLES[kind()][index];
  if (!ex) return;
  state.examples[kind()] = String(index);
  state.sources[kind()] = ex.source;
  state.prompts[kind()] = ex.prompt;
  $('pg-source').value = ex.source;
  $('pg-prompt').value = ex.prompt;
  save();
  compile();
}

function setKind(k) {
  state.kind = k;
  for (const radio of document.querySelectorAll('input[name=pg-kind]')) radio.checked = radio.value === k;
  $('pg-source-label').textContent = SOURCE_LABELS[k];
  $('pg-tool-choice-row').hidden = k !== 'tools';
  fillExamples();
  if (state.sources[k] === undefined) {
    useExample(0);
    fillExamples();
    return;
  }
  $('pg-source').value = state.sources[k];
  $('pg-prompt').value = state.prompts[k] ?? '';
  save();
  compile();
}

export function initPlayground() {
  load();
  for (const radio of document.querySelectorAll('input[name=pg-kind]')) {
    radio.addEventListener('change', () => radio.checked && setKind(radio.value));
  }
  $('pg-example').addEventListener('change', (e) => e.target.value !== '' && useExample(Number(e.target.value)));
  $('pg-source').addEventListener('input', () => {
    state.sources[kind()] = source();
    state.examples[kind()] = '';
    $('pg-example').value = '';
    save();
    scheduleCompile();
  });
  $('pg-prompt').addEventListener('input', () => {
    state.prompts[kind()] = $('pg-prompt').value;
    save();
  });
  $('pg-compile-button').addEventListener('click', compile);
  $('pg-generate').addEventListener('click', generate);
  $('pg-stop').addEventListener('click', () => running?.abort());
  setKind(state.kind);
}

// The model or the key changed: compile again against it.
export function refreshPlayground() {
  compile();
}
