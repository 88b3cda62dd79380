// LoRA adapters: low-rank pairs (A [rank, n_in], B [n_out, rank]) keyed by the projection they modify
// (site and layer), applied as y = x W^T + s (x A^T) B^T with s = user scale x alpha / rank (alpha /
// sqrt(rank) with rsLoRA). Read from PEFT folders (adapter_config.json + adapter_model.safetensors) and
// llama.cpp GGUF adapters (general.type = adapter, adapter.type = lora, <base tensor>.lora_a / .lora_b),
// checked against the base model they will run with (fit_lora_adapter), written back as GGUF adapters,
// or merged into a base model's weights.
//
// Every pair is held in f32, rows in the base model's order: the q/k rows of an adapter written for the
// other RoPE layout (a PEFT adapter over a llama GGUF base, whose q/k rows llama.cpp interleaves) are
// reordered when it is fitted.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "pal/rope.h"
#include "pie/backend.h"
#include "pie/error.h"
#include "pie/model.h"

namespace pie {

// An adapter that cannot be read or does not fit its base: missing or malformed files, shapes that do
// not fit the base, an unknown target module, another architecture, NaN or Inf weights, a rank over 256.
class LoraError : public ModelError {
 public:
  using ModelError::ModelError;
};

inline constexpr std::int64_t kMaxLoraRank = 256;

// "q", "k", "v", "o", "gate", "up", "down", "output".
const char* projection_site_name(ProjectionSite site);

// One low-rank pair of an adapter.
struct LoraPair {
  ProjectionSite site = ProjectionSite::q;
  std::int32_t layer = -1;        // -1 for the output projection
  std::int64_t rank = 0;
  std::int64_t n_in = 0, n_out = 0;
  float scale = 0;                // alpha / rank, or alpha / sqrt(rank) with rsLoRA (the user scale apart)
  std::vector<float> a;           // [rank, n_in]
  std::vector<float> b;           // [n_out, rank]
};

struct LoraAdapter {
  std::string name;               // the file or folder stem unless the caller names it
  std::filesystem::path path;
  std::string architecture;       // the base's architecture when the format says ("llama"); empty: any
  float alpha = 0;
  bool rslora = false;
  // The RoPE layout the q/k rows of B follow: neox for PEFT (Hugging Face order), the architecture's GGUF
  // layout for GGUF adapters. fit_lora_adapter reorders them to the base's.
  pal::RopeLayout qk_layout = pal::RopeLayout::neox;
  std::vector<LoraPair> pairs;    // at most one per (site, layer)

  // The pair modifying (site, layer), or nullptr. Valid once fitted (the lookup table is built then).
  const LoraPair* pair(ProjectionSite site, std::int32_t layer) const {
    const std::size_t i = slot(site, layer);
    if (i >= index_.size() || index_[i] < 0) return nullptr;
    return &pairs[static_cast<std::size_t>(index_[i])];
  }
  std::int64_t max_rank() const;
  std::size_t bytes() const;  // of its A and B matrices
  // Builds the (site, layer) lookup; fit_lora_adapter calls it.
  void build_index(std::int32_t n_layer);
  // The lookup's size once fitted, (n_layer + 1) * 8 slots ((layer + 1) * 8 + site); 0 before.
  std::size_t n_slots() const { return index_.size(); }
  // Distinct for every fitting of every adapter in the process (0 before the first): what a backend keys
  // its copy of the pairs by (an address may be reused by another adapter once this one is gone).
  std::uint64_t uid() const { return uid_; }

 private:
  static constexpr std::size_t kSites = 8;
  std::size_t slot(ProjectionSite site, std::int32_t layer) const {
    return static_cast<std::size_t>(layer + 1) * kSites + static_cast<std::size_t>(site);
  }
  std::vector<std::int32_t> index_;
  std::uint64_t uid_ = 0;
};

// Reads an adapter: a PEFT folder (or its adapter_config.json) or a GGUF adapter file, told apart by
// what the path holds. Checks what can be checked without a base (pairs complete, ranks 1..256 and equal
// within a pair, finite weights, known target modules). Throws LoraError naming the file and tensor.
std::shared_ptr<LoraAdapter> read_lora_adapter(const std::filesystem::path& path);
std::shared_ptr<LoraAdapter> read_peft_adapter(const std::filesystem::path& folder);
std::shared_ptr<LoraAdapter> read_gguf_adapter(const std::filesystem::path& file);

// Checks `adapter` against the base it will run with and puts its q/k rows in the base's RoPE order
// (in place), then builds its lookup. Throws LoraError naming the pair: another architecture, a layer the
// base lacks, A or B whose shape does not fit the base weight.
void fit_lora_adapter(LoraAdapter& adapter, const Model& base);
// read_lora_adapter then fit_lora_adapter.
std::shared_ptr<const LoraAdapter> load_lora_adapter(const std::filesystem::path& path, const Model& base);

// Writes `adapter`, fitted to `base`, as a llama.cpp GGUF adapter for the base's architecture (f32 pairs,
// q/k rows in the architecture's GGUF layout, rsLoRA folded into adapter.lora.alpha). Throws LoraError
// (rsLoRA with ranks that differ between pairs: no single alpha says it), pie::Error on I/O.
void write_gguf_adapter(const LoraAdapter& adapter, const Model& base, const std::filesystem::path& path);

// B's q/k rows of every q and k pair reordered from adapter.qk_layout to `to` (head_dim: the base's).
void reorder_lora_qk(LoraAdapter& adapter, std::int64_t head_dim, pal::RopeLayout to);

// An adapter and the user's scale for it.
struct ScaledLora {
  std::shared_ptr<const LoraAdapter> adapter;
  float scale = 1.0f;
};

// `base` with W += sum_i s_i B_i A_i for every pair of the (fitted) adapters, each modified weight stored
// as f32 (others shared with base). Throws LoraError when an adapter was not fitted to this base's shapes.
std::shared_ptr<Model> merge_lora_adapters(const std::shared_ptr<const Model>& base,
                                           const std::vector<ScaledLora>& adapters);

}  // namespace pie
