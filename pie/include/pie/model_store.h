// The model store: named models kept as content-addressed files, as Ollama keeps them, so that one file is
// stored once whatever names it has.
//   <root>/blobs/sha256-<hex>          a model file
//   <root>/manifests/<name>/<tag>      JSON {"layers": [{"mediaType", "digest": "sha256:<hex>", "size"}], ...}
//   <root>/verified/sha256-<hex>       "size mtime": the blob's sha256 was checked while it had these
// A manifest's first layer of media type application/vnd.orchard.model.gguf (or Ollama's
// application/vnd.ollama.image.model; a manifest of one layer: that layer) is the model file; the others,
// as Ollama keeps them, hold what `orchard create` read from a Modelfile: the chat template
// (application/vnd.ollama.image.template), the system prompt (.system), the parameters (.params, a JSON
// object), licenses (.license), adapters (.adapter) and messages (.messages, a JSON array).
// Every write is atomic (a temporary file in the same folder, then a rename): a full disk or a store that
// cannot be written is a StoreError and leaves no half file under a name.
// The root is $ORCHARD_HOME/models (default ~/.cache/orchard/models); scripts/fetch-models.sh fills it with
// the default model at set-up. A model is named "name[:tag]" (tag "latest" when omitted), as Ollama names
// them: lower-case letters, digits, '.', '_' and '-', with '/' between the parts of a name.
//
// Commands and the server open what a user names through open_model(): a file or folder, a stored name,
// "orchard-random" (the embedded random-weight model, for tests), or nothing (the default model).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
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

// The store cannot be written (permissions, a full disk, an I/O error); the message names the file.
class StoreError : public Error {
 public:
  using Error::Error;
};

// Media types of a manifest's layers (the model's own, then Ollama's for what a Modelfile sets).
inline constexpr std::string_view kManifestMediaType = "application/vnd.orchard.manifest.v1+json";
inline constexpr std::string_view kModelMediaType = "application/vnd.orchard.model.gguf";
inline constexpr std::string_view kTemplateMediaType = "application/vnd.ollama.image.template";
inline constexpr std::string_view kSystemMediaType = "application/vnd.ollama.image.system";
inline constexpr std::string_view kParamsMediaType = "application/vnd.ollama.image.params";
inline constexpr std::string_view kLicenseMediaType = "application/vnd.ollama.image.license";
inline constexpr std::string_view kAdapterMediaType = "application/vnd.ollama.image.adapter";
inline constexpr std::string_view kMessagesMediaType = "application/vnd.ollama.image.messages";

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
  std::string manifest_digest;   // sha256 hex of the manifest's bytes (what `list` shows as the ID)
  std::filesystem::file_time_type modified{};  // the manifest's time
  // What a Modelfile set (layers other than the model's; empty when absent).
  std::string chat_template;     // Jinja source that replaces the model's own
  std::string system;            // the system prompt a conversation starts with
  std::string parameters;        // JSON object text: sampling defaults ("temperature", "stop", ...)
  std::vector<std::string> licenses;
  std::vector<std::filesystem::path> adapters;  // their blobs
  std::string messages;          // JSON array text of {"role", "content"}
  std::vector<std::string> layer_digests;  // "sha256:<hex>" of every layer, the model's first
};

// What `create` records beside the model file (empty fields are not written).
struct ModelRecipe {
  std::string chat_template;
  std::string system;
  std::string parameters;  // JSON object text
  std::vector<std::string> licenses;
  std::vector<std::filesystem::path> adapters;  // files to store as blobs
  std::string messages;    // JSON array text
};

// (bytes done, bytes total; total 0 when unknown).
using StoreProgress = std::function<void(std::uint64_t, std::uint64_t)>;

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

  // --- writes (each atomic; StoreError when the store cannot be written, nothing left half-written) ---
  // Copies `file` into a blob named by its sha256 (computed while copying; nothing copied when the blob
  // is already there). Returns "sha256:<hex>". Throws StoreError, or ModelError when `file` is unreadable.
  std::string put_blob_file(const std::filesystem::path& file, const StoreProgress& progress = {}) const;
  // Stores `bytes` as a blob; returns "sha256:<hex>".
  std::string put_blob(std::string_view bytes) const;
  // Names the model whose file is the blob `model_digest` (which must be stored) with the recipe's layers,
  // replacing any model of that name. Throws ModelNotFoundError on a bad name, ModelError when the blob
  // is absent, StoreError.
  StoredModel write_model(std::string_view name, const std::string& model_digest, const ModelRecipe& recipe = {},
                          const std::string& source = {}) const;
  // Stores a GGUF file under `name` (checked to be a GGUF file first: ModelError otherwise).
  StoredModel import_file(const std::filesystem::path& file, std::string_view name,
                          const StoreProgress& progress = {}) const;
  // Gives the stored model `from` the name `to` too (the manifest is copied; no blob is). Throws
  // ModelNotFoundError when `from` is not stored.
  StoredModel copy(std::string_view from, std::string_view to) const;
  // Removes the name; then each of its blobs that no other manifest names. Throws ModelNotFoundError when
  // it is not stored, StoreError.
  void remove(std::string_view name) const;
  // The file of the blob `digest` ("sha256:<hex>") when it is stored (present; not hashed again), else
  // nullopt.
  std::optional<std::filesystem::path> blob_file(std::string_view digest) const;
  // Where a download of `url` is kept until it is complete (blobs/partial-<sha256 of the url>).
  std::filesystem::path partial_path(std::string_view url) const;

 private:
  StoredModel read_manifest(const ModelName& name) const;
  std::filesystem::path blob_path(std::string_view digest) const;
  void verify_blob(const StoredModel& model) const;
  std::filesystem::path root_;
};

struct OpenedModel {
  std::shared_ptr<const Model> model;
  // The name it was opened by: the stored name, kRandomModelName, or empty for a file or folder.
  std::string store_name;
  // The stored model (its Modelfile's template, system prompt and parameters); nullopt when not stored.
  std::optional<StoredModel> stored;
};

// Opens what a user names: nullopt or "default" -> the default model from the store; kRandomModelName
// -> random_model(); an existing file or folder -> load_model(); otherwise a stored model's name.
// A stored model's Modelfile template replaces the model's own chat template.
// Throws ModelNotFoundError (one line, with how to fetch the default model when it is the one missing),
// ModelError for a model that cannot be loaded.
OpenedModel open_model(const std::optional<std::string>& given, const ModelStore& store = ModelStore(),
                       const LoadOptions& options = {});

}  // namespace pie
