#include "engine/lora_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>

namespace pie::detail {
namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ULL;
  return h ^ (h >> 29);
}

void check_name(const std::string& name) {
  if (name.empty() || name.size() > 256) {
    throw RequestError(fmt::format("[lora] an adapter name must have 1 to 256 bytes, got {}", name.size()), "lora_name");
  }
}

}  // namespace

LoraRegistry::LoraRegistry(std::shared_ptr<const Model> model, std::int64_t budget_bytes)
    : model_(std::move(model)), budget_bytes_(budget_bytes) {
  if (budget_bytes < 0) throw Error(fmt::format("[engine] lora_memory_bytes must be >= 0, got {}", budget_bytes));
}

LoraInfo LoraRegistry::info(const Entry& e) const {
  LoraInfo i;
  i.name = e.name;
  i.path = e.path;
  i.rank = e.rank;
  i.bytes = e.bytes;
  i.resident = e.adapter != nullptr;
  i.in_use = e.adapter ? e.adapter.use_count() - 1 : 0;
  return i;
}

LoraInfo LoraRegistry::insert(Entry entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  entry.id = next_id_++;
  entry.last_used = ++clock_;
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == entry.name; });
  if (it != entries_.end()) {
    *it = std::move(entry);
  } else {
    entries_.push_back(std::move(entry));
    it = entries_.end() - 1;
  }
  const std::string name = it->name;
  evict_over_budget(&*it);
  for (const Entry& e : entries_) {
    if (e.name == name) return info(e);
  }
  throw Error("[lora] internal: the adapter attached is gone");
}

LoraInfo LoraRegistry::attach(const std::string& name, const std::filesystem::path& path) {
  check_name(name);
  Entry e;
  e.name = name;
  e.path = path;
  e.adapter = load_lora_adapter(path, *model_);  // outside the lock: a file read
  e.rank = e.adapter->max_rank();
  e.bytes = e.adapter->bytes();
  return insert(std::move(e));
}

LoraInfo LoraRegistry::attach(const std::string& name, std::shared_ptr<LoraAdapter> adapter) {
  check_name(name);
  if (!adapter) throw LoraError(fmt::format("[lora] attach '{}': no adapter", name));
  fit_lora_adapter(*adapter, *model_);
  Entry e;
  e.name = name;
  e.rank = adapter->max_rank();
  e.bytes = adapter->bytes();
  e.adapter = std::move(adapter);
  return insert(std::move(e));
}

void LoraRegistry::detach(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == name; });
  if (it == entries_.end()) throw LoraNotFoundError(name);
  entries_.erase(it);
}

std::shared_ptr<const LoraAdapter> LoraRegistry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == name; });
  return it == entries_.end() ? nullptr : it->adapter;
}

std::vector<LoraInfo> LoraRegistry::list() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<LoraInfo> out;
  for (const Entry& e : entries_) out.push_back(info(e));
  return out;
}

void LoraRegistry::evict_over_budget(const Entry* keep) {
  if (budget_bytes_ == 0) return;
  auto resident = [&] {
    std::int64_t n = 0;
    for (const Entry& e : entries_) {
      if (e.adapter) n += static_cast<std::int64_t>(e.bytes);
    }
    return n;
  };
  while (resident() > budget_bytes_) {
    Entry* victim = nullptr;
    for (Entry& e : entries_) {
      // Only what can be read again, and nothing a request holds.
      if (&e == keep || e.path.empty() || !e.adapter || e.adapter.use_count() > 1) continue;
      if (victim == nullptr || e.last_used < victim->last_used) victim = &e;
    }
    if (victim == nullptr) return;  // over budget with what is in use: kept until released
    victim->adapter.reset();
    ++evictions_;
  }
}

ResolvedLoras LoraRegistry::resolve(const std::vector<LoraRequest>& requested) {
  ResolvedLoras out;
  if (requested.empty()) return out;
  if (requested.size() > kMaxRequestLoras) {
    throw RequestError(fmt::format("[lora] {} adapters in one request; at most {}", requested.size(), kMaxRequestLoras),
                       "lora");
  }
  for (std::size_t i = 0; i < requested.size(); ++i) {
    if (!std::isfinite(requested[i].scale)) {
      throw RequestError(fmt::format("[lora] adapter '{}': scale must be finite", requested[i].name), "lora");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (requested[j].name == requested[i].name) {
        throw RequestError(fmt::format("[lora] adapter '{}' named twice", requested[i].name), "lora");
      }
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t key = 0x4C6F5241ULL;
  for (const LoraRequest& r : requested) {
    auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == r.name; });
    if (it == entries_.end()) throw LoraNotFoundError(r.name);
    if (!it->adapter) it->adapter = load_lora_adapter(it->path, *model_);  // evicted: read again
    it->last_used = ++clock_;
    out.adapters.push_back({it->adapter, r.scale});
    key = mix(mix(key, it->id), std::bit_cast<std::uint32_t>(r.scale));
  }
  out.prefix_namespace = key == 0 ? 1 : key;
  evict_over_budget(nullptr);
  return out;
}

}  // namespace pie::detail
