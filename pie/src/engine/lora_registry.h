// The engine's LoRA adapters by name: attached (read and fitted to the model) while the engine runs,
// resolved for each request at submit, detached at any time. A request holds its adapters (shared) from
// submit to its end, so detaching never pulls an adapter from under a running request: they finish with
// it, and new requests naming it are refused. Adapters attached from a path count against a memory budget:
// past it the least recently used ones that no request holds are evicted from memory, keeping their name
// and path, and read again when a request names them. Thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pie/engine.h"
#include "pie/lora.h"

namespace pie::detail {

// A request's adapters, resolved: each with the request's scale, and the prefix-cache namespace of the
// set (0 when empty).
struct ResolvedLoras {
  std::vector<ScaledLora> adapters;
  std::uint64_t prefix_namespace = 0;
};

class LoraRegistry {
 public:
  // budget_bytes: adapters' A and B bytes kept in memory at most (0: no bound).
  LoraRegistry(std::shared_ptr<const Model> model, std::int64_t budget_bytes);

  // Reads and fits the adapter at `path`, then attaches it under `name` (replacing one of that name;
  // requests holding the old one finish with it). Throws LoraError (bad adapter), RequestError (param
  // "lora_name": an empty name or one over 256 bytes).
  LoraInfo attach(const std::string& name, const std::filesystem::path& path);
  // Fits `adapter` (in place) and attaches it; never evicted (no path to read it again from).
  LoraInfo attach(const std::string& name, std::shared_ptr<LoraAdapter> adapter);
  // Forgets `name`. Throws LoraNotFoundError when it is not attached.
  void detach(const std::string& name);
  std::vector<LoraInfo> list() const;
  // The adapter attached under `name` while it is in memory; nullptr when evicted or not attached.
  std::shared_ptr<const LoraAdapter> find(const std::string& name) const;
  // The adapters a request names (an evicted one read again). Throws LoraNotFoundError naming the first
  // unknown one, RequestError (param "lora") on a scale that is not finite, a name given twice or more than
  // kMaxRequestLoras adapters, LoraError when an evicted adapter's file cannot be read again.
  ResolvedLoras resolve(const std::vector<LoraRequest>& requested);

 private:
  struct Entry {
    std::string name;
    std::filesystem::path path;                 // empty: attached from memory, never evicted
    std::shared_ptr<const LoraAdapter> adapter; // nullptr while evicted
    std::uint64_t id = 0;                       // distinct per attach (the prefix namespace's part)
    std::uint64_t last_used = 0;
    std::int64_t rank = 0;
    std::size_t bytes = 0;
  };
  LoraInfo info(const Entry& e) const;
  LoraInfo insert(Entry entry);
  void evict_over_budget(const Entry* keep);  // mutex held

  std::shared_ptr<const Model> model_;
  std::int64_t budget_bytes_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  std::uint64_t next_id_ = 1, clock_ = 0;
  std::uint64_t evictions_ = 0;
};

}  // namespace pie::detail
