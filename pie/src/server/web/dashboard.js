// The dashboard: the server's Prometheus metrics (GET /metrics), read every second while the tab is
// shown, as numbers and live charts, per model (a "model" label when the metrics carry one, else the one
// model served). Rates are differences of the server's counters between two readings, as Prometheus's
// rate() computes them; the page adds nothing the server does not count.
/* global Chart */
import {getText} from './api.js';
import {features} from './markdown.js';
import {$, describeError} from './ui.js';

const HISTORY_SECONDS = 600;
const CHART_POINTS = 120;
const RECENT_SECONDS = 60;  // the window of the slower figures (time to first token, hit rate)

let snapshots = [];  // {t (s), groups: Map(model -> Map(name -> value))}
let timer = null;
let visible = false;
let models = [];     // served names, for the single-model title
const charts = new Map();  // group -> {name -> Chart}
const start = performance.now() / 1000;

// Prometheus text format 0.0.4: samples by name, summed over labels other than "model".
export function parseMetrics(text) {
  const groups = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] ?? '').matchAll(/([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    }
    const value = Number(m[3]);
    if (!Number.isFinite(value) || labels.le !== undefined) continue;  // histogram buckets: sums and counts suffice
    const model = labels.model ?? '';
    if (!groups.has(model)) groups.set(model, new Map());
    const g = groups.get(model);
    g.set(m[1], (g.get(m[1]) ?? 0) + value);
  }
  return groups;
}

// --- figures ---------------------------------------------------------------------------------------
function snapshotAgo(seconds) {
  const now = snapshots[snapshots.length - 1];
  for (let i = snapshots.length - 2; i >= 0; --i) {
    if (now.t - snapshots[i].t >= seconds) return snapshots[i];
  }
  return snapshots.length > 1 ? snapshots[0] : null;
}

function figures(model) {
  const now = snapshots[snapshots.length - 1];
  const cur = now.groups.get(model) ?? new Map();
  const get = (name, g = cur) => g?.get(name) ?? 0;
  const rate = (name, back) => {
    const then = back?.groups.get(model);
    if (!then) return null;
    return (get(name) - get(name, then)) / (now.t - back.t);
  };
  const ratio = (num, den, back) => {
    const then = back?.groups.get(model);
    if (!then) return null;
    const d = get(den) - get(den, then);
    return d > 0 ? (get(num) - get(num, then)) / d : null;
  };
  const last = snapshotAgo(1.5);
  const recent = snapshotAgo(RECENT_SECONDS);
  const meanOf = (base) => {
    const n = get(`${base}_count`);
    return n > 0 ? get(`${base}_sum`) / n : null;
  };
  const compiles = get('orchard_grammar_compiles_total');
  const drafted = get('orchard_engine_draft_tokens_total');
  return {
    tps: rate('orchard_engine_generated_tokens_total', last),
    prompt_tps: rate('orchard_engine_prompt_tokens_total', last),
    generated: get('orchard_engine_generated_tokens_total'),
    running: get('orchard_engine_requests_running'),
    queued: get('orchard_engine_requests_queued'),
    in_flight: get('orchard_http_requests_in_flight'),
    ttft_recent: ratio('orchard_time_to_first_token_seconds_sum', 'orchard_time_to_first_token_seconds_count', recent),
    ttft_mean: meanOf('orchard_time_to_first_token_seconds'),
    tpot_recent: ratio('orchard_time_per_output_token_seconds_sum', 'orchard_time_per_output_token_seconds_count', recent),
    kv_used: get('orchard_kv_pages_used'),
    kv_cached: get('orchard_kv_pages_cached'),
    kv_free: get('orchard_kv_pages_free'),
    kv_pages: get('orchard_kv_pages'),
    hit_rate: get('orchard_prefix_cache_hit_rate'),
    hit_recent: ratio('orchard_prefix_cache_hit_tokens_total', 'orchard_prefix_cache_lookup_tokens_total', recent),
    mask_per_step: ratio('orchard_mask_seconds_total', 'orchard_engine_steps_total', last),
    mask_share: ratio('orchard_mask_seconds_total', 'orchard_forward_seconds_total', recent),
    forced_share: ratio('orchard_engine_forced_tokens_total', 'orchard_engine_generated_tokens_total', recent),
    compiles,
    compile_mean: compiles > 0 ? get('orchard_grammar_compile_seconds_total') / compiles : null,
    compile_hits: get('orchard_grammar_cache_hits_total'),
    drafted,
    drafts_kept: get('orchard_engine_accepted_draft_tokens_total'),
    draft_rate: drafted > 0 ? get('orchard_engine_accepted_draft_tokens_total') / drafted : null,
    requests: get('orchard_engine_requests_total'),
    failed: get('orchard_engine_requests_failed_total'),
    cancelled: get('orchard_http_requests_cancelled_total'),
  };
}

