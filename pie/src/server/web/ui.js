// What every panel shares: the notice line, errors in words, the API key form, the model picker.
import {ApiError} from './api.js';

export const $ = (id) => document.getElementById(id);

export function showNotice(text) {
  $('notice-text').textContent = text;
  $('notice').hidden = false;
}

export function clearNotice() {
  $('notice').hidden = true;
  $('notice-text').textContent = '';
}

// One sentence a person can act on.
export function describeError(err) {
  if (err instanceof ApiError) {
    if (err.kind === 'auth') {
      return `The server refused the request: ${err.message}. Enter the server's API key (its --api-key).`;
    }
    if (err.kind === 'network') return `${capitalize(err.message)}. Is orchard serve still running?`;
    return capitalize(err.message);
  }
  return `Unexpected error: ${err?.message ?? err}`;
}

function capitalize(s) {
  return s ? s[0].toUpperCase() + s.slice(1) : s;
}

let onKeyFormOpen = () => {};
export function setKeyFormOpener(open) {
  onKeyFormOpen = open;
}

// An error that only the API key can fix opens its form.
export function reportError(err, {notice = true} = {}) {
  const text = describeError(err);
  if (notice) showNotice(text);
  if (err instanceof ApiError && err.kind === 'auth') onKeyFormOpen();
  return text;
}

export function selectedModel() {
  return $('model').value || 'default';
}

// Numbers of the settings fields: undefined when empty (the server's default applies).
export function numberField(id) {
  const raw = $(id).value.trim();
  if (raw === '') return undefined;
  const n = Number(raw);
  return Number.isFinite(n) ? n : raw;  // the server says what is wrong with a non-number
}
