#!/usr/bin/env python3
"""The web page of `orchard serve` in headless Chromium, against a live server over the real default model
(SmolLM2-135M-Instruct from the model store), started with an API key:

- the page loads (cold and revalidated: the time to its load event and the bytes it moved are measured
  and written to measurements.json, never asserted);
- a wrong API key: the page says so and stays usable; the right one lists the models;
- chat: an answer streams in (seen growing), renders Markdown with highlighted code, can be stopped (the
  server counts the request cancelled), regenerated, and the conversation survives a reload; reasoning is
  shown folded (from a canned stream: SmolLM2 does not reason);
- playground: a JSON Schema's output is shown valid with its forced and sampled tokens marked and the
  mask's counts; a GBNF error is shown at the line and column the server reports; a tool call is parsed
  and its arguments checked;
- dashboard: its numbers move while requests run;
- accessibility: every control has a label, the tabs follow the keyboard, text contrast is at least 4.5:1
  (3:1 for large text);
- screenshots of each tab at desktop (1280 x 900) and phone (390 x 844) widths, no sideways scrolling on
  the phone;
- the server goes away mid-answer: the page says so, and answers again once a server is back.

Run by CTest: test_web_ui.py --orchard build/pie/orchard --artifacts build/web-ui-artifacts [--model M].
Exit 0 pass, 1 fail, 77 skipped with a one-line reason (selenium, chromium, chromium-driver or the model
absent).
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time

from live_server import STORE_NAME, LiveServer, default_model_stored, expect, run_tests, store_dir

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
except ImportError:
    print("SKIP: selenium is not installed (pip install -r scripts/requirements-test.txt)")
    sys.exit(77)

KEY = "web-ui-test-key"
DESKTOP = (1280, 900)
PHONE = (390, 844)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server(LiveServer):
    """`orchard serve` on a fixed port (so that a second one can take over the page's address)."""

    def __init__(self, binary, model, port, log):
        super().__init__(binary, "--port", str(port), "--api-key", KEY, "--ctx", "2048", "--parallel", "4",
                         "--threads", "2", *(["-m", model] if model else []), log=log, key=KEY)

    def http(self, method, path, body=None, timeout=120):
        status, _, text = self.request(method, path, body, key=KEY, timeout=timeout)
        return status, text


class Page:
    def __init__(self, driver, base):
        self.d = driver
        self.base = base

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def wait(self, predicate, what, timeout=30.0, step=0.05):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(step)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")

    def el(self, id_):
        return self.d.find_element(By.ID, id_)

    def text(self, id_):
        return self.js("const e = document.getElementById(arguments[0]); return e ? e.textContent : null", id_)

    def shown(self, id_):
        return self.js("const e = document.getElementById(arguments[0]); return !!e && !e.hidden && "
                       "e.getClientRects().length > 0", id_)

    def set_value(self, id_, value, event="change"):
        self.js("const e = document.getElementById(arguments[0]); e.value = arguments[1];"
                "e.dispatchEvent(new Event(arguments[2], {bubbles: true}))", id_, value, event)

    def tab(self, name):
        self.el(f"tab-{name}").click()
        self.wait(lambda: self.js(f"return !document.getElementById('panel-{name}').hidden"), f"the {name} tab")

    def last_assistant(self):
        return self.js("""
            const all = document.querySelectorAll('#chat-log .msg-assistant');
            const m = all[all.length - 1];
            if (!m) return null;
            const q = (s) => m.querySelector(s);
            return {content: q('.msg-content').textContent, busy: m.getAttribute('aria-busy') === 'true',
                    meta: q('.msg-meta').hidden ? '' : q('.msg-meta').textContent,
                    error: q('.msg-error').hidden ? '' : q('.msg-error').textContent, count: all.length};""")

    def load(self, hash_=""):
        self.d.get(self.base + hash_)
        self.wait(lambda: self.js("return document.documentElement.dataset.ready === 'true'"), "the page's modules")


class Context:
    def __init__(self, args, artifacts):
        self.args = args
        self.artifacts = artifacts
        self.port = free_port()
        self.server_log = open(os.path.join(artifacts, "server.log"), "w")
        self.server = Server(args.orchard, args.model, self.port, self.server_log)
        self.measurements = {}
        opts = webdriver.ChromeOptions()
        opts.binary_location = args.chromium
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--disable-extensions", f"--window-size={DESKTOP[0]},{DESKTOP[1]}"):
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(args.chromedriver), options=opts)
        self.page = Page(self.driver, f"http://127.0.0.1:{self.port}/")

    def close(self):
        try:
            with open(os.path.join(self.artifacts, "browser.log"), "w") as f:
                for entry in self.driver.get_log("browser"):
                    f.write(json.dumps(entry) + "\n")
        except Exception:  # noqa: BLE001 - the log is a courtesy
            pass
        self.driver.quit()
        self.server.stop()
        self.server_log.close()
        with open(os.path.join(self.artifacts, "measurements.json"), "w") as f:
            json.dump(self.measurements, f, indent=2)


