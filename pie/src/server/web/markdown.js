// Markdown for model answers: marked renders, DOMPurify sanitizes (model output is untrusted), highlight.js
// colours code blocks. Each library is optional: the server embeds those its build machine had, and the
// page falls back to plain text (no Markdown without a sanitizer) or unhighlighted code.
/* global marked, DOMPurify, hljs */
export const features = {
  markdown: typeof marked !== 'undefined' && typeof DOMPurify !== 'undefined',
  highlight: typeof hljs !== 'undefined',
  charts: typeof Chart !== 'undefined',  // eslint-disable-line no-undef
};

// What the page does without, one sentence each (the footer says it).
export function missingFeatures() {
  const out = [];
  if (!features.markdown) out.push('answers are plain text (libjs-marked or node-dompurify was absent at build time)');
  if (!features.highlight) out.push('code is not highlighted (libjs-highlight.js was absent at build time)');
  if (!features.charts) out.push('the dashboard has no charts (libjs-chart.js was absent at build time)');
  return out;
}

function highlight(block) {
  if (hljs.highlightElement) hljs.highlightElement(block);
  else hljs.highlightBlock(block);  // highlight.js 9 and 10
}

// Renders `text` into `element`; code is highlighted when `withHighlight` (skipped for every frame of a
// stream but the last ones, which keeps long answers cheap).
export function renderMarkdown(element, text, withHighlight = true) {
  if (!features.markdown) {
    element.classList.add('plain');
    element.textContent = text;
    return;
  }
  try {
    const html = marked.parse(text, {gfm: true, breaks: false, headerIds: false, mangle: false});
    // No ids or names: an answer's heading must not shadow the page's own elements.
    element.innerHTML = DOMPurify.sanitize(html, {USE_PROFILES: {html: true}, FORBID_ATTR: ['id', 'name', 'style']});
  } catch (err) {
    // A library that fails never costs the answer: plain text then.
    element.classList.add('plain');
    element.textContent = text;
    return;
  }
  element.classList.remove('plain');
  for (const a of element.querySelectorAll('a[href]')) {
    a.target = '_blank';
    a.rel = 'noopener noreferrer';
  }
  if (features.highlight && withHighlight) {
    for (const block of element.querySelectorAll('pre code')) highlight(block);
  }
}
