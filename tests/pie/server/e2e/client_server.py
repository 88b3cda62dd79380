"""A live `orchard serve` driven by the official `ollama` and `openai` clients, as the model-store end-to-end
tests use it, and their errors checked by status and words. Importing it needs both packages: a test file
imports it inside its own skip guard.
"""
import json

import ollama
import openai

from live_server import LiveServer, expect


class ClientServer(LiveServer):
    """A LiveServer with `ollama` and `openai` clients on its address (no API key)."""

    def __init__(self, binary, *args, **kw):
        super().__init__(binary, *args, **kw)
        self.ollama = ollama.Client(host=self.base, timeout=120)
        self.openai = openai.OpenAI(base_url=self.base + "/v1", api_key="none", max_retries=0, timeout=120)

    def http(self, method, path, body):
        """`body` as JSON: returns (status, body text)."""
        status, _, text = self.request(method, path, body)
        return status, text

    def http_raw(self, method, path, data):
        """`data` (bytes) as it is: returns (status, body text)."""
        status, _, text = self.request(method, path, raw=data, content_type=None)
        return status, text

    def loaded(self):
        """The running models by name (`ollama ps`)."""
        return {m.model: m for m in self.ollama.ps().models}


def expect_error(call, status, *words):
    """`call()` fails through either client with HTTP `status` and an error naming each of `words`."""
    try:
        call()
    except ollama.ResponseError as e:
        expect(e.status_code == status, f"status {e.status_code}, expected {status}: {e.error}")
        for w in words:
            expect(w in e.error, f"error {e.error!r} does not mention {w!r}")
        return
    except openai.APIStatusError as e:
        expect(e.status_code == status, f"status {e.status_code}, expected {status}: {e.body}")
        for w in words:
            expect(w in json.dumps(e.body), f"error {e.body!r} does not mention {w!r}")
        return
    raise AssertionError(f"no error (expected {status})")
