// The model store: named models kept as content-addressed files, as Ollama keeps them, so that one file is
// stored once whatever names it has.
//   <root>/blobs/sha256-<hex>          a model file
//   <root>/manifests/<name>/<tag>      JSON {"layers": [{"mediaType", "digest": "sha256:<hex>", "size"}], ...}
//   <root>/verified/sha256-<hex>       "size mtime": the blob's sha256 was checked while it had these
// The root is $ORCHARD_HOME/models (default ~/.cache/orchard/models); scripts/fetch-models.sh fills it with
// the default model at set-up. A model is named "name[:tag]" (tag "latest" when omitted), as Ollama names
// them: lower-case letters, digits, '.', '_' and '-', with '/' between the parts of a name.
//
// Commands and the server open what a user names through open_model(): a file or folder, a stored name,
// "orchard-random" (the embedded random-weight model, for tests), or nothing (the default model).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pie/error.h"
#include "pie/model.h"

namespace pie {

// The model commands and the server run when none is named: SmolLM2-135M-Instruct, Q4_1 (Apache-2.0).
inline constexpr std::string_view kDefaultModelName = "smollm2:135m-instruct-q4_1";
// The embedded random-weight model (random_model()): never a fallback, only when named.
inline constexpr std::string_view kRandomModelName = "orchard-random";

// A name that is neither a stored model nor a file (the message says how to get the model).
class ModelNotFoundError : public ModelError {
 public:
  using ModelError::ModelError;
};

struct ModelName {
  std::string name;  // "smollm2", "library/qwen2.5"
  std::string tag;   // "135m-instruct-q4_1"; "latest" when the text has none
  std::string str() const { return name + ":" + tag; }
  // Throws ModelNotFoundError when `text` is not a valid model name (empty, bad characters, "..").
  static ModelName parse(std::string_view text);
  // Whether `text` is spelled as a model name (says nothing of whether it is stored).
  static bool valid(std::string_view text);
};

struct StoredModel {
  ModelName name;
  std::string digest;            // "sha256:<hex>"
  std::uint64_t size = 0;        // bytes
  std::filesystem::path file;    // the blob
  std::string source;            // where it came from (the manifest's "source"), may be empty
};

class ModelStore {
 public:
  explicit ModelStore(std::filesystem::path root = default_root());
  // $ORCHARD_HOME/models, or ~/.cache/orchard/models.
  static std::filesystem::path default_root();
  const std::filesystem::path& root() const { return root_; }

  // The stored model `name`, its blob checked: present, of the manifest's size, and with the manifest's
  // sha256 (hashed on first use and whenever the blob's size or time changed; the check is recorded under
  // verified/ when the store is writable). Throws ModelNotFoundError when no manifest names it, ModelError
  // naming the file when the manifest is malformed or the blob is missing, truncated or corrupt.
  StoredModel find(std::string_view name) const;
  // Whether a manifest names `name` (no blob check).
  bool contains(std::string_view name) const;
  // Every stored model (blobs not checked), sorted by name; unreadable manifests are skipped.
  std::vector<StoredModel> list() const;

 private:
  StoredModel read_manifest(const ModelName& name) const;
  void verify_blob(const StoredModel& model) const;
  std::filesystem::path root_;
};

struct OpenedModel {
  std::shared_ptr<const Model> model;
  // The name it was opened by: the stored name, kRandomModelName, or empty for a file or folder.
  std::string store_name;
};

// Opens what a user names: nullopt or "default" -> the default model from the store; kRandomModelName
// -> random_model(); an existing file or folder -> load_model(); otherwise a stored model's name.
// Throws ModelNotFoundError (one line, with how to fetch the default model when it is the one missing),
// ModelError for a model that cannot be loaded.
OpenedModel open_model(const std::optional<std::string>& given, const ModelStore& store = ModelStore(),
                       const LoadOptions& options = {});

}  // namespace pie