# --- the page loads ------------------------------------------------------------------------------------
def navigation_timing(p):
    return p.js("""
        const n = performance.getEntriesByType('navigation')[0];
        const res = performance.getEntriesByType('resource');
        return {load_ms: n.loadEventEnd - n.startTime, dom_ready_ms: n.domContentLoadedEventEnd - n.startTime,
                transferred_bytes: n.transferSize + res.reduce((s, r) => s + r.transferSize, 0),
                decoded_bytes: n.decodedBodySize + res.reduce((s, r) => s + r.decodedBodySize, 0),
                requests: 1 + res.length};""")


def test_page_loads(ctx):
    p = ctx.page
    p.load()
    p.wait(lambda: p.js("return performance.getEntriesByType('navigation')[0].loadEventEnd > 0"), "the load event")
    cold = navigation_timing(p)
    p.load()
    p.wait(lambda: p.js("return performance.getEntriesByType('navigation')[0].loadEventEnd > 0"), "the load event")
    warm = navigation_timing(p)
    ctx.measurements["page_load_cold"] = cold
    ctx.measurements["page_load_revalidated"] = warm
    print(f"  page load: cold {cold['load_ms']:.0f} ms ({cold['transferred_bytes']} bytes over the wire, "
          f"{cold['decoded_bytes']} decoded, {cold['requests']} requests); revalidated {warm['load_ms']:.0f} ms")
    libs = p.js("return [typeof marked, typeof DOMPurify, typeof hljs, typeof Chart]")
    expect(libs == ["object", "function", "object", "function"], f"libraries loaded: {libs}")
    expect(p.text("missing") == "", f"the footer says something is missing: {p.text('missing')!r}")
    # The embedded sanitizer works (Debian 12's DOMPurify needed mending at build time).
    clean = p.js("return DOMPurify.sanitize('<img src=x onerror=alert(1)><b>ok</b><script>alert(2)</script>')")
    expect("onerror" not in clean and "<script" not in clean and "<b>ok</b>" in clean, f"sanitized: {clean!r}")


def test_wrong_api_key(ctx):
    p = ctx.page
    # No key yet: the page says what the server answered and opens the key form.
    p.wait(lambda: p.shown("notice") and "API key" in p.text("notice-text"), "the missing-key notice")
    expect("missing API key" in p.text("notice-text"), p.text("notice-text"))
    expect(p.shown("key-form"), "the key form is open")
    key = p.el("key-input")
    key.clear()
    key.send_keys("not-the-key", Keys.ENTER)
    p.wait(lambda: p.shown("notice") and "incorrect API key" in p.text("notice-text"), "the wrong-key notice")
    p.wait(lambda: p.shown("key-form"), "the key form, again")
    key = p.el("key-input")
    key.clear()
    key.send_keys(KEY, Keys.ENTER)
    p.wait(lambda: ctx.server.model in p.js("return [...document.getElementById('model').options].map(o => o.value)"),
           "the model list")
    p.wait(lambda: not p.shown("notice"), "the notice to go")
    expect(p.text("key-button") == "API key: set", p.text("key-button"))


