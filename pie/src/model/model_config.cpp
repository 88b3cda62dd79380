// Architecture names, ModelConfig::validate and Model::describe.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "pal/error.h"
#include "pie/error.h"
#include "pie/model.h"

namespace pie {

namespace {

constexpr std::array<std::pair<Architecture, const char*>, 4> kArchNames{{
    {Architecture::llama, "llama"},
    {Architecture::mistral, "mistral"},
    {Architecture::qwen2, "qwen2"},
    {Architecture::qwen3, "qwen3"},
}};

}  // namespace

const char* architecture_name(Architecture arch) {
  for (const auto& [a, name] : kArchNames) {
    if (a == arch) return name;
  }
  return "unknown";
}

Architecture architecture_from_name(const std::string& name) {
  for (const auto& [a, n] : kArchNames) {
    if (name == n) return a;
  }
  throw ModelError(fmt::format("[model] architecture '{}' is not supported (llama, mistral, qwen2, qwen3 are)", name));
}

void ModelConfig::validate() const {
  auto fail = [](const char* field, const std::string& what) {
    throw ModelError(fmt::format("[model config] {}: {}", field, what));
  };
  auto positive = [&](const char* field, std::int64_t v) {
    if (v <= 0) fail(field, fmt::format("must be positive, got {}", v));
  };
  if (std::string_view(architecture_name(arch)) == "unknown") {
    fail("arch", fmt::format("unknown architecture value {}", static_cast<int>(arch)));
  }
  positive("n_vocab", n_vocab);
  positive("n_embd", n_embd);
  positive("n_layer", n_layer);
  positive("n_head", n_head);
  positive("n_kv_head", n_kv_head);
  positive("head_dim", head_dim);
  positive("n_ff", n_ff);
  positive("context_length", context_length);
  if (n_kv_head > n_head || n_head % n_kv_head != 0) {
    fail("n_kv_head", fmt::format("{} does not divide n_head {}", n_kv_head, n_head));
  }
  if (!(std::isfinite(norm_eps) && norm_eps > 0)) fail("norm_eps", fmt::format("must be positive, got {}", norm_eps));
  if (rope.head_dim != head_dim) {
    fail("rope.head_dim", fmt::format("{} differs from head_dim {}", rope.head_dim, head_dim));
  }
  try {
    pal::validate_rope(rope);
  } catch (const pal::Error& e) {
    fail("rope", e.what());
  }
  if (sliding_window < 0) fail("sliding_window", fmt::format("must be >= 0, got {}", sliding_window));
  if (!(std::isfinite(attn_logit_softcap) && attn_logit_softcap >= 0)) {
    fail("attn_logit_softcap", fmt::format("must be >= 0, got {}", attn_logit_softcap));
  }
  if (!(std::isfinite(final_logit_softcap) && final_logit_softcap >= 0)) {
    fail("final_logit_softcap", fmt::format("must be >= 0, got {}", final_logit_softcap));
  }
  if (!(std::isfinite(attention_scale) && attention_scale >= 0)) {
    fail("attention_scale", fmt::format("must be >= 0, got {}", attention_scale));
  }
}

namespace {

// Calls fn(weight) for every present weight of `w`, a tied output once.
template <class Fn>
void for_each_weight(const ModelWeights& w, Fn fn) {
  if (w.token_embd) fn(w.token_embd);
  if (w.output_norm) fn(w.output_norm);
  if (w.output && w.output.data() != w.token_embd.data()) fn(w.output);
  for (const LayerWeights& l : w.layers) {
    for (const Weight* x : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm,
                            &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down}) {
      if (*x) fn(*x);
    }
  }
}

}  // namespace

std::size_t ModelWeights::bytes() const {
  std::size_t n = 0;
  for_each_weight(*this, [&](const Weight& w) { n += w.nbytes(); });
  return n;
}

std::int64_t ModelWeights::n_parameters() const {
  std::int64_t n = 0;
  for_each_weight(*this, [&](const Weight& w) { n += w.numel(); });
  return n;
}

std::string Model::describe() const {
  std::array<int, tensor::kNumDTypes> counts{};
  for_each_weight(weights, [&](const Weight& w) { ++counts[static_cast<std::size_t>(w.dtype())]; });
  std::vector<std::pair<int, tensor::DType>> order;
  for (const tensor::DTypeInfo& info : tensor::all_dtypes()) {
    const int c = counts[static_cast<std::size_t>(info.dtype)];
    if (c > 0) order.emplace_back(c, info.dtype);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out;
  for (const auto& [c, t] : order) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{}: {}", tensor::dtype_name(t), c);
  }
  return out;
}

}  // namespace pie
