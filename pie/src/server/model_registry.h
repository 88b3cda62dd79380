// The models one server answers for: the model it was started with (always loaded), and every model
// of the store, each loaded on its first request and unloaded after its keep_alive (Ollama's
// semantics: the request's, else the server's default; 0 unloads once its requests are done,
// negative keeps it loaded), or earlier when the limits (a number of models, a memory budget: their
// files' bytes) need room for another, least recently used first, never one with requests running.
// Each loaded model has its own engine (batching, KV pool, threads), or, for an embedding model (a
// BERT encoder: llama.cpp's bert GGUF), its own Embedder; both count alike against keep_alive and the
// limits. A generative model embeds too when asked (its last hidden state, an Embedder made on the
// first such request). A load runs on the thread of the request that needs it, without the registry's
// lock: requests to other models go on; requests to the model being loaded wait for it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "pie/embedding.h"
#include "pie/engine.h"
#include "pie/model_store.h"
#include "server/api_error.h"
#include "server/served_model.h"

namespace pie::server {

struct RegistryOptions {
  std::filesystem::path store_root;  // empty: only the model the server was started with
  EngineOptions engine;              // of the engines of models loaded on demand
  ServedModelOptions served;         // their layout and special-token options (no aliases)
  double keep_alive_seconds = 300;   // default keep_alive; negative: forever
  std::size_t max_loaded = 0;        // models loaded at once, the first included; 0: no limit
  std::uint64_t memory_budget = 0;  // bytes of model files and KV pools loaded at once; 0: no limit
};

class ModelRegistry;
struct RegistryEntry;

// A request's hold on a loaded model: it is not unloaded while held. Released (destroyed), the
// model's keep_alive starts from then.
class ModelLease {
 public:
  ModelLease(ModelRegistry& registry, std::shared_ptr<RegistryEntry> entry,
             std::shared_ptr<ServedModel> model, std::shared_ptr<Embedder> embedder,
             std::optional<double> keep_alive);
  ~ModelLease();
  ModelLease(const ModelLease&) = delete;
  ModelLease& operator=(const ModelLease&) = delete;
  // The generative model; a lease taken for ModelUse::generate always has one.
  ServedModel& model() const { return *model_; }
  // The model's embedder; a lease taken for ModelUse::embed of a stored model always has one (the
  // first model's embedder is the server's: null here).
  Embedder* embedder() const { return embedder_.get(); }
  // The name the model is served under.
  const std::string& name() const;
  // The stored model (its Modelfile's parameters and system prompt); nullopt for the first model.
  const std::optional<StoredModel>& stored() const;
  // Its Modelfile's ADAPTERs, attached to its engine when it was loaded: what each of its requests
  // applies.
  std::vector<LoraRequest> adapters() const;

 private:
  friend class ModelRegistry;
  ModelRegistry& registry_;
  std::shared_ptr<RegistryEntry> entry_;
  std::shared_ptr<ServedModel> model_;
  std::shared_ptr<Embedder> embedder_;
  std::optional<double> keep_alive_;
};

struct LoadedModelInfo {
  std::string name;
  std::uint64_t size = 0;  // the model file's bytes and its KV pool's
  std::string digest;      // sha256 hex of the model file, or empty
  std::optional<std::chrono::system_clock::time_point> expires;  // nullopt: never
  std::int32_t running = 0;
  const ServedModel* model =
      nullptr;  // valid while the registry is locked by the caller's lease, else unused
  bool embedding = false;  // an embedding model (an Embedder, no engine)
};

// What a request wants of a model: text (an engine), or embeddings (an encoder's Embedder, or a
// generative model's hidden states).
enum class ModelUse : std::uint8_t { generate, embed };

class ModelRegistry {
 public:
  ModelRegistry(std::shared_ptr<ServedModel> first, RegistryOptions options);
  ~ModelRegistry();
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // The model `asked` names (the first model's names, "default", empty; or a stored name), loaded
  // (or loading: waits for it). keep_alive: seconds, nullopt for the default. Throws ApiError 404
  // naming an unknown model (in Ollama's words when `ollama`), 400 naming an embedding model asked
  // to generate (model_not_generative) or a generative model whose embeddings cannot be computed
  // (model_not_embedding), 503 when no room can be made (every loaded model busy), 500 when the
  // model cannot be loaded.
  std::shared_ptr<ModelLease> acquire(const std::string& asked, bool ollama,
                                      std::optional<double> keep_alive = {},
                                      ModelUse use = ModelUse::generate);
  // Unloads `asked` once its requests are done (Ollama's keep_alive 0 with nothing to generate).
  // False when it is not loaded; the first model is never unloaded.
  bool unload(const std::string& asked);
  // A stored model removed or renamed: unloads it when idle (its requests finish on the loaded
  // copy).
  void forget(const std::string& stored_name);

  const ServedModel& first() const { return *first_; }
  // Whether `asked` names the first model.
  bool is_first(const std::string& asked) const { return first_->serves(asked); }
  // The stored name `asked` means ("tiny" -> "tiny:latest"), when the store holds it; nullopt
  // otherwise.
  std::optional<std::string> stored_name(const std::string& asked) const;
  // The first model's names, then the stored models' (those not among them).
  std::vector<std::string> names() const;
  std::vector<LoadedModelInfo> loaded() const;
  const ModelStore* store() const { return store_ ? &*store_ : nullptr; }
  // Seconds; throws ApiError 400 naming `field` for what Ollama would not take (a number of
  // seconds, or a duration "5m", "1h30m", "300ms", "-1").
  static double parse_keep_alive(const nlohmann::ordered_json& value, const std::string& field);

 private:
  friend class ModelLease;
  void release(const std::shared_ptr<RegistryEntry>& entry, std::optional<double> keep_alive);
  // Under the lock: unloads idle models, least recently used first, until `size` more bytes and one
  // more model fit. False when they cannot.
  bool make_room(std::unique_lock<std::mutex>& lock, std::uint64_t size,
                 std::vector<std::shared_ptr<const void>>& dropped);
  // acquire without the embedder of a generative model (made by acquire when asked).
  std::shared_ptr<ModelLease> acquire_loaded(const std::string& asked, bool ollama,
                                             std::optional<double> keep_alive, ModelUse use);
  static ApiError not_generative(const std::string& name);
  void reap();

  std::shared_ptr<ServedModel> first_;
  RegistryOptions options_;
  std::optional<ModelStore> store_;
  std::shared_ptr<RegistryEntry> first_entry_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::shared_ptr<RegistryEntry>>
      entries_;  // stored name -> entry (loaded or loading)
  bool stopping_ = false;
  std::thread reaper_;
};

}  // namespace pie::server