# --- chat ----------------------------------------------------------------------------------------------
def watch_answer(p):
    """Records the last answer's length at each change (a MutationObserver), to see it stream."""
    p.js("""
        window.__lengths = [];
        const log = document.getElementById('chat-log');
        new MutationObserver(() => {
          const all = log.querySelectorAll('.msg-assistant');
          const m = all[all.length - 1];
          if (m && m.getAttribute('aria-busy') === 'true') window.__lengths.push(m.querySelector('.msg-content').textContent.length);
        }).observe(log, {subtree: true, childList: true, characterData: true, attributes: true});""")


def send_chat(p, text):
    box = p.el("chat-input")
    box.clear()
    box.send_keys(text, Keys.ENTER)


def test_chat_streams_renders_and_stops(ctx):
    p = ctx.page
    p.tab("chat")
    p.el("chat-clear").click()
    p.set_value("chat-temperature", "0")
    p.set_value("chat-max-tokens", "120")
    watch_answer(p)
    send_chat(p, "Write a Python function that adds two numbers.")
    answer = p.wait(lambda: (a := p.last_assistant()) and not a["busy"] and a["meta"] and a, "the answer", 90)
    lengths = [n for n in p.js("return window.__lengths") if n > 1]
    expect(len(set(lengths)) >= 2, f"the answer did not stream in (lengths seen while busy: {lengths})")
    expect(not answer["error"], answer["error"])
    expect("tokens/s" in answer["meta"], answer["meta"])
    code = p.js("const c = document.querySelector('#chat-log .msg-assistant:last-child pre code');"
                "return c ? c.className : null")
    expect(code is not None and "hljs" in code, f"no highlighted code block in {answer['content'][:200]!r}")

    # Stop: the request is cancelled on the server too.
    cancelled = ctx.server.metric("orchard_http_requests_cancelled_total")
    p.set_value("chat-max-tokens", "400")
    send_chat(p, "Write a long story about a dragon who learns to fly.")
    p.wait(lambda: len(p.last_assistant()["content"]) > 20, "the story to start", 60)
    expect(p.shown("chat-stop"), "Stop is offered while answering")
    p.el("chat-stop").click()
    stopped = p.wait(lambda: (a := p.last_assistant()) and not a["busy"] and a, "the stop")
    expect(stopped["meta"] == "Stopped.", f"meta {stopped['meta']!r}")
    expect(p.shown("chat-send") and not p.shown("chat-stop"), "Send is back")
    p.wait(lambda: ctx.server.metric("orchard_http_requests_cancelled_total") > cancelled,
           "the server to count the request cancelled", 10, 0.2)
    p.wait(lambda: ctx.server.metric("orchard_engine_requests_running") == 0, "the engine to free it", 10, 0.2)

    # Regenerate the stopped answer (short this time).
    p.set_value("chat-max-tokens", "16")
    count = p.last_assistant()["count"]
    p.el("chat-regenerate").click()
    again = p.wait(lambda: (a := p.last_assistant()) and not a["busy"] and a["meta"] and a, "the regenerated answer", 60)
    expect(again["count"] == count and again["content"] and again["meta"] != "Stopped.", f"{again}")

    # The conversation is kept in the browser.
    n_messages = p.js("return document.querySelectorAll('#chat-log .msg').length")
    p.load("#chat")
    expect(p.js("return document.querySelectorAll('#chat-log .msg').length") == n_messages, "the conversation after a reload")