const fmt = {
  n: (v, digits = 0) => (v === null || v === undefined ? '—' : v.toLocaleString('en-US', {maximumFractionDigits: digits, minimumFractionDigits: digits})),
  ms: (s, digits = 0) => (s === null || s === undefined ? '—' : `${(s * 1000).toFixed(digits)} ms`),
  pct: (v) => (v === null || v === undefined ? '—' : `${(v * 100).toFixed(1)}%`),
};

// [metric, title, value(figures), note(figures)]
const CARDS = [
  ['tps', 'Tokens per second', (f) => fmt.n(f.tps, 1), (f) => `prompt: ${fmt.n(f.prompt_tps, 0)} tokens/s`],
  ['generated', 'Tokens generated', (f) => fmt.n(f.generated), (f) => `forced by grammars: ${fmt.pct(f.forced_share)} (last minute)`],
  ['running', 'Requests running', (f) => fmt.n(f.running), (f) => `HTTP in flight: ${fmt.n(f.in_flight)}`],
  ['queued', 'Requests queued', (f) => fmt.n(f.queued), (f) => `total ${fmt.n(f.requests)}, failed ${fmt.n(f.failed)}, cancelled ${fmt.n(f.cancelled)}`],
  ['ttft', 'Time to first token', (f) => fmt.ms(f.ttft_recent ?? f.ttft_mean), (f) => (f.ttft_recent !== null ? 'mean, last minute' : `mean since start; per token after: ${fmt.ms(f.tpot_recent, 1)}`)],
  ['kv', 'KV pages used', (f) => `${fmt.n(f.kv_used)} / ${fmt.n(f.kv_pages)}`, (f) => `cached ${fmt.n(f.kv_cached)}, free ${fmt.n(f.kv_free)}`],
  ['kv-cached', 'KV pages cached', (f) => fmt.n(f.kv_cached), () => 'kept by the prefix cache'],
  ['hit-rate', 'Prefix-cache hit rate', (f) => fmt.pct(f.hit_rate), (f) => `last minute: ${fmt.pct(f.hit_recent)}`],
  ['mask', 'Mask time per step', (f) => fmt.ms(f.mask_per_step, 2), (f) => `vs forward pass: ${fmt.pct(f.mask_share)} (last minute)`],
  ['compile', 'Grammar compiles', (f) => fmt.n(f.compiles), (f) => `mean ${fmt.ms(f.compile_mean, 1)}; cache hits ${fmt.n(f.compile_hits)}`],
  ['drafts', 'Speculative drafts kept', (f) => fmt.pct(f.draft_rate), (f) => `${fmt.n(f.drafts_kept)} of ${fmt.n(f.drafted)} drafted tokens`],
];

// [key, caption, series: [label, value(figures), colour]]
const CHARTS = [
  ['throughput', 'Tokens per second', [['generated', (f) => f.tps, '#0b5cad'], ['prompt', (f) => f.prompt_tps, '#8a5a00']]],
  ['requests', 'Requests', [['running', (f) => f.running, '#116329'], ['queued', (f) => f.queued, '#a40e26']]],
  ['kv', 'KV pages', [['used', (f) => f.kv_used, '#0b5cad'], ['cached', (f) => f.kv_cached, '#6f42c1'], ['free', (f) => f.kv_free, '#6e7781']]],
  ['latency', 'Latency (ms)', [['time to first token', (f) => (f.ttft_recent === null ? null : f.ttft_recent * 1000), '#a40e26'],
    ['mask per step', (f) => (f.mask_per_step === null ? null : f.mask_per_step * 1000), '#116329']]],
];

