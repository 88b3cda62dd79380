#include "server/model_registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "server/api_error.h"

namespace pie::server {

using Clock = std::chrono::steady_clock;

struct RegistryEntry {
  std::string name;
  std::shared_ptr<ServedModel> served;  // null while unloaded or loading, and for an embedding model
  // An embedding model's (null while unloaded or loading), or a generative model's hidden states (made
  // on its first embedding request, from `decoder`).
  std::shared_ptr<Embedder> embedder;
  std::shared_ptr<const Model> decoder;  // a loaded generative model's weights
  bool encoder = false;                  // an embedding model: loads as an Embedder alone
  std::mutex embedder_mutex;             // one generative model's embedder made at a time
  std::optional<StoredModel> stored;
  std::uint64_t size = 0;
  bool pinned = false;
  bool loading = false;
  std::int32_t running = 0;
  Clock::time_point last_used = Clock::now();
  std::optional<Clock::time_point> expires;  // nullopt: never
  double keep_alive = 0;                     // of the last release
  bool unload_when_idle = false;
};

namespace {

using Dropped = std::vector<std::shared_ptr<const void>>;  // engines and embedders let go of outside the lock

bool is_loaded(const RegistryEntry& e) { return e.served != nullptr || e.embedder != nullptr; }

// Moves what `e` holds loaded into `dropped` (freed when the caller lets go of it).
void unload_into(RegistryEntry& e, Dropped& dropped) {
  if (e.served) dropped.push_back(std::move(e.served));
  if (e.embedder) dropped.push_back(std::move(e.embedder));
  if (e.decoder) dropped.push_back(std::move(e.decoder));
  e.served.reset();
  e.embedder.reset();
  e.decoder.reset();
}

// The name a stored model's i-th ADAPTER is attached under.
std::string adapter_name(std::size_t i) { return fmt::format("adapter{}", i); }

std::chrono::system_clock::time_point to_system(Clock::time_point t) {
  return std::chrono::time_point_cast<std::chrono::system_clock::duration>(
      std::chrono::system_clock::now() + (t - Clock::now()));
}

}  // namespace

// --- ModelLease
// ----------------------------------------------------------------------------------------

ModelLease::ModelLease(ModelRegistry& registry, std::shared_ptr<RegistryEntry> entry,
                       std::shared_ptr<ServedModel> model, std::shared_ptr<Embedder> embedder,
                       std::optional<double> keep_alive)
    : registry_(registry),
      entry_(std::move(entry)),
      model_(std::move(model)),
      embedder_(std::move(embedder)),
      keep_alive_(keep_alive) {}

ModelLease::~ModelLease() { registry_.release(entry_, keep_alive_); }

const std::string& ModelLease::name() const { return entry_->name; }

const std::optional<StoredModel>& ModelLease::stored() const { return entry_->stored; }

std::vector<LoraRequest> ModelLease::adapters() const {
  std::vector<LoraRequest> out;
  if (entry_->pinned || !entry_->stored) return out;
  for (std::size_t i = 0; i < entry_->stored->adapters.size(); ++i)
    out.push_back({adapter_name(i), 1.0f});
  return out;
}

// --- ModelRegistry
// -------------------------------------------------------------------------------------

ModelRegistry::ModelRegistry(std::shared_ptr<ServedModel> first, RegistryOptions options)
    : first_(std::move(first)), options_(std::move(options)) {
  if (!options_.store_root.empty()) store_.emplace(options_.store_root);
  first_entry_ = std::make_shared<RegistryEntry>();
  first_entry_->name = first_->name();
  first_entry_->served = first_;
  first_entry_->pinned = true;
  // Its bytes: its file's (0 for a folder or no file) and its KV pool's.
  std::error_code ec;
  const std::uint64_t file_bytes =
      first_->model().path.empty() ? 0 : std::filesystem::file_size(first_->model().path, ec);
  const auto kv_bytes = static_cast<std::uint64_t>(
      std::max<std::int64_t>(first_->engine().options().kv_cache_bytes, 0));
  first_entry_->size = (ec ? 0 : file_bytes) + kv_bytes;
  // The first model opened by its stored name (`serve -m NAME`) keeps its Modelfile's defaults.
  if (store_) {
    if (const auto name = stored_name(first_->name())) {
      try {
        first_entry_->stored = store_->find(*name);
        first_entry_->size = first_entry_->stored->size + kv_bytes;
      } catch (const std::exception&) {
      }
    }
  }
  reaper_ = std::thread([this] { reap(); });
}

ModelRegistry::~ModelRegistry() {
  Dropped dropped;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& [name, entry] : entries_) unload_into(*entry, dropped);
    changed_.notify_all();
  }
  if (reaper_.joinable()) reaper_.join();
}