def test_chat_reasoning_folded(ctx):
    """SmolLM2 does not reason: the page is handed a canned stream with reasoning_content (the server's
    reasoning split has its own tests) and must show it folded, apart from the answer."""
    p = ctx.page
    p.tab("chat")
    p.js("""
        const realFetch = window.fetch;
        window.fetch = async (url, options) => {
          if (!String(url).endsWith('/v1/chat/completions')) return realFetch(url, options);
          window.fetch = realFetch;
          const deltas = [{role: 'assistant', content: ''}, {reasoning_content: 'First, think.'},
                          {reasoning_content: ' Then answer.'}, {content: 'It is **42**.'}];
          const body = deltas.map((d) => `data: ${JSON.stringify({choices: [{index: 0, delta: d}]})}\n\n`).join('') +
            `data: ${JSON.stringify({choices: [{index: 0, delta: {}, finish_reason: 'stop'}]})}\n\ndata: [DONE]\n\n`;
          return new Response(body, {status: 200, headers: {'Content-Type': 'text/event-stream'}});
        };""")
    send_chat(p, "What is six times seven?")
    p.wait(lambda: (a := p.last_assistant()) and not a["busy"] and a, "the canned answer")
    shown = p.js("""
        const all = document.querySelectorAll('#chat-log .msg-assistant');
        const m = all[all.length - 1];
        const r = m.querySelector('details.reasoning');
        return {hidden: r.hidden, open: r.open, summary: r.querySelector('summary').textContent,
                reasoning: r.querySelector('div').textContent, strong: m.querySelector('.msg-content strong')?.textContent,
                content: m.querySelector('.msg-content').textContent};""")
    expect(not shown["hidden"] and not shown["open"], f"reasoning not folded: {shown}")
    expect(shown["reasoning"] == "First, think. Then answer." and "Reasoning" in shown["summary"], f"{shown}")
    expect(shown["strong"] == "42" and "think" not in shown["content"], f"answer: {shown}")


# --- playground --------------------------------------------------------------------------------------
def choose_kind(p, kind):
    p.el("panel-playground").find_element(By.CSS_SELECTOR, f"input[name=pg-kind][value={kind}]").click()


def generate(p, timeout=90):
    done = p.js("return Number(document.getElementById('pg-tokens').dataset.generations ?? 0)")
    p.el("pg-generate").click()
    p.wait(lambda: p.js("return Number(document.getElementById('pg-tokens').dataset.generations ?? 0)") > done,
           "the generation", timeout)
    return p.js("const v = document.getElementById('pg-validity'); return {ok: v.classList.contains('ok'), text: v.textContent}")


def test_playground_schema_output_valid(ctx):
    p = ctx.page
    p.tab("playground")
    choose_kind(p, "json_schema")
    p.set_value("pg-example", "0")  # the contact record
    p.set_value("pg-temperature", "0")
    p.set_value("pg-max-tokens", "200")
    p.wait(lambda: p.shown("pg-compile-ok"), "the schema to compile")
    validity = generate(p)
    expect(validity["ok"] and validity["text"].startswith("Valid"), f"validity: {validity}")
    tokens = p.js("""
        const spans = [...document.querySelectorAll('#pg-tokens .tok')];
        return {forced: spans.filter(s => s.dataset.how === 'forced').length,
                sampled: spans.filter(s => s.dataset.how === 'sampled').length,
                counted: spans.filter(s => s.dataset.how === 'sampled' && /^\\d+$/.test(s.querySelector('sup')?.textContent ?? '')).length,
                rows: document.querySelectorAll('#pg-table tr').length, n: spans.length};""")
    expect(tokens["forced"] > 0, f"no forced token marked: {tokens}")
    expect(tokens["sampled"] > 0 and tokens["counted"] == tokens["sampled"], f"sampled tokens without counts: {tokens}")
    expect(tokens["rows"] == tokens["n"], f"table rows {tokens}")
    record = json.loads(p.text("pg-json"))
    expect(set(record) == {"name", "age", "job_title", "company", "city", "email"}, f"record {record}")
    expect("forced by the grammar" in p.text("pg-summary"), p.text("pg-summary"))


