// write_gguf_model: a Model as a GGUF v3 file llama.cpp loads, with llama.cpp's key and tensor names, the
// tokenizer's metadata and the chat template; weight rows converted with kernels::quantize_row (bit-exact
// with ggml's reference quantizers).
#include <fmt/format.h>

#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/quant.h"
#include "model/weights.h"
#include "pie/error.h"
#include "pie/model.h"
#include "tensor/error.h"
#include "tensor/thread_pool.h"
#include "tensor/gguf.h"
#include "tokenizers/gguf_export.h"

namespace pie {

namespace {

namespace gg = tensor::gguf;
using tensor::DType;

bool is_k_quant(DType t) {
  return t == DType::q2_K || t == DType::q3_K || t == DType::q4_K || t == DType::q5_K || t == DType::q6_K;
}

// llama.cpp's general.file_type (llama_ftype) for a file that is mostly of type t.
std::uint32_t file_type(DType t) {
  switch (t) {
    case DType::f32: return 0;
    case DType::f16: return 1;
    case DType::q4_0: return 2;
    case DType::q4_1: return 3;
    case DType::q8_0: return 7;
    case DType::q5_0: return 8;
    case DType::q5_1: return 9;
    case DType::q2_K: return 10;
    case DType::q3_K: return 11;  // Q3_K_S
    case DType::q4_K: return 14;  // Q4_K_S
    case DType::q5_K: return 16;  // Q5_K_S
    case DType::q6_K: return 18;
    case DType::bf16: return 32;
    default: return 0;
  }
}

class GgufModelWriter {
 public:
  GgufModelWriter(const Model& model, const std::filesystem::path& path, const ConvertOptions& options)
      : model_(model), c_(model.config), path_(path), options_(options) {}