double ModelRegistry::parse_keep_alive(const nlohmann::ordered_json& value,
                                       const std::string& field) {
  auto bad = [&] {
    return ApiError::invalid(
        fmt::format("'{}' must be a number of seconds or a duration such as \"5m\", "
                    "\"1h30m\" or \"-1\", got {}",
                    field, value.dump()),
        field);
  };
  if (value.is_number()) {
    const double v = value.get<double>();
    if (!std::isfinite(v)) throw bad();
    return v;
  }
  if (!value.is_string()) throw bad();
  const std::string text = value.get<std::string>();
  if (text.empty()) throw bad();
  // Go's time.ParseDuration units, or a bare number of seconds.
  std::size_t pos = 0;
  double sign = 1;
  if (text[0] == '-' || text[0] == '+') {
    sign = text[0] == '-' ? -1 : 1;
    pos = 1;
  }
  double total = 0;
  bool any = false;
  while (pos < text.size()) {
    std::size_t used = 0;
    double number = 0;
    try {
      number = std::stod(text.substr(pos), &used);
    } catch (const std::exception&) {
      throw bad();
    }
    if (!std::isfinite(number) || number < 0 || text[pos] == '-' || text[pos] == '+') throw bad();
    pos += used;
    std::size_t unit_end = pos;
    while (unit_end < text.size() && std::isalpha(static_cast<unsigned char>(text[unit_end])))
      ++unit_end;
    const std::string unit = text.substr(pos, unit_end - pos);
    pos = unit_end;
    double scale = 0;
    if (unit.empty()) {
      if (any || pos != text.size()) throw bad();  // a bare number stands alone
      scale = 1;
    } else if (unit == "h") {
      scale = 3600;
    } else if (unit == "m") {
      scale = 60;
    } else if (unit == "s") {
      scale = 1;
    } else if (unit == "ms") {
      scale = 1e-3;
    } else if (unit == "us" || unit == "\u00b5s") {
      scale = 1e-6;
    } else if (unit == "ns") {
      scale = 1e-9;
    } else {
      throw bad();
    }
    total += number * scale;
    any = true;
  }
  if (!any) throw bad();
  return sign * total;
}

std::optional<std::string> ModelRegistry::stored_name(const std::string& asked) const {
  if (!store_ || !ModelName::valid(asked)) return std::nullopt;
  const std::string name = ModelName::parse(asked).str();
  if (!store_->contains(name)) return std::nullopt;
  return name;
}

std::vector<std::string> ModelRegistry::names() const {
  std::vector<std::string> out = first_->names();
  if (!store_) return out;
  for (const StoredModel& m : store_->list()) {
    const std::string name = m.name.str();
    if (!first_->serves(name) && std::find(out.begin(), out.end(), name) == out.end())
      out.push_back(name);
  }
  return out;
}

std::shared_ptr<ModelLease> ModelRegistry::acquire(const std::string& asked, bool ollama,
                                                   std::optional<double> keep_alive,
                                                   ModelUse use) {
  std::shared_ptr<ModelLease> lease = acquire_loaded(asked, ollama, keep_alive, use);
  if (use != ModelUse::embed || lease->embedder_ || lease->entry_->pinned) return lease;
  // A generative model's embeddings: its decoder as an embedder, made once while it stays loaded.
  RegistryEntry& entry = *lease->entry_;
  std::lock_guard made(entry.embedder_mutex);
  std::shared_ptr<const Model> decoder;
  {
    std::lock_guard lock(mutex_);
    lease->embedder_ = entry.embedder;
    decoder = entry.decoder;
  }
  if (lease->embedder_) return lease;
  try {
    lease->embedder_ =
        std::make_shared<Embedder>(embedding_model_from_decoder(decoder), options_.engine.n_threads);
  } catch (const std::exception& e) {
    throw ApiError::invalid(fmt::format("model '{}' gives no embeddings: {}", entry.name, e.what()),
                            "model", "model_not_embedding");
  }
  std::lock_guard lock(mutex_);
  if (entry.served) entry.embedder = lease->embedder_;  // kept while the model stays loaded
  return lease;
}

ApiError ModelRegistry::not_generative(const std::string& name) {
  return ApiError::invalid(
      fmt::format("model '{}' is an embedding model: it does not generate text (it answers POST "
                  "/v1/embeddings, /api/embed and /api/embeddings)",
                  name),
      "model", "model_not_generative");
}