def test_playground_compile_error_position(ctx):
    p = ctx.page
    p.tab("playground")
    choose_kind(p, "grammar")
    bad = 'root ::= answer ", because " reason\nanswer ::= "yes" | "no"\nreason ::= ( [a-z ]+ | "none" ]\n'
    p.set_value("pg-source", bad, "input")
    p.wait(lambda: p.shown("pg-compile-error"), "the compile error", 15)
    status, text = ctx.server.http("POST", "/v1/grammar/compile", {"grammar": bad})
    expect(status == 400, text)
    loc = json.loads(text)["error"]["location"]
    shown = p.js("const e = document.querySelector('#pg-compile .error-at'); return e && {label: e.getAttribute('aria-label'), text: e.textContent}")
    expect(shown and shown["label"] == f"line {loc['line']}, column {loc['column']}", f"shown {shown}, server {loc}")
    # The caret sits under the column the server named.
    source_line, caret_line = shown["text"].split("\n")[:2]
    gutter = f"{loc['line']} | "
    expect(source_line == gutter + bad.split("\n")[loc["line"] - 1], source_line)
    expect(caret_line.index("^") == len(gutter) + loc["column"] - 1, f"caret at {caret_line.index('^')}: {shown['text']!r}")
    expect(f"line {loc['line']}" in p.text("pg-compile-error"), p.text("pg-compile-error"))
    # "Go to" selects the place in the editor.
    p.el("pg-compile").find_element(By.TAG_NAME, "button").click()
    lines = bad.split("\n")
    offset = sum(len(line) + 1 for line in lines[:loc["line"] - 1]) + loc["column"] - 1
    expect(p.js("return document.getElementById('pg-source').selectionStart") == offset, "the editor's selection")
    # Generating says why not, and the page goes on.
    validity = generate(p)
    expect(not validity["ok"] and "does not compile" in validity["text"], f"{validity}")
    p.set_value("pg-source", bad.replace('"none" ]', '"none" )'), "input")
    p.wait(lambda: p.shown("pg-compile-ok"), "the mended grammar to compile", 15)


def test_playground_tool_call(ctx):
    p = ctx.page
    p.tab("playground")
    choose_kind(p, "tools")
    p.set_value("pg-example", "0")
    p.wait(lambda: "required" in p.js("return [...document.getElementById('pg-tool-choice').options].map(o => o.value)"),
           "the tool choices")
    p.set_value("pg-tool-choice", "required")
    validity = generate(p)
    expect(validity["ok"], f"validity: {validity}")
    calls = p.text("pg-calls")
    expect(re.search(r"Call 1: get_(weather|time)", calls) and "Arguments valid" in calls, calls)
    expect(p.js("return document.querySelectorAll('#pg-tokens .tok-forced').length") > 0, "forced tokens in the call")


# --- dashboard -----------------------------------------------------------------------------------------
def card(p, metric):
    return p.js(f"const c = document.querySelector('[data-metric=\"{metric}\"] .big'); return c ? c.textContent : null")


def number(text):
    try:
        return float(text.replace(",", "").split()[0])
    except (ValueError, AttributeError, IndexError):
        return None


def test_dashboard_moves(ctx):
    p = ctx.page
    p.tab("dashboard")
    p.wait(lambda: number(card(p, "generated")) is not None, "the dashboard's first reading", 15)
    before = number(card(p, "generated"))

    def load():
        ctx.server.http("POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Write a long story about the sea."}], "max_tokens": 160,
            "temperature": 0.8, "stream": True})

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    seen = {"tps": 0.0, "running": 0.0, "generated": before}
    deadline = time.time() + 40
    while time.time() < deadline:
        for metric in seen:
            v = number(card(p, metric))
            if v is not None:
                seen[metric] = max(seen[metric], v)
        if seen["tps"] > 0 and seen["running"] >= 1 and seen["generated"] > before:
            break
        time.sleep(0.2)
    for t in threads:
        t.join()
    expect(seen["generated"] > before, f"tokens generated did not move: {before} -> {seen}")
    expect(seen["tps"] > 0, f"tokens per second never above 0: {seen}")
    expect(seen["running"] >= 1, f"no request seen running: {seen}")
    expect(p.js("return document.querySelectorAll('#dash-models canvas').length") == 4, "the four charts")
    ctx.measurements["dashboard_seen"] = seen