function groupSection(model, index) {
  const id = `dash-group-${index}`;
  let section = $(id);
  if (section) return section;
  section = document.createElement('section');
  section.id = id;
  section.className = 'dash-group';
  section.dataset.model = model;
  const h = document.createElement('h3');
  h.className = 'dash-model';
  section.append(h);
  const cards = document.createElement('div');
  cards.className = 'cards';
  for (const [metric, title] of CARDS) {
    const card = document.createElement('div');
    card.className = 'card';
    card.dataset.metric = metric;
    const t = document.createElement('h4');
    t.textContent = title;
    const big = document.createElement('p');
    big.className = 'big';
    const sub = document.createElement('p');
    sub.className = 'sub';
    card.append(t, big, sub);
    cards.append(card);
  }
  section.append(cards);
  if (features.charts) {
    const box = document.createElement('div');
    box.className = 'charts';
    const made = {};
    for (const [key, caption, series] of CHARTS) {
      const fig = document.createElement('figure');
      const cap = document.createElement('figcaption');
      cap.textContent = caption;
      const holder = document.createElement('div');
      holder.className = 'chart-box';
      const canvas = document.createElement('canvas');
      canvas.setAttribute('role', 'img');
      canvas.setAttribute('aria-label', `${caption} over the last two minutes (the numbers above are the latest)`);
      holder.append(canvas);
      fig.append(cap, holder);
      box.append(fig);
      made[key] = new Chart(canvas, {
        type: 'line',
        data: {datasets: series.map(([label, , colour]) => ({label, data: [], borderColor: colour, backgroundColor: colour,
          pointRadius: 0, borderWidth: 2, spanGaps: true}))},
        options: {
          animation: false, maintainAspectRatio: false, parsing: false,
          scales: {x: {type: 'linear', title: {display: true, text: 'seconds'}, ticks: {maxTicksLimit: 6}},
            y: {beginAtZero: true}},
          plugins: {legend: {display: series.length > 1, labels: {boxWidth: 12}}},
        },
      });
    }
    charts.set(model, made);
    section.append(box);
  }
  $('dash-models').append(section);
  return section;
}

function render() {
  const now = snapshots[snapshots.length - 1];
  const names = [...now.groups.keys()];
  names.forEach((model, i) => {
    const section = groupSection(model, i);
    section.querySelector('.dash-model').textContent = model || `Model: ${models.join(', ') || '(the one served)'}`;
    const f = figures(model);
    for (const [metric, , value, note] of CARDS) {
      const card = section.querySelector(`[data-metric="${metric}"]`);
      card.querySelector('.big').textContent = value(f);
      card.querySelector('.sub').textContent = note(f);
    }
    const made = charts.get(model);
    if (made) {
      const x = Math.round((now.t - start) * 10) / 10;
      for (const [key, , series] of CHARTS) {
        const chart = made[key];
        series.forEach(([, value], s) => {
          const data = chart.data.datasets[s].data;
          data.push({x, y: value(f)});
          if (data.length > CHART_POINTS) data.shift();
        });
        chart.update('none');
      }
    }
  });
  $('dash-title').textContent = names.length > 1 ? `${names.length} models` : 'Server';
  const raw = $('dash-raw');
  raw.replaceChildren();
  for (const [model, g] of now.groups) {
    for (const [name, value] of g) {
      const tr = document.createElement('tr');
      const a = document.createElement('td');
      a.textContent = model ? `${name}{model="${model}"}` : name;
      const b = document.createElement('td');
      b.className = 'num';
      b.textContent = String(value);
      tr.append(a, b);
      raw.append(tr);
    }
  }
  $('dash-updated').textContent = `Updated ${new Date().toLocaleTimeString()}`;
}

let polling = false;
async function poll() {
  clearTimeout(timer);
  timer = null;
  if (polling) return;
  polling = true;
  try {
    const text = await getText('/metrics');
    snapshots.push({t: performance.now() / 1000, groups: parseMetrics(text)});
    while (snapshots.length > 2 && snapshots[snapshots.length - 1].t - snapshots[0].t > HISTORY_SECONDS) snapshots.shift();
    $('dash-error').hidden = true;
    render();
  } catch (err) {
    // Says so, and tries again: the numbers come back with the server.
    $('dash-error').textContent = `Metrics unavailable: ${describeError(err)} Trying again every second.`;
    $('dash-error').hidden = false;
  } finally {
    polling = false;
  }
  schedule();
}

function schedule() {
  clearTimeout(timer);
  timer = null;
  if (visible && $('dash-live').checked && document.visibilityState === 'visible') timer = setTimeout(poll, 1000);
}

export function setDashboardVisible(shown) {
  visible = shown;
  if (shown && !timer) {
    poll();
  } else if (!shown) {
    clearTimeout(timer);
    timer = null;
  }
}

export function setDashboardModels(names) {
  models = names;
}

export function initDashboard() {
  $('dash-live').addEventListener('change', () => ($('dash-live').checked ? poll() : schedule()));
  document.addEventListener('visibilitychange', () => visible && document.visibilityState === 'visible' && !timer && poll());
}
