// One forward step at a time of a batch of sequences over a paged KV cache, as the engine-level benchmark
// programs (orchard_bench_runner, orchard_bench_lora) time them: each sequence computes its next tokens
// (ids from a fixed pseudo-random stream: the speed does not depend on them), optionally under LoRA
// adapters, with the logits of its last token or of every token.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "pie/backend.h"
#include "pie/kv_cache.h"
#include "pie/runner.h"

namespace orchard::bench {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct BenchSeq {
  pie::SeqId id = -1;
  std::int32_t len = 0;  // tokens with K/V in the cache
};

class BatchStepper {
 public:
  BatchStepper(pie::ModelRunner& runner, pie::KvCache& kv) : runner_(runner), kv_(kv) {}

  // One step: sequence i computes its next counts[i] tokens, with logits for each of them when all_rows,
  // else for its last. With adapters, sequence i's rows use adapters[i % adapters.size()]. Throws
  // std::runtime_error when the cache has no pages left.
  void step(std::vector<BenchSeq>& seqs, const std::vector<std::int32_t>& counts, bool all_rows,
            std::span<const pie::LoraAdapter* const> adapters = {}) {
    std::vector<std::int32_t> tokens, qo{0}, lens, page_indptr{0}, pages, rows;
    std::vector<pie::LoraGroup> groups(adapters.size());
    for (std::size_t a = 0; a < adapters.size(); ++a) groups[a].adapter = adapters[a];
    for (std::size_t s = 0; s < seqs.size(); ++s) {
      const std::int32_t len = seqs[s].len + counts[s];
      if (!kv_.reserve(seqs[s].id, len)) throw std::runtime_error("out of KV pages");
      const auto owned = kv_.pages(seqs[s].id);
      const std::int32_t n_pages = (len + pie::kKvPageSize - 1) / pie::kKvPageSize;
      pages.insert(pages.end(), owned.begin(), owned.begin() + n_pages);
      page_indptr.push_back(static_cast<std::int32_t>(pages.size()));
      for (std::int32_t i = 0; i < counts[s]; ++i) {
        const auto row = static_cast<std::int32_t>(tokens.size());
        if (!groups.empty()) groups[s % groups.size()].rows.push_back(row);
        if (all_rows || i + 1 == counts[s]) rows.push_back(row);
        tokens.push_back(next_token());
      }
      qo.push_back(static_cast<std::int32_t>(tokens.size()));
      lens.push_back(len);
      seqs[s].len = len;
    }
    logits_.resize(rows.size() * static_cast<std::size_t>(runner_.model().config.n_vocab));
    runner_.forward(pie::ForwardBatch{tokens, qo, lens, page_indptr, pages, rows, groups}, kv_, logits_);
  }

 private:
  std::int32_t next_token() {
    state_ = state_ * 1664525u + 1013904223u;
    return static_cast<std::int32_t>((state_ >> 8) % static_cast<std::uint32_t>(runner_.model().config.n_vocab));
  }

  pie::ModelRunner& runner_;
  pie::KvCache& kv_;
  std::vector<float> logits_;
  std::uint32_t state_ = 12345;
};

}  // namespace orchard::bench