# --- accessibility and screenshots -------------------------------------------------------------------
A11Y = """
function lum(c) {
  const [r, g, b] = c.map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}
function rgba(s) { const m = s.match(/[\\d.]+/g).map(Number); return m.length === 3 ? [...m, 1] : m; }
function background(el) {
  for (let e = el; e; e = e.parentElement) {
    const c = rgba(getComputedStyle(e).backgroundColor);
    if (c[3] > 0.5) return c;
  }
  return [255, 255, 255, 1];
}
const unlabelled = [...document.querySelectorAll('input, select, textarea')]
  .filter((c) => c.type !== 'hidden' && !c.labels?.length && !c.getAttribute('aria-label') && !c.getAttribute('aria-labelledby'))
  .map((c) => c.id || c.outerHTML.slice(0, 60));
const nameless = [...document.querySelectorAll('button')].filter((b) => !b.textContent.trim() && !b.getAttribute('aria-label'))
  .map((b) => b.id || b.outerHTML.slice(0, 60));
const low = [];
for (const el of document.querySelectorAll('body *')) {
  if (!el.getClientRects().length || el.closest('[hidden]') || el.closest('[aria-hidden=true]')) continue;
  if (![...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
  const style = getComputedStyle(el);
  if (style.visibility === 'hidden' || Number(style.opacity) === 0 || el.closest('.visually-hidden')) continue;
  const fg = rgba(style.color), bg = background(el);
  const l1 = lum(fg.slice(0, 3)), l2 = lum(bg.slice(0, 3));
  const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
  const size = parseFloat(style.fontSize), bold = Number(style.fontWeight) >= 700;
  const need = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
  if (ratio < need) low.push(`${el.tagName.toLowerCase()}.${el.className}: ${ratio.toFixed(2)} "${el.textContent.trim().slice(0, 30)}"`);
}
return {unlabelled, nameless, low};
"""


def test_accessibility(ctx):
    p = ctx.page
    for tab in ("chat", "playground", "dashboard"):
        p.tab(tab)
        r = p.js(A11Y)
        expect(not r["unlabelled"], f"{tab}: controls without a label: {r['unlabelled']}")
        expect(not r["nameless"], f"{tab}: buttons without a name: {r['nameless']}")
        expect(not r["low"], f"{tab}: text below the contrast minimum: {r['low'][:8]}")
    # The tabs follow the keyboard (WAI-ARIA tabs: arrows, Home, End).
    p.tab("chat")
    p.el("tab-chat").send_keys(Keys.ARROW_RIGHT)
    expect(p.js("return document.activeElement.id") == "tab-playground" and p.shown("panel-playground"), "ArrowRight")
    p.el("tab-playground").send_keys(Keys.END)
    expect(p.js("return document.activeElement.id") == "tab-dashboard" and p.shown("panel-dashboard"), "End")
    p.el("tab-dashboard").send_keys(Keys.HOME)
    expect(p.js("return document.activeElement.id") == "tab-chat" and p.shown("panel-chat"), "Home")


