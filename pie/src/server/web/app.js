// The page: three tabs (chat, playground, dashboard), the API key, the model picker, the notice line.
import {apiKey, getJson, keyRemembered, setApiKey} from './api.js';
import {initChat} from './chat.js';
import {initDashboard, setDashboardModels, setDashboardVisible} from './dashboard.js';
import {missingFeatures} from './markdown.js';
import {initPlayground, refreshPlayground} from './playground.js';
import {$, clearNotice, reportError, setKeyFormOpener} from './ui.js';

const TABS = ['chat', 'playground', 'dashboard'];

function selectTab(name, focus = false) {
  if (!TABS.includes(name)) name = 'chat';
  for (const t of TABS) {
    const tab = $(`tab-${t}`);
    const selected = t === name;
    tab.setAttribute('aria-selected', String(selected));
    tab.tabIndex = selected ? 0 : -1;
    $(`panel-${t}`).hidden = !selected;
  }
  if (focus) $(`tab-${name}`).focus();
  if (location.hash !== `#${name}`) history.replaceState(null, '', `#${name}`);
  setDashboardVisible(name === 'dashboard');
}

function initTabs() {
  for (const t of TABS) $(`tab-${t}`).addEventListener('click', () => selectTab(t));
  // Arrow keys, Home and End move between tabs (WAI-ARIA tabs pattern, automatic activation).
  $('tabs').addEventListener('keydown', (e) => {
    const current = TABS.findIndex((t) => $(`tab-${t}`).getAttribute('aria-selected') === 'true');
    const next = {ArrowRight: current + 1, ArrowLeft: current - 1, Home: 0, End: TABS.length - 1}[e.key];
    if (next === undefined) return;
    e.preventDefault();
    selectTab(TABS[(next + TABS.length) % TABS.length], true);
  });
  window.addEventListener('hashchange', () => selectTab(location.hash.slice(1)));
  selectTab(location.hash.slice(1));
}

function openKeyForm() {
  const form = $('key-form');
  form.hidden = false;
  $('key-button').setAttribute('aria-expanded', 'true');
  $('key-input').value = apiKey();
  $('key-remember').checked = keyRemembered();
  $('key-input').focus();
}

function closeKeyForm() {
  $('key-form').hidden = true;
  $('key-button').setAttribute('aria-expanded', 'false');
}

function showKeyState() {
  $('key-button').textContent = apiKey() ? 'API key: set' : 'API key';
}

function initKey() {
  setKeyFormOpener(openKeyForm);
  $('key-button').addEventListener('click', () => ($('key-form').hidden ? openKeyForm() : closeKeyForm()));
  $('key-form').addEventListener('submit', (e) => {
    e.preventDefault();
    setApiKey($('key-input').value.trim(), $('key-remember').checked);
    showKeyState();
    closeKeyForm();
    clearNotice();
    loadModels();
  });
  $('key-forget').addEventListener('click', () => {
    setApiKey('', false);
    $('key-input').value = '';
    showKeyState();
  });
  showKeyState();
}

// Every name the server answers to (the served name, then its aliases), from GET /v1/models.
async function loadModels() {
  const select = $('model');
  const previous = select.value || localStorage.getItem('orchard.model') || '';
  try {
    const list = await getJson('/v1/models');
    const names = list.data.map((m) => m.id);
    select.replaceChildren(...names.map((n) => new Option(n, n)));
    if (names.includes(previous)) select.value = previous;
    setDashboardModels(names);
    clearNotice();
    refreshPlayground();
  } catch (err) {
    select.replaceChildren(new Option('(unavailable)', ''));
    reportError(err);
  }
}

function init() {
  $('notice-close').addEventListener('click', clearNotice);
  $('model').addEventListener('change', () => {
    localStorage.setItem('orchard.model', $('model').value);
    refreshPlayground();
  });
  const missing = missingFeatures();
  $('missing').textContent = missing.length ? `This server was built without some libraries: ${missing.join('; ')}.` : '';
  initKey();
  initChat();
  initPlayground();
  initDashboard();
  initTabs();
  loadModels();
  document.documentElement.dataset.ready = 'true';  // for tests: the modules ran
}

init();