  void write() {
    check();
    metadata();
    tensors();
    for (const auto& [key, names] : fallbacks_) {
      const auto& [requested, n_in, chosen] = key;
      if (!options_.notice) break;
      options_.notice(fmt::format("{} cannot hold rows of {} elements: {} tensor{} written as {} ({}{})",
                                  tensor::dtype_name(requested), n_in, names.size(), names.size() == 1 ? "" : "s",
                                  tensor::dtype_name(chosen), names.front(), names.size() > 1 ? ", ..." : ""));
    }
    writer_.write(path_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw ModelError(fmt::format("[convert] {}: {}", path_.string(), what));
  }

  void check() {
    try {
      c_.validate();
    } catch (const ModelError& e) {
      fail(e.what());
    }
    if (!model_.tokenizer) fail("the model has no tokenizer (GGUF files carry one)");
    if (options_.type == DType::q8_K) fail("q8_K is not a storage type");
    if (static_cast<std::int64_t>(model_.weights.layers.size()) != c_.n_layer) {
      fail(fmt::format("{} layers of weights for n_layer {}", model_.weights.layers.size(), c_.n_layer));
    }
    const bool neox_arch = model_detail::gguf_rope_is_neox(c_.arch);
    if (neox_arch && c_.rope.layout != pal::RopeLayout::neox) {
      fail(fmt::format("llama.cpp runs {} with NeoX RoPE; a model with GPT-J RoPE cannot be written as it",
                       architecture_name(c_.arch)));
    }
    // llama.cpp runs llama with adjacent-pair RoPE: the rows of wq/wk of a NeoX (Hugging Face) model are
    // reordered so that the pairs it rotates are adjacent, as convert_hf_to_gguf.py's permute does.
    permute_qk_ = !neox_arch && c_.rope.layout == pal::RopeLayout::neox;
    if (permute_qk_ && c_.rope.rotary_dim != c_.head_dim) {
      fail(fmt::format("partial RoPE (rotary_dim {} of head_dim {}) with NeoX layout cannot be written as {}",
                       c_.rope.rotary_dim, c_.head_dim, model_detail::gguf_arch_name(c_.arch)));
    }
    switch (c_.rope.scaling) {
      case pal::RopeScaling::none:
      case pal::RopeScaling::linear:
      case pal::RopeScaling::yarn:
        break;
      case pal::RopeScaling::llama3:
        if (neox_arch) fail("llama3 RoPE scaling is only written for llama models");
        break;
      default:
        fail("NTK-aware and dynamic NTK RoPE scaling have no GGUF form");
    }
  }

  std::string key(const char* suffix) const { return fmt::format("{}.{}", arch_, suffix); }
  void set_u32(const char* suffix, std::int64_t v) { writer_.set(key(suffix), gg::make_uint32(static_cast<std::uint32_t>(v))); }
  void set_f32(const char* suffix, double v) { writer_.set(key(suffix), gg::make_float32(static_cast<float>(v))); }

  void metadata() {
    arch_ = model_detail::gguf_arch_name(c_.arch);
    if (c_.sliding_window > 0 && !model_detail::gguf_rope_is_neox(c_.arch) && options_.notice) {
      // Orchard reads the key back; llama.cpp's llama architecture ignores it (convert_hf_to_gguf.py
      // drops it too), so there attention beyond the window differs.
      options_.notice(fmt::format("llama.cpp runs {} without the sliding window ({} tokens): its attention differs "
                                  "once a sequence is longer",
                                  arch_, c_.sliding_window));
    }
    writer_.set("general.architecture", gg::make_string(arch_));
    writer_.set("general.name", gg::make_string(model_.name.empty() ? model_.path.stem().string() : model_.name));
    writer_.set("general.file_type", gg::make_uint32(file_type(options_.type)));
    if (tensor::is_quantized(options_.type)) writer_.set("general.quantization_version", gg::make_uint32(2));
    set_u32("vocab_size", c_.n_vocab);
    set_u32("context_length", c_.context_length);
    set_u32("embedding_length", c_.n_embd);
    set_u32("block_count", c_.n_layer);
    set_u32("feed_forward_length", c_.n_ff);
    set_u32("attention.head_count", c_.n_head);
    set_u32("attention.head_count_kv", c_.n_kv_head);
    if (c_.n_embd % c_.n_head != 0 || c_.head_dim != c_.n_embd / c_.n_head) {
      set_u32("attention.key_length", c_.head_dim);
      set_u32("attention.value_length", c_.head_dim);
    }
    set_f32("attention.layer_norm_rms_epsilon", c_.norm_eps);
    set_f32("rope.freq_base", c_.rope.theta);
    set_u32("rope.dimension_count", c_.rope.rotary_dim);
    if (c_.sliding_window > 0) set_u32("attention.sliding_window", c_.sliding_window);
    if (c_.attention_scale > 0) set_f32("attention.scale", c_.attention_scale);
    if (c_.attn_logit_softcap > 0) set_f32("attn_logit_softcapping", c_.attn_logit_softcap);
    if (c_.final_logit_softcap > 0) set_f32("final_logit_softcapping", c_.final_logit_softcap);
    const pal::RopeConfig& rope = c_.rope;
    if (rope.scaling == pal::RopeScaling::linear || rope.scaling == pal::RopeScaling::yarn) {
      writer_.set(key("rope.scaling.type"), gg::make_string(rope.scaling == pal::RopeScaling::linear ? "linear" : "yarn"));
      set_f32("rope.scaling.factor", rope.factor);
      if (rope.scaling == pal::RopeScaling::yarn) {
        set_u32("rope.scaling.original_context_length", rope.original_max_position);
        set_f32("rope.scaling.yarn_beta_fast", rope.yarn_beta_fast);
        set_f32("rope.scaling.yarn_beta_slow", rope.yarn_beta_slow);
      }
    } else if (rope.scaling == pal::RopeScaling::llama3) {
      set_u32("rope.scaling.original_context_length", rope.original_max_position);
    }
    try {
      tokenizers::add_gguf_metadata(*model_.tokenizer, writer_, static_cast<std::size_t>(c_.n_vocab));
    } catch (const tokenizers::Error& e) {
      fail(e.what());
    }
    if (!model_.chat_template.empty()) {
      writer_.set("tokenizer.chat_template", gg::make_string(model_.chat_template));
    }
  }

  // The type a matrix is written as: the requested one (q6_K for the output projection with the K types,
  // as llama.cpp's llama_tensor_get_type), or llama.cpp's fallback when its rows are not whole blocks.
  DType choose(const std::string& name, std::int64_t n_in, bool is_output) {
    DType t = options_.type;
    if (is_output && is_k_quant(t)) t = DType::q6_K;
    if (n_in % tensor::block_size(t) == 0) return t;
    DType fallback = DType::f16;
    switch (t) {
      case DType::q4_K: fallback = DType::q5_0; break;
      case DType::q5_K: fallback = DType::q5_1; break;
      case DType::q6_K: fallback = DType::q8_0; break;
      case DType::q2_K:
      case DType::q3_K: fallback = DType::q4_0; break;  // llama.cpp: iq4_nl, which Orchard lacks
      default: break;
    }
    if (n_in % tensor::block_size(fallback) != 0) fallback = DType::f16;
    fallbacks_[{t, n_in, fallback}].push_back(name);
    return fallback;
  }

  // Rows of `w` in `order` (identity when empty), converted to `type`.
  std::vector<std::uint8_t> convert(const std::string& name, const Weight& w, DType type,
                                    const std::vector<std::int64_t>& order) {
    if (!w) fail(fmt::format("tensor '{}' is absent", name));
    const std::size_t src_row = pie::row_bytes(w);
    const std::size_t dst_row = tensor::row_bytes(type, pie::n_in(w));
    std::vector<std::uint8_t> out(dst_row * static_cast<std::size_t>(pie::n_out(w)));
    const auto* src = w.data_as<const std::uint8_t>();
    auto rows = [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> tmp(static_cast<std::size_t>(pie::n_in(w)));
      for (std::int64_t r = begin; r < end; ++r) {
        const std::int64_t from = order.empty() ? r : order[static_cast<std::size_t>(r)];
        const std::uint8_t* in = src + static_cast<std::size_t>(from) * src_row;
        std::uint8_t* dst = out.data() + static_cast<std::size_t>(r) * dst_row;
        if (w.dtype() == type) {
          std::memcpy(dst, in, dst_row);
        } else {
          kernels::dequantize_row(w.dtype(), in, tmp.data(), pie::n_in(w));
          kernels::quantize_row(type, tmp.data(), dst, pie::n_in(w));
        }
      }
    };
    const std::int64_t grain = std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(1, pie::n_in(w)));
    pool().parallel_for(pie::n_out(w), rows, grain);
    return out;
  }