std::shared_ptr<ModelLease> ModelRegistry::acquire_loaded(const std::string& asked, bool ollama,
                                                          std::optional<double> keep_alive,
                                                          ModelUse use) {
  if (first_->serves(asked)) {
    std::lock_guard lock(mutex_);
    ++first_entry_->running;
    first_entry_->last_used = Clock::now();
    return std::make_shared<ModelLease>(*this, first_entry_, first_, nullptr, keep_alive);
  }
  const std::optional<std::string> name = stored_name(asked);
  if (!name) {
    throw ApiError(404, "invalid_request_error",
                   ollama ? fmt::format("model '{}' not found", asked)
                          : fmt::format("The model '{}' does not exist; this server serves '{}'",
                                        asked, fmt::join(names(), "', '")),
                   "model", "model_not_found");
  }
  std::unique_lock lock(mutex_);
  std::shared_ptr<RegistryEntry>& slot = entries_[*name];
  if (!slot) {
    slot = std::make_shared<RegistryEntry>();
    slot->name = *name;
  }
  const std::shared_ptr<RegistryEntry> entry = slot;
  changed_.wait(lock, [&] { return !entry->loading || stopping_; });
  if (stopping_)
    throw ApiError(503, "server_error", "the server is shutting down", {}, "shutting_down");
  if (const auto it = entries_.find(*name); it == entries_.end() || it->second != entry) {
    lock.unlock();  // the load it waited for failed (and was forgotten): try again
    return acquire_loaded(asked, ollama, keep_alive, use);
  }
  if (is_loaded(*entry)) {
    if (entry->encoder && use == ModelUse::generate) throw not_generative(*name);
    entry->last_used = Clock::now();
    ++entry->running;
    entry->unload_when_idle = false;
    return std::make_shared<ModelLease>(*this, entry, entry->served, entry->embedder, keep_alive);
  }
  // Not loaded: this request loads it, outside the lock; others for it wait on `loading`.
  std::uint64_t size = 0;
  try {
    const StoredModel stored = store_->find(*name);
    entry->encoder = is_embedding_model_path(stored.file);
    // Its file and, for an engine, its KV pool: the pool's bytes when given, else known once its
    // engine has sized it.
    size = stored.size + (entry->encoder ? 0
                                         : static_cast<std::uint64_t>(std::max<std::int64_t>(
                                               options_.engine.kv_cache_bytes, 0)));
    entry->stored = stored;
  } catch (const std::exception& e) {
    entries_.erase(*name);
    throw ApiError(500, "server_error", fmt::format("cannot load '{}': {}", *name, e.what()),
                   "model", "model_load_failed");
  }
  if (entry->encoder && use == ModelUse::generate) {
    entries_.erase(*name);
    throw not_generative(*name);
  }
  entry->last_used = Clock::now();
  Dropped dropped;
  if (!make_room(lock, size, dropped)) {
    entries_.erase(*name);
    lock.unlock();
    throw ApiError(
        503, "server_error",
        fmt::format(
            "no room to load '{}': every loaded model has requests running (limits: {} models, "
            "{} bytes)",
            *name, options_.max_loaded, options_.memory_budget),
        "model", "model_limit_reached");
  }
  entry->size = size;
  entry->loading = true;
  lock.unlock();
  dropped.clear();  // engines of unloaded models stop here, outside the lock
  std::shared_ptr<ServedModel> served;
  std::shared_ptr<Embedder> embedder;
  std::shared_ptr<const Model> decoder;
  std::string error;
  try {
    if (entry->encoder) {
      auto encoder =
          std::const_pointer_cast<EmbeddingModel>(load_embedding_model(entry->stored->file));
      encoder->name = *name;
      embedder = std::make_shared<Embedder>(std::move(encoder), options_.engine.n_threads);
    } else {
      const OpenedModel opened = open_model(*name, *store_);
      decoder = opened.model;
      auto engine = std::make_shared<Engine>(opened.model, options_.engine);
      if (opened.stored) {
        for (std::size_t i = 0; i < opened.stored->adapters.size(); ++i) {
          engine->attach_lora(adapter_name(i), opened.stored->adapters[i]);
        }
      }
      served = std::make_shared<ServedModel>(engine, *name, options_.served);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  lock.lock();
  entry->loading = false;
  changed_.notify_all();
  if (!served && !embedder) {
    entries_.erase(*name);
    throw ApiError(500, "server_error", fmt::format("cannot load '{}': {}", *name, error), "model",
                   "model_load_failed");
  }
  entry->served = served;
  entry->embedder = embedder;
  entry->decoder = decoder;
  entry->size = entry->stored->size +
                (served ? static_cast<std::uint64_t>(std::max<std::int64_t>(
                              served->engine().options().kv_cache_bytes, 0))
                        : 0);
  entry->unload_when_idle = false;
  ++entry->running;
  return std::make_shared<ModelLease>(*this, entry, served, embedder, keep_alive);
}

bool ModelRegistry::make_room(std::unique_lock<std::mutex>&, std::uint64_t size,
                              Dropped& dropped) {
  auto fits = [&] {
    std::size_t count = 1;  // the first model
    std::uint64_t bytes = first_entry_->size + size;
    for (const auto& [name, e] : entries_) {
      if (is_loaded(*e) || e->loading) {
        ++count;
        bytes += e->size;
      }
    }
    return (options_.max_loaded == 0 || count + 1 <= options_.max_loaded) &&
           (options_.memory_budget == 0 || bytes <= options_.memory_budget);
  };
  while (!fits()) {
    std::shared_ptr<RegistryEntry> oldest;
    for (const auto& [name, e] : entries_) {
      if (is_loaded(*e) && e->running == 0 && !e->loading &&
          (!oldest || e->last_used < oldest->last_used))
        oldest = e;
    }
    if (!oldest) return false;
    unload_into(*oldest, dropped);
    oldest->expires.reset();
  }
  return true;
}

void ModelRegistry::release(const std::shared_ptr<RegistryEntry>& entry,
                            std::optional<double> keep_alive) {
  Dropped dropped;
  {
    std::lock_guard lock(mutex_);
    --entry->running;
    entry->last_used = Clock::now();
    if (entry->pinned) return;
    const double seconds = keep_alive.value_or(options_.keep_alive_seconds);
    entry->keep_alive = seconds;
    if (seconds < 0) {
      entry->expires.reset();
    } else {
      entry->expires = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(std::min(seconds, 1e9)));
    }
    if (entry->running == 0 && (seconds == 0 || entry->unload_when_idle)) {
      unload_into(*entry, dropped);
      entry->expires.reset();
    }
    changed_.notify_all();
  }
}

bool ModelRegistry::unload(const std::string& asked) {
  if (first_->serves(asked)) return false;
  const std::optional<std::string> name = stored_name(asked);
  if (!name) return false;
  Dropped dropped;
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(*name);
  if (it == entries_.end() || !is_loaded(*it->second)) return false;
  if (it->second->running > 0) {
    it->second->unload_when_idle = true;
  } else {
    unload_into(*it->second, dropped);
    it->second->expires.reset();
  }
  return true;
}

void ModelRegistry::forget(const std::string& stored_name) {
  Dropped dropped;
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(stored_name);
  if (it == entries_.end()) return;
  if (it->second->running > 0 || it->second->loading) {
    it->second->unload_when_idle = true;
  } else {
    unload_into(*it->second, dropped);
    entries_.erase(it);
  }
}

std::vector<LoadedModelInfo> ModelRegistry::loaded() const {
  std::lock_guard lock(mutex_);
  std::vector<LoadedModelInfo> out;
  auto add = [&](const RegistryEntry& e) {
    LoadedModelInfo info;
    info.name = e.name;
    info.size = e.size;
    if (e.stored) info.digest = e.stored->digest.substr(7);
    if (!e.pinned && e.running == 0 && e.expires) info.expires = to_system(*e.expires);
    if (!e.pinned && e.running > 0 && e.keep_alive >= 0) {
      info.expires =
          to_system(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(std::min(e.keep_alive, 1e9))));
    }
    info.running = e.running;
    info.model = e.served.get();
    info.embedding = e.encoder;
    out.push_back(std::move(info));
  };
  add(*first_entry_);
  for (const auto& [name, e] : entries_) {
    if (is_loaded(*e)) add(*e);
  }
  return out;
}

void ModelRegistry::reap() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    Dropped dropped;
    const Clock::time_point now = Clock::now();
    Clock::time_point next = now + std::chrono::seconds(1);
    for (auto& [name, e] : entries_) {
      if (!is_loaded(*e) || e->running > 0 || !e->expires) continue;
      if (*e->expires <= now) {
        unload_into(*e, dropped);
        e->expires.reset();
      } else {
        next = std::min(next, *e->expires);
      }
    }
    if (!dropped.empty()) {
      lock.unlock();
      dropped.clear();  // engines stop outside the lock
      lock.lock();
      continue;
    }
    changed_.wait_until(lock, next);
  }
}

}  // namespace pie::server