def test_screenshots(ctx):
    p = ctx.page
    for label, (width, height), mobile in (("desktop", DESKTOP, False), ("phone", PHONE, True)):
        ctx.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
        for tab in ("chat", "playground", "dashboard"):
            p.tab(tab)
            time.sleep(0.3)  # a chart's resize, a scroll
            if mobile:
                # Against the device's width: a mobile layout viewport widens to content that overflows.
                overflow = p.js("return document.documentElement.scrollWidth") - width
                wide = p.js("return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right"
                            " > arguments[0] + 1).slice(0, 6).map(e => `${e.tagName.toLowerCase()}.${e.className}#${e.id}`)",
                            width)
                expect(overflow <= 1, f"{tab}: the phone-width page scrolls sideways by {overflow} px: {wide}")
            path = os.path.join(ctx.artifacts, f"{tab}-{label}.png")
            expect(ctx.driver.save_screenshot(path), f"cannot write {path}")
    ctx.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


# --- the server goes away ------------------------------------------------------------------------------
def test_server_goes_away_mid_answer(ctx):
    p = ctx.page
    p.tab("chat")
    p.set_value("chat-max-tokens", "400")
    send_chat(p, "Write a long story about a lighthouse keeper.")
    p.wait(lambda: len(p.last_assistant()["content"]) > 20, "the story to start", 60)
    ctx.server.stop(signal.SIGKILL)
    failed = p.wait(lambda: (a := p.last_assistant()) and a["error"] and a, "the page to notice", 20)
    expect(re.search(r"lost|closed|reach", failed["error"]), f"error shown: {failed['error']!r}")
    expect(failed["content"], "what arrived is kept")
    expect(p.shown("chat-send") and p.js("return !document.getElementById('chat-input').disabled"), "Send is back")
    p.tab("dashboard")
    p.wait(lambda: p.shown("dash-error") and "reach the server" in p.text("dash-error"), "the dashboard's notice", 10)
    # A server comes back at the same address: the page carries on.
    ctx.server = Server(ctx.args.orchard, ctx.args.model, ctx.port, ctx.server_log)
    p.wait(lambda: not p.shown("dash-error"), "the dashboard to recover", 15)
    p.tab("chat")
    p.set_value("chat-max-tokens", "12")
    send_chat(p, "Say hello.")
    again = p.wait(lambda: (a := p.last_assistant()) and not a["busy"] and (a["meta"] or a["error"]) and a, "an answer", 60)
    expect(not again["error"] and again["content"], f"after the restart: {again}")


TESTS = [test_page_loads, test_wrong_api_key, test_chat_streams_renders_and_stops, test_chat_reasoning_folded,
         test_playground_schema_output_valid,
         test_playground_compile_error_position, test_playground_tool_call, test_dashboard_moves, test_accessibility,
         test_screenshots, test_server_goes_away_mid_answer]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orchard", required=True, help="the orchard binary")
    ap.add_argument("--artifacts", required=True, help="folder for the screenshots, logs and measurements")
    ap.add_argument("--model", help=f"the model (default: the default model, {STORE_NAME})")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--chromedriver", default=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    ap.add_argument("-k", default="", help="run only tests whose name contains one of these (comma-separated)")
    args = ap.parse_args()
    for path, package in ((args.chromium, "chromium"), (args.chromedriver, "chromium-driver")):
        if not os.access(path, os.X_OK):
            print(f"SKIP: {path} not found (apt-get install {package})")
            return 77
    if args.model is None and not default_model_stored():
        print(f"SKIP: the default model is not in {store_dir()} (run scripts/fetch-models.sh)")
        return 77
    os.makedirs(args.artifacts, exist_ok=True)
    for name in os.listdir(args.artifacts):
        if name.startswith("failed-"):
            os.unlink(os.path.join(args.artifacts, name))
    start_all = time.time()
    ctx = Context(args, args.artifacts)
    try:
        failed = run_tests([(test, (ctx,)) for test in TESTS], args.k,
                           lambda name: ctx.driver.save_screenshot(os.path.join(args.artifacts, f"failed-{name}.png")))
    finally:
        ctx.close()
    if failed:
        print(f"{len(failed)} failed: {', '.join(failed)}; artifacts in {args.artifacts}")
        return 1
    print(f"all passed ({time.time() - start_all:.1f} s); screenshots in {args.artifacts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
