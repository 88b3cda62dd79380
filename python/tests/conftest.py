"""Shared fixtures of the orchard package's tests. The package is imported from the build folder
(CTest sets PYTHONPATH=build/python); the shared test data from $ORCHARD_SHARED_DATA or ../shared/data."""
import json
import os

import pytest

import orchard
import orchard.grammar as xgr

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def shared_data():
    return (os.environ.get("ORCHARD_SHARED_DATA") or os.environ.get("ORCHARD_DEFAULT_SHARED_DATA")
            or os.path.join(REPO, "..", "shared", "data"))


def shared_path(*parts):
    """A path in the shared test data, or a skip with the reason when it is absent."""
    p = os.path.join(shared_data(), *parts)
    if not os.path.exists(p):
        pytest.skip(f"shared test data absent: {p} (set ORCHARD_SHARED_DATA)")
    return p


# A small vocabulary spelled as raw text: every printable ASCII character, a few words, and specials.
SMALL_TEXT = [chr(c) for c in range(32, 127)] + ["ab", "abc", "true", "false", "null", '{"', '":', '",', "12",
                                                  "\n", "  "]
SMALL_SPECIALS = ["<s>", "</s>"]


@pytest.fixture(scope="session")
def small_info():
    """TokenizerInfo over SMALL_TEXT + <s>, </s> (stop: </s>)."""
    vocab = SMALL_TEXT + SMALL_SPECIALS
    return xgr.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1], special_token_ids=[len(vocab) - 2])


@pytest.fixture(scope="session")
def small_compiler(small_info):
    return xgr.GrammarCompiler(small_info)


def tok(text):
    """The id of `text` in SMALL_TEXT."""
    return SMALL_TEXT.index(text)


EOS = len(SMALL_TEXT) + 1


@pytest.fixture(scope="session")
def random_engine():
    """The embedded random-weight model (no file)."""
    e = orchard.load("orchard-random", threads=1)
    yield e
    e.close()


def default_model_stored():
    home = os.environ.get("ORCHARD_HOME")
    store = os.path.join(home, "models") if home else os.path.expanduser("~/.cache/orchard/models")
    manifest = os.path.join(store, "manifests", "smollm2", "135m-instruct-q4_1")
    try:
        with open(manifest) as f:
            digest = json.load(f)["layers"][0]["digest"].split(":")[1]
    except (OSError, KeyError, IndexError, ValueError):
        return False
    return os.path.exists(os.path.join(store, "blobs", "sha256-" + digest))


@pytest.fixture(scope="session")
def default_engine():
    if not default_model_stored():
        pytest.skip("the default model is not in the model store (scripts/fetch-models.sh)")
    e = orchard.load(threads=2)
    yield e
    e.close()