  void matrix(const std::string& name, const Weight& w, std::int64_t n_out, std::int64_t n_in,
              bool is_output = false, const std::vector<std::int64_t>& order = {}) {
    if (pie::n_out(w) != n_out || pie::n_in(w) != n_in) {
      fail(fmt::format("tensor '{}' is [{}, {}], expected [{}, {}]", name, pie::n_out(w), pie::n_in(w), n_out, n_in));
    }
    const DType type = choose(name, n_in, is_output);
    add(name, {static_cast<std::uint64_t>(n_in), static_cast<std::uint64_t>(n_out)}, type, convert(name, w, type, order));
  }

  void vector(const std::string& name, const Weight& w, std::int64_t n, const std::vector<std::int64_t>& order = {}) {
    if (!w || w.numel() != n) {
      fail(fmt::format("tensor '{}' is absent or has {} elements, expected {}", name, w ? w.numel() : 0, n));
    }
    std::vector<float> values(static_cast<std::size_t>(n));
    kernels::dequantize_row(w.dtype(), w.data(), values.data(), n);
    if (!order.empty()) {
      std::vector<float> reordered(values.size());
      for (std::size_t i = 0; i < values.size(); ++i) reordered[i] = values[static_cast<std::size_t>(order[i])];
      values.swap(reordered);
    }
    std::vector<std::uint8_t> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    add(name, {static_cast<std::uint64_t>(n)}, DType::f32, std::move(bytes));
  }

  void add(const std::string& name, std::vector<std::uint64_t> dims, DType type, std::vector<std::uint8_t> data) {
    try {
      writer_.add_tensor(name, std::move(dims), tensor::dtype_info(type).ggml_type, std::move(data));
    } catch (const tensor::InputError& e) {
      fail(e.what());
    }
    ++done_;
    if (options_.progress) options_.progress(done_, total_);
  }

  // Source row of each written row of a [n_heads * head_dim, n] q or k matrix (or bias) for llama.cpp's
  // adjacent-pair RoPE: written row h*hd + 2i + j comes from row h*hd + j*hd/2 + i.
  std::vector<std::int64_t> pair_order(std::int64_t n_heads) const {
    if (!permute_qk_) return {};
    const std::int64_t hd = c_.head_dim;
    std::vector<std::int64_t> order(static_cast<std::size_t>(n_heads * hd));
    for (std::int64_t h = 0; h < n_heads; ++h) {
      for (std::int64_t i = 0; i < hd / 2; ++i) {
        for (std::int64_t j = 0; j < 2; ++j) order[static_cast<std::size_t>(h * hd + 2 * i + j)] = h * hd + j * hd / 2 + i;
      }
    }
    return order;
  }

