// Rotary position embedding (RoPE), applied in place to query or key rows.
//
// Layouts: NeoX rotates the pair (x[i], x[i + rotary_dim/2]) ("rotate_half", Llama/HF); GPT-J rotates the
// pair (x[2i], x[2i+1]) (interleaved). Only the first rotary_dim dims of each head rotate (partial rotary);
// the rest pass through. Pair i turns by angle pos * inv_freq[i], inv_freq[i] = theta^(-2i / rotary_dim),
// changed by the scaling, exactly as Hugging Face transformers' modeling_rope_utils computes it:
//   linear:       inv_freq / factor
//   ntk:          NTK-aware: theta * factor^(d / (d - 2)), d = rotary_dim
//   dynamic_ntk:  transformers "dynamic": theta * (factor * L / orig - (factor - 1))^(d / (d - 2)),
//                 L = max(seq_len, orig) (seq_len a config field: one table per length)
//   yarn:         ramp between interpolated (inv_freq / factor) and extrapolated frequencies over the
//                 correction range of beta_fast / beta_slow rotations; cos and sin scaled by the attention
//                 factor (default 0.1 ln(factor) + 1)
//   llama3:       low frequencies (wavelength > orig / low_freq_factor) divided by factor, high ones
//                 (wavelength < orig / high_freq_factor) kept, smooth blend between
// The reference computes angles in double; the fast version reads cos/sin tables (computed in double,
// stored as f32) cached per configuration.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace tensor {
class ThreadPool;
}

namespace pal {

enum class RopeLayout : std::uint8_t { neox, gptj };
enum class RopeScaling : std::uint8_t { none, linear, ntk, dynamic_ntk, yarn, llama3 };

struct RopeConfig {
  std::int32_t head_dim = 0;
  std::int32_t rotary_dim = 0;      // even, 2 <= rotary_dim <= head_dim; the first rotary_dim dims rotate
  double theta = 10000.0;           // base
  RopeLayout layout = RopeLayout::neox;
  RopeScaling scaling = RopeScaling::none;
  double factor = 1.0;              // linear, ntk, dynamic_ntk, yarn, llama3; > 0
  std::int32_t original_max_position = 0;  // dynamic_ntk, yarn, llama3: the pre-training context
  std::int32_t seq_len = 0;         // dynamic_ntk: the sequence length the base is computed for
  double yarn_beta_fast = 32.0;
  double yarn_beta_slow = 1.0;
  double yarn_attention_factor = 0.0;  // 0: 0.1 * ln(factor) + 1 (1 when factor <= 1)
  bool yarn_truncate = true;           // floor/ceil the correction range (transformers' default)
  double llama3_low_freq_factor = 1.0;
  double llama3_high_freq_factor = 4.0;

  bool operator==(const RopeConfig&) const = default;
};

// Checks the configuration; throws pal::Error naming the field and value (odd or out-of-range
// rotary_dim, theta <= 0, factor <= 0, missing original_max_position, ...).
void validate_rope(const RopeConfig& config);

// The rotary_dim / 2 inverse frequencies after scaling. Throws pal::Error on a bad config.
std::vector<double> rope_inv_freq(const RopeConfig& config);
// The factor cos and sin are multiplied by (YaRN's attention factor; 1 otherwise). Throws as above.
double rope_attention_factor(const RopeConfig& config);

// Reference: rotates x in place, token t at position positions[t]. Throws pal::Error on a bad config or a
// negative position (x untouched).
void rope_ref(const RopeConfig& config, const std::int32_t* positions,  // [n_tokens]
              float* x,                                                  // [n_tokens][n_heads][head_dim]
              std::int64_t n_tokens, std::int32_t n_heads);

// cos/sin of every (position, pair) for positions [0, n_positions), computed in double, stored as f32,
// attention factor folded in.
class RopeTable {
 public:
  // Throws pal::Error on a bad config or n_positions < 1.
  RopeTable(const RopeConfig& config, std::int32_t n_positions);
  const RopeConfig& config() const { return config_; }
  std::int32_t n_positions() const { return n_positions_; }
  std::int32_t n_pairs() const { return config_.rotary_dim / 2; }
  const float* cos_row(std::int32_t pos) const { return cos_.data() + static_cast<std::size_t>(pos) * n_pairs(); }
  const float* sin_row(std::int32_t pos) const { return sin_.data() + static_cast<std::size_t>(pos) * n_pairs(); }

 private:
  RopeConfig config_;
  std::int32_t n_positions_;
  std::vector<float> cos_;  // [n_positions][rotary_dim / 2]
  std::vector<float> sin_;  // [n_positions][rotary_dim / 2]
};

// The cached table for config covering at least positions [0, n_positions): built once per configuration
// (grown, by doubling, when a longer one is asked for); thread-safe. Throws as RopeTable.
std::shared_ptr<const RopeTable> rope_table(const RopeConfig& config, std::int32_t n_positions);

// Fast: rotates x in place from a table. Throws pal::Error (x untouched) when a position is negative or
// not below table.n_positions(). pool == nullptr runs on the calling thread.
void rope(const RopeTable& table, const std::int32_t* positions,  // [n_tokens]
          float* x,                                               // [n_tokens][n_heads][head_dim]
          std::int64_t n_tokens, std::int32_t n_heads, tensor::ThreadPool* pool = nullptr);

// Fast, with the cached table for config (rope_table(config, max position + 1)). Throws as above.
void rope(const RopeConfig& config, const std::int32_t* positions, float* x, std::int64_t n_tokens,
          std::int32_t n_heads, tensor::ThreadPool* pool = nullptr);

}  // namespace pal
