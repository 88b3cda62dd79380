// `orchard pull` and POST /api/pull: a model into the store from a local GGUF file or an http(s)
// URL. A download goes to blobs/partial-<hash of the url> and is resumed from there (an HTTP Range
// request) when a pull of the same URL is run again; only a complete file whose sha256 is known is
// renamed into a blob, and only then is a manifest written, so a name never points at a half file.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "pie/model_store.h"

namespace pie {

// A download that stopped before the file's end (connection lost, the server's error): the part
// received is kept, and the next pull of the same URL resumes from it.
class DownloadError : public Error {
 public:
  using Error::Error;
};

struct PullProgress {
  // "pulling <url>", "verifying sha256 digest", "writing manifest", "success" (Ollama's statuses).
  std::function<void(const std::string&)> status;
  StoreProgress bytes;  // (bytes done, total), the resumed part included
};

// Whether `source` is an http:// or https:// URL.
bool is_url(std::string_view source);
// The name a pulled file gets when none is given: its file name without ".gguf", lower-cased, each
// run of characters a name cannot hold turned into '-', tag "latest" ("SmolLM2-135M.Q4_1.gguf" ->
// "smollm2-135m.q4_1:latest"). Throws ModelNotFoundError when nothing usable is left.
std::string default_pull_name(std::string_view source);
// Stores `source` (a path or an http(s) URL to a GGUF file) under `name` (default_pull_name when
// empty). Throws DownloadError (interrupted; resumable), ModelError (not a GGUF file, an unreadable
// path, an HTTP error status, a malformed URL), StoreError (the store cannot be written).
StoredModel pull_model(const ModelStore& store, std::string_view source, std::string_view name = {},
                       const PullProgress& progress = {});

}  // namespace pie