  void tensors() {
    const std::int64_t n_embd = c_.n_embd, hd = c_.head_dim, n_q = c_.n_head * hd, n_kv = c_.n_kv_head * hd;
    const ModelWeights& w = model_.weights;
    const bool tied = c_.tied_embeddings || !w.output || w.output.data() == w.token_embd.data();
    total_ = 2 + (tied ? 0 : 1) + (c_.rope.scaling == pal::RopeScaling::llama3 ? 1 : 0);
    for (const LayerWeights& l : w.layers) total_ += 4 + 2 + 3 + (l.bq ? 3 : 0) + (l.q_norm ? 2 : 0);
    if (c_.rope.scaling == pal::RopeScaling::llama3) {
      const std::vector<float> factors = model_detail::llama3_rope_factors(c_.rope);
      std::vector<std::uint8_t> bytes(factors.size() * sizeof(float));
      std::memcpy(bytes.data(), factors.data(), bytes.size());
      add("rope_freqs.weight", {factors.size()}, DType::f32, std::move(bytes));
    }
    // With tied embeddings llama.cpp treats token_embd as the output projection when choosing its type.
    matrix("token_embd.weight", model_.weights.token_embd, c_.n_vocab, n_embd, tied);
    vector("output_norm.weight", model_.weights.output_norm, n_embd);
    if (!tied) matrix("output.weight", model_.weights.output, c_.n_vocab, n_embd, true);
    const std::vector<std::int64_t> q_order = pair_order(c_.n_head), k_order = pair_order(c_.n_kv_head);
    for (std::int32_t i = 0; i < c_.n_layer; ++i) {
      const LayerWeights& l = model_.weights.layers[static_cast<std::size_t>(i)];
      auto name = [i](const char* t) { return fmt::format("blk.{}.{}", i, t); };
      vector(name("attn_norm.weight"), l.attn_norm, n_embd);
      matrix(name("attn_q.weight"), l.wq, n_q, n_embd, false, q_order);
      matrix(name("attn_k.weight"), l.wk, n_kv, n_embd, false, k_order);
      matrix(name("attn_v.weight"), l.wv, n_kv, n_embd);
      matrix(name("attn_output.weight"), l.wo, n_embd, n_q);
      if (l.bq) {
        vector(name("attn_q.bias"), l.bq, n_q, q_order);
        vector(name("attn_k.bias"), l.bk, n_kv, k_order);
        vector(name("attn_v.bias"), l.bv, n_kv);
      }
      if (l.q_norm) {
        vector(name("attn_q_norm.weight"), l.q_norm, hd);
        vector(name("attn_k_norm.weight"), l.k_norm, hd);
      }
      vector(name("ffn_norm.weight"), l.ffn_norm, n_embd);
      matrix(name("ffn_gate.weight"), l.w_gate, c_.n_ff, n_embd);
      matrix(name("ffn_up.weight"), l.w_up, c_.n_ff, n_embd);
      matrix(name("ffn_down.weight"), l.w_down, n_embd, c_.n_ff);
    }
  }

  tensor::ThreadPool& pool() {
    if (!pool_) pool_ = std::make_unique<tensor::ThreadPool>();
    return *pool_;
  }

  const Model& model_;
  const ModelConfig& c_;
  std::filesystem::path path_;
  const ConvertOptions& options_;
  gg::Writer writer_;
  std::string arch_;
  bool permute_qk_ = false;
  std::uint64_t done_ = 0, total_ = 0;
  std::map<std::tuple<DType, std::int64_t, DType>, std::vector<std::string>> fallbacks_;
  std::unique_ptr<tensor::ThreadPool> pool_;
};

}  // namespace

void write_gguf_model(const Model& model, const std::filesystem::path& path, const ConvertOptions& options) {
  try {
    GgufModelWriter(model, path, options).write();
  } catch (const tensor::IoError& e) {
    throw Error(e.what());
  } catch (const tokenizers::Error& e) {
    throw ModelError(e.what());
  } catch (const tensor::InputError& e) {
    throw ModelError(e.what());
  } catch (const tensor::Error& e) {
    throw ModelError(fmt::format("[convert] {}: {}", path.string(), e.what()));
  }
}

}  // namespace pie
