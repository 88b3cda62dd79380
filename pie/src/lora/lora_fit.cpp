// Fitting an adapter to its base: the architecture, every pair's layer and shapes against the weight it
// modifies, and the q/k rows of B put in the base's RoPE order.
#include <fmt/format.h>

#include <string>

#include "lora/site_weight.h"
#include "pie/lora.h"

namespace pie {
namespace {

// B's rows [n_heads * head_dim, rank] from one RoPE layout's q/k order to the other's: the NeoX order
// rotates (i, i + hd/2) of each head, the GPT-J order adjacent pairs (2i, 2i + 1), as llama.cpp's GGUF
// files of llama keep them (convert_hf_to_gguf.py's permute).
void reorder_rows(std::vector<float>& b, std::int64_t rank, std::int64_t head_dim, pal::RopeLayout to) {
  const std::int64_t n_rows = static_cast<std::int64_t>(b.size()) / rank;
  std::vector<float> out(b.size());
  for (std::int64_t h = 0; h < n_rows / head_dim; ++h) {
    for (std::int64_t i = 0; i < head_dim / 2; ++i) {
      for (std::int64_t j = 0; j < 2; ++j) {
        const std::int64_t gptj = h * head_dim + 2 * i + j, neox = h * head_dim + j * head_dim / 2 + i;
        const std::int64_t dst = to == pal::RopeLayout::gptj ? gptj : neox;
        const std::int64_t src = to == pal::RopeLayout::gptj ? neox : gptj;
        std::copy_n(b.begin() + src * rank, rank, out.begin() + dst * rank);
      }
    }
  }
  b = std::move(out);
}

}  // namespace

void reorder_lora_qk(LoraAdapter& adapter, std::int64_t head_dim, pal::RopeLayout to) {
  if (adapter.qk_layout == to) return;
  for (LoraPair& p : adapter.pairs) {
    if (p.site == ProjectionSite::q || p.site == ProjectionSite::k) reorder_rows(p.b, p.rank, head_dim, to);
  }
  adapter.qk_layout = to;
}

void fit_lora_adapter(LoraAdapter& adapter, const Model& base) {
  const ModelConfig& c = base.config;
  const std::string where = adapter.path.string();
  if (!adapter.architecture.empty() && adapter.architecture != architecture_name(c.arch) &&
      !(adapter.architecture == "llama" && c.arch == Architecture::mistral)) {
    throw LoraError(fmt::format("[lora] {}: an adapter for {}, the model '{}' is {}", where, adapter.architecture,
                                base.name, architecture_name(c.arch)));
  }
  const bool reorder = adapter.qk_layout != c.rope.layout;
  if (reorder && c.rope.rotary_dim != c.head_dim) {
    throw LoraError(fmt::format("[lora] {}: the adapter's q/k rows follow the other RoPE layout, which cannot be "
                                "converted under partial RoPE (rotary_dim {} of head_dim {})",
                                where, c.rope.rotary_dim, c.head_dim));
  }
  for (LoraPair& p : adapter.pairs) {
    const std::string pair = p.layer >= 0 ? fmt::format("layer {} {}", p.layer, projection_site_name(p.site))
                                          : std::string(projection_site_name(p.site));
    if (p.layer >= c.n_layer || p.layer < -1 || (p.layer == -1) != (p.site == ProjectionSite::output)) {
      throw LoraError(fmt::format("[lora] {}: {}: the model '{}' has {} layers", where, pair, base.name, c.n_layer));
    }
    const Weight* w = site_weight(base, p.site, p.layer);
    if (w == nullptr || !*w) {
      throw LoraError(fmt::format("[lora] {}: {}: the model has no such weight", where, pair));
    }
    if (p.n_in != n_in(*w) || p.n_out != n_out(*w)) {
      throw LoraError(fmt::format("[lora] {}: {}: A is [{}, {}] and B [{}, {}], the base weight is [{}, {}] "
                                  "(B A must be [n_out, n_in])",
                                  where, pair, p.rank, p.n_in, p.n_out, p.rank, n_out(*w), n_in(*w)));
    }
  }
  reorder_lora_qk(adapter, c.head_dim, c.rope.layout);
  adapter.build_index(c.n_layer);
}

std::shared_ptr<const LoraAdapter> load_lora_adapter(const std::filesystem::path& path, const Model& base) {
  std::shared_ptr<LoraAdapter> adapter = read_lora_adapter(path);
  fit_lora_adapter(*adapter, base);
  return adapter;
}

}  // namespace pie
