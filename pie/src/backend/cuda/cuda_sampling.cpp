#include "cuda_sampling.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "cuda_sources.h"
#include "pie/error.h"
#include "tensor/cuda/jit.h"

namespace pie::cuda {
namespace {

namespace tc = tensor::cuda;

constexpr unsigned kThreads = 1024;  // THREADS of sampling_ops.cu: one block a row

const tc::Kernel& sample_kernel() {
  static std::once_flag once;
  static tc::Kernel kernel;
  std::call_once(once, [] {
    const tc::EmbeddedSource& src = embedded_source("sampling_ops.cu");
    kernel = tc::load_module(src.name, src.text, {}).kernel("sample_rows");
  });
  return kernel;
}

std::size_t aligned(std::size_t n) { return (n + 255) / 256 * 256; }

// `b` with at least `bytes` (replaced, not grown in place: the stream is idle between calls).
void ensure(tc::DeviceBuffer& b, std::size_t bytes) {
  if (b.bytes() < bytes) b = tc::MemoryPool::global().allocate(std::max<std::size_t>(bytes, 256));
}
void ensure(tc::HostBuffer& b, std::size_t bytes) {
  if (b.bytes() < bytes) b = tc::HostBuffer(std::max<std::size_t>(bytes, 4096));
}

}  // namespace

void CudaSampling::sample(const float* logits, std::int64_t n_logit_rows, std::int64_t n_vocab,
                          std::span<const DeviceSampleRow> rows, std::span<DeviceSampleResult> out) {
  if (out.size() != rows.size()) {
    throw Error(fmt::format("[backend:cuda] sample_rows: {} results for {} rows", out.size(), rows.size()));
  }
  if (rows.empty()) return;
  const std::size_t words = static_cast<std::size_t>((n_vocab + 31) / 32);
  descs_.clear();
  ints_.clear();
  masks_.clear();
  mask_spans_.clear();
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const DeviceSampleRow& row = rows[r];
    if (row.params == nullptr) throw Error(fmt::format("[backend:cuda] sample_rows: row {} has no parameters", r));
    if (row.logits_row < 0 || row.logits_row >= n_logit_rows) {
      throw Error(fmt::format("[backend:cuda] sample_rows: row {} reads logit row {} of the step's {}", r,
                              row.logits_row, n_logit_rows));
    }
    const SamplingParams& p = *row.params;
    SampleRowDesc d;
    d.u = row.u;
    d.logits_row = row.logits_row;
    if (!row.mask.empty()) {
      d.n_words = static_cast<std::int32_t>(std::min(row.mask.size(), words));
      // Rows handed the same mask (the engine's one mask for every ignore_eos row) share its upload:
      // at batch 256 that is 4 MB a step not copied.
      const auto same = std::find_if(mask_spans_.begin(), mask_spans_.end(), [&](const MaskSpan& m) {
        return m.data == row.mask.data() && m.n_words == d.n_words;
      });
      if (same != mask_spans_.end()) {
        d.mask_off = same->offset;
      } else {
        d.mask_off = static_cast<std::int64_t>(masks_.size());
        masks_.insert(masks_.end(), row.mask.begin(), row.mask.begin() + d.n_words);
        mask_spans_.push_back({row.mask.data(), d.n_words, d.mask_off});
      }
    }
    d.rep_off = static_cast<std::int32_t>(ints_.size());
    d.rep_n = static_cast<std::int32_t>(row.penalized.size());
    ints_.insert(ints_.end(), row.penalized.begin(), row.penalized.end());
    d.cnt_off = static_cast<std::int32_t>(ints_.size());
    d.cnt_n = static_cast<std::int32_t>(row.counts.size());
    for (const auto& [token, count] : row.counts) ints_.insert(ints_.end(), {token, count});
    d.bias_off = static_cast<std::int32_t>(ints_.size());
    d.bias_n = static_cast<std::int32_t>(p.logit_bias.size());
    for (const auto& [token, bias] : p.logit_bias) ints_.insert(ints_.end(), {token, std::bit_cast<std::int32_t>(bias)});
    // Every token the kernel indexes is checked here: a bad one would write outside the row.
    const auto check = [&](std::int32_t token) {
      if (token < 0 || token >= n_vocab) {
        throw Error(fmt::format("[backend:cuda] sample_rows: row {} names token {} outside the vocabulary [0, {})", r,
                                token, n_vocab));
      }
    };
    for (const std::int32_t t : row.penalized) check(t);
    for (const auto& [token, count] : row.counts) check(token);
    for (const auto& [token, bias] : p.logit_bias) check(token);
    d.top_k = p.top_k;
    d.top_logprobs = std::clamp(p.top_logprobs, 0, 20);
    d.want_logprob = p.logprobs ? 1 : 0;
    d.temperature = p.temperature;
    d.top_p = p.top_p;
    d.min_p = p.min_p;
    d.rep = p.repetition_penalty;
    d.freq = p.frequency_penalty;
    d.pres = p.presence_penalty;
    if (d.temperature > 0 && d.top_k > kDeviceMaxTopK && d.top_k < n_vocab) {
      throw Error(fmt::format("[backend:cuda] sample_rows: row {} has top_k {}; the device sorts at most {}", r,
                              d.top_k, kDeviceMaxTopK));
    }
    descs_.push_back(d);
  }

