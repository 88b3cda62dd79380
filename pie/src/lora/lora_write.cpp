// Writing a GGUF adapter as llama.cpp's convert_lora_to_gguf.py does: general.type = adapter,
// adapter.type = lora, adapter.lora.alpha, and per pair <base tensor>.lora_a (GGUF dims [n_in, rank]) and
// .lora_b ([rank, n_out]), q/k rows in the architecture's GGUF RoPE order.
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "model/weights.h"
#include "pie/lora.h"
#include "tensor/gguf.h"

namespace pie {
namespace {

std::string gguf_base_name(const LoraPair& p) {
  static constexpr const char* kNames[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
  if (p.site == ProjectionSite::output) return "output.weight";
  return fmt::format("blk.{}.{}.weight", p.layer, kNames[static_cast<int>(p.site)]);
}

std::vector<std::uint8_t> bytes_of(const std::vector<float>& v) {
  std::vector<std::uint8_t> out(v.size() * sizeof(float));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace

void write_gguf_adapter(const LoraAdapter& fitted, const Model& base, const std::filesystem::path& path) {
  const ModelConfig& c = base.config;
  LoraAdapter adapter = fitted;
  reorder_lora_qk(adapter, c.head_dim, model_detail::gguf_rope_is_neox(c.arch) ? pal::RopeLayout::neox
                                                                               : pal::RopeLayout::gptj);
  float alpha = adapter.alpha;
  if (adapter.rslora) {
    // llama.cpp scales by alpha / rank: alpha / sqrt(rank) is alpha sqrt(rank) / rank.
    for (const LoraPair& p : adapter.pairs) {
      if (p.rank != adapter.pairs.front().rank) {
        throw LoraError(fmt::format("[lora] {}: an rsLoRA adapter whose ranks differ ({} and {}) has no GGUF alpha",
                                    adapter.path.string(), adapter.pairs.front().rank, p.rank));
      }
    }
    alpha *= std::sqrt(static_cast<float>(adapter.pairs.front().rank));
  }
  namespace g = tensor::gguf;
  g::Writer w;
  w.set("general.architecture", g::make_string(model_detail::gguf_arch_name(c.arch)));
  w.set("general.type", g::make_string("adapter"));
  w.set("general.name", g::make_string(adapter.name));
  w.set("adapter.type", g::make_string("lora"));
  w.set("adapter.lora.alpha", g::make_float32(alpha));
  constexpr std::uint32_t kF32 = 0;
  try {
    for (const LoraPair& p : adapter.pairs) {
      const std::string name = gguf_base_name(p);
      w.add_tensor(name + ".lora_a", {static_cast<std::uint64_t>(p.n_in), static_cast<std::uint64_t>(p.rank)}, kF32,
                   bytes_of(p.a));
      w.add_tensor(name + ".lora_b", {static_cast<std::uint64_t>(p.rank), static_cast<std::uint64_t>(p.n_out)}, kF32,
                   bytes_of(p.b));
    }
    w.write(path);
  } catch (const tensor::Error& e) {
    throw Error(fmt::format("[lora] writing {}: {}", path.string(), e.what()));
  }
}

}  // namespace pie