  // One upload: [descs | ints | masks], each 256-byte aligned.
  const std::size_t descs_bytes = aligned(descs_.size() * sizeof(SampleRowDesc));
  const std::size_t ints_bytes = aligned(ints_.size() * sizeof(std::int32_t));
  const std::size_t masks_bytes = aligned(masks_.size() * sizeof(std::uint32_t));
  const std::size_t total = descs_bytes + ints_bytes + masks_bytes;
  const std::size_t out_bytes = rows.size() * sizeof(SampleRowOut);
  ensure(staging_, total);
  ensure(results_, out_bytes);
  ensure(inputs_, total);
  ensure(outputs_, out_bytes);
  ensure(work_, rows.size() * static_cast<std::size_t>(n_vocab) * sizeof(float));
  auto* base = static_cast<std::byte*>(staging_.data());
  std::memcpy(base, descs_.data(), descs_.size() * sizeof(SampleRowDesc));
  if (!ints_.empty()) std::memcpy(base + descs_bytes, ints_.data(), ints_.size() * sizeof(std::int32_t));
  if (!masks_.empty()) {
    std::memcpy(base + descs_bytes + ints_bytes, masks_.data(), masks_.size() * sizeof(std::uint32_t));
  }
  inputs_.copy_from_host(base, total, 0, stream_);
  auto* dev = inputs_.as<std::byte>();
  const float* lp = logits;
  int n = static_cast<int>(n_vocab);
  const void* descs = dev;
  const void* ints = dev + descs_bytes;
  const void* masks = dev + descs_bytes + ints_bytes;
  float* work = work_.as<float>();
  void* outs = outputs_.as<void>();
  void* args[] = {&lp, &n, &descs, &ints, &masks, &work, &outs};
  sample_kernel().launch({static_cast<unsigned>(rows.size()), 1, 1}, {kThreads, 1, 1}, 0, stream_, args);
  outputs_.copy_to_host(results_.data(), out_bytes, 0, stream_);
  stream_->synchronize();

  const auto* res = static_cast<const SampleRowOut*>(results_.data());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const SampleRowOut& o = res[r];
    DeviceSampleResult& d = out[r];
    d = {};
    d.status = static_cast<DeviceSampleResult::Status>(o.status);
    d.bad_token = o.bad_token;
    d.bad_value = o.bad_value;
    d.sampled.token = o.token;
    const SamplingParams& p = *rows[r].params;
    if (p.logprobs || p.top_logprobs > 0) {
      d.sampled.logprob = o.logprob;
      for (std::int32_t j = 0; j < std::min(o.n_top, 20); ++j) d.sampled.top.push_back({o.top_ids[j], o.top_lp[j]});
    }
  }
}

}  // namespace pie::cuda
