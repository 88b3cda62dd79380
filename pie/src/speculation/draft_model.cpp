// The draft-model drafter (speculation.h): a second model of the target's vocabulary, resident beside it
// with its own backend and KV pages, catching up with each row's tokens and drafting greedily.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <unordered_map>

#include "pie/error.h"
#include "pie/kv_cache.h"
#include "pie/runner.h"
#include "pie/speculation.h"

namespace pie {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string id_text(const std::optional<tokenizers::TokenId>& id) { return id ? std::to_string(*id) : "none"; }

// Bytes the host can still give (MemAvailable), or 0 when unknown.
std::int64_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

std::int32_t argmax(std::span<const float> row) {
  return static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

}  // namespace

void check_draft_vocabulary(const Model& draft, const Model& target) {
  const std::string what = fmt::format("[engine] draft model '{}' for target '{}'", draft.name, target.name);
  if (!draft.tokenizer || !target.tokenizer) throw ModelError(what + ": a model has no tokenizer");
  const tokenizers::Tokenizer& d = *draft.tokenizer;
  const tokenizers::Tokenizer& t = *target.tokenizer;
  if (draft.config.n_vocab != target.config.n_vocab || d.vocab_size() != t.vocab_size()) {
    throw ModelError(fmt::format("{}: the vocabularies differ: {} tokens ({} logits) in the draft, {} tokens ({} "
                                 "logits) in the target; a draft model must share the target's vocabulary",
                                 what, d.vocab_size(), draft.config.n_vocab, t.vocab_size(), target.config.n_vocab));
  }
  const tokenizers::SpecialTokens& ds = d.special_tokens();
  const tokenizers::SpecialTokens& ts = t.special_tokens();
  auto same = [&](const char* name, const std::optional<tokenizers::TokenId>& a,
                  const std::optional<tokenizers::TokenId>& b) {
    if (a != b) {
      throw ModelError(fmt::format("{}: the {} ids differ: {} in the draft, {} in the target", what, name, id_text(a),
                                   id_text(b)));
    }
  };
  same("beginning-of-sequence", ds.bos, ts.bos);
  same("end-of-sequence", ds.eos, ts.eos);
  same("end-of-turn", ds.eot, ts.eot);
  if (ds.end_of_generation != ts.end_of_generation) {
    throw ModelError(fmt::format("{}: the end-of-generation ids differ: [{}] in the draft, [{}] in the target", what,
                                 fmt::join(ds.end_of_generation, ", "), fmt::join(ts.end_of_generation, ", ")));
  }
  for (std::size_t id = 0; id < t.vocab_size(); ++id) {
    const auto tid = static_cast<tokenizers::TokenId>(id);
    if (d.token_bytes(tid) != t.token_bytes(tid) || d.is_special(tid) != t.is_special(tid)) {
      throw ModelError(fmt::format("{}: token {} differs: '{}' in the draft, '{}' in the target", what, id,
                                   d.token_text(tid), t.token_text(tid)));
    }
  }
}

struct DraftModelDrafter::Impl {
  std::shared_ptr<const Model> model;
  DraftModelOptions options;
  std::unique_ptr<ModelRunner> runner;
  std::unique_ptr<KvCache> kv;
  std::int64_t resident_bytes = 0;
  struct Seq {
    SeqId kv_seq = -1;
    std::vector<std::int32_t> tokens;  // whose K/V the cache holds (committed), in order
  };
  std::unordered_map<std::uint64_t, Seq> seqs;
  std::vector<float> logits;
  StepCost decode_cost;  // a drafting step's seconds by its rows

  // A row's draft sequence, made (or remade) empty with the cached prefix of `context` attached.
  Seq& fresh(std::uint64_t key, std::span<const std::int32_t> context) {
    release(key);
    Seq& s = seqs[key];
    s.kv_seq = kv->create();
    const std::int32_t covered = kv->attach_prefix(s.kv_seq, context);
    s.tokens.assign(context.begin(), context.begin() + covered);
    return s;
  }
  void release(std::uint64_t key) {
    auto it = seqs.find(key);
    if (it == seqs.end()) return;
    kv->release(it->second.kv_seq);
    seqs.erase(it);
  }

  // One forward pass: for each (row, tokens) part, `tokens` appended to the row's sequence; the logits of a
  // part's last token when it wants them. Parts whose pages cannot be had are dropped (their rows released:
  // no draft this step); returns which parts ran.
  struct Part {
    std::uint64_t key;
    std::span<const std::int32_t> tokens;
    bool wants_logits;
  };
  std::vector<bool> forward(std::span<const Part> parts, std::vector<std::span<const float>>& rows_out) {
    std::vector<bool> ran(parts.size(), false);
    std::vector<std::int32_t> tokens, qo_indptr{0}, seq_lens, page_indptr{0}, page_indices, logit_rows;
    std::vector<std::size_t> logit_part;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      auto it = seqs.find(parts[i].key);
      if (it == seqs.end()) continue;
      Seq& s = it->second;
      const auto len = static_cast<std::int32_t>(s.tokens.size() + parts[i].tokens.size());
      if (!kv->reserve(s.kv_seq, len)) {
        release(parts[i].key);
        continue;
      }
      ran[i] = true;
      tokens.insert(tokens.end(), parts[i].tokens.begin(), parts[i].tokens.end());
      qo_indptr.push_back(static_cast<std::int32_t>(tokens.size()));
      seq_lens.push_back(len);
      const auto pages = kv->pages(s.kv_seq);
      const auto n_pages = static_cast<std::size_t>((len + kKvPageSize - 1) / kKvPageSize);
      page_indices.insert(page_indices.end(), pages.begin(), pages.begin() + static_cast<std::ptrdiff_t>(n_pages));
      page_indptr.push_back(static_cast<std::int32_t>(page_indices.size()));
      if (parts[i].wants_logits) {
        logit_rows.push_back(static_cast<std::int32_t>(tokens.size()) - 1);
        logit_part.push_back(i);
      }
    }
    rows_out.assign(parts.size(), {});
    if (tokens.empty()) return ran;
    const auto n_vocab = static_cast<std::size_t>(model->config.n_vocab);
    logits.resize(logit_rows.size() * n_vocab);
    runner->forward(ForwardBatch{tokens, qo_indptr, seq_lens, page_indptr, page_indices, logit_rows}, *kv, logits);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (!ran[i]) continue;
      Seq& s = seqs.at(parts[i].key);
      s.tokens.insert(s.tokens.end(), parts[i].tokens.begin(), parts[i].tokens.end());
      kv->commit(s.kv_seq, s.tokens, static_cast<std::int32_t>(s.tokens.size()));
    }
    for (std::size_t j = 0; j < logit_part.size(); ++j) {
      rows_out[logit_part[j]] = std::span<const float>(logits).subspan(j * n_vocab, n_vocab);
    }
    return ran;
  }
};

DraftModelDrafter::DraftModelDrafter(std::shared_ptr<const Model> draft, const Model& target,
                                     const DraftModelOptions& options)
    : impl_(std::make_unique<Impl>()) {
  if (!draft) throw Error("[engine] no draft model");
  check_draft_vocabulary(*draft, target);
  if (options.n_pages < 1) throw Error(fmt::format("[engine] draft model: n_pages must be >= 1, got {}", options.n_pages));
  if (options.max_batch_tokens < 1) {
    throw Error(fmt::format("[engine] draft model: max_batch_tokens must be >= 1, got {}", options.max_batch_tokens));
  }
  if (options.memory_bytes < 0) {
    throw Error(fmt::format("[engine] draft_memory_bytes must be >= 0, got {}", options.memory_bytes));
  }
  Impl& m = *impl_;
  m.model = std::move(draft);
  m.options = options;
  const std::string what = fmt::format("[engine] the draft model '{}'", m.model->name);
  // What it takes beside the target, against what there is: known before anything is loaded.
  KvCacheConfig kv_config;
  kv_config.n_layer = m.model->config.n_layer;
  kv_config.n_kv_head = m.model->config.n_kv_head;
  kv_config.head_dim = m.model->config.head_dim;
  kv_config.dtype = options.kv_dtype;
  kv_config.n_pages = options.n_pages;
  kv_config.validate();
  const auto weight_bytes = static_cast<std::int64_t>(m.model->weights.bytes());
  const auto kv_bytes = static_cast<std::int64_t>(kv_config.page_bytes()) * options.n_pages;
  m.resident_bytes = weight_bytes + kv_bytes;
  std::int64_t room = options.memory_bytes;
  if (room == 0 && options.device == tensor::Device::cpu) room = host_available_bytes();
  if (room > 0 && m.resident_bytes > room) {
    throw ModelError(fmt::format("{} does not fit beside the target: it needs {:.1f} MiB (weights {:.1f} MiB, KV pool "
                                 "{:.1f} MiB for {} pages), {:.1f} MiB {}",
                                 what, m.resident_bytes / kMiB, weight_bytes / kMiB, kv_bytes / kMiB, options.n_pages,
                                 room / kMiB, options.memory_bytes > 0 ? "allowed" : "free"));
  }
  try {
    std::unique_ptr<Backend> backend = options.device == tensor::Device::cpu ? make_cpu_backend(options.pool)
                                                                               : make_backend(options.device, 0);
    m.runner = std::make_unique<ModelRunner>(m.model, std::move(backend));
    KvCacheConfig config = m.runner->kv_config(options.n_pages, options.kv_dtype);
    m.kv = std::make_unique<KvCache>(m.runner->make_kv_storage(config));
  } catch (const ModelError&) {
    throw;
  } catch (const Error& e) {
    // A device without room for it (the CUDA backend refuses weights or pages past its free memory).
    throw ModelError(fmt::format("{} does not fit beside the target: {}", what, e.what()));
  }
}

DraftModelDrafter::~DraftModelDrafter() = default;

void DraftModelDrafter::propose(std::span<Row> rows) {
  Impl& m = *impl_;
  // Catch up: each row's sequence keeps the longest prefix of its context it holds (a sample's tokens
  // only grow, but a rejected draft or a preemption may leave more), then computes the rest; the last
  // context token is computed again when nothing is left (its logits give the first draft).
  std::vector<std::vector<std::int32_t>> pending(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    Row& row = rows[r];
    row.draft.clear();
    if (row.context.empty() || row.max_tokens < 1) continue;
    auto it = m.seqs.find(row.key);
    Impl::Seq* s = it != m.seqs.end() ? &it->second : &m.fresh(row.key, row.context);
    const auto common = static_cast<std::size_t>(
        std::mismatch(s->tokens.begin(), s->tokens.end(), row.context.begin(), row.context.end()).first -
        s->tokens.begin());
    const std::size_t keep = std::min(common, row.context.size() - 1);
    if (keep < s->tokens.size()) {
      if (!m.kv->truncate(s->kv_seq, static_cast<std::int32_t>(keep))) s = &m.fresh(row.key, row.context);
      else s->tokens.resize(keep);
    }
    pending[r].assign(row.context.begin() + static_cast<std::ptrdiff_t>(s->tokens.size()), row.context.end());
  }
  std::vector<std::size_t> offset(rows.size(), 0);
  std::vector<std::span<const float>> out;
  for (;;) {
    std::vector<Impl::Part> parts;
    std::vector<std::size_t> part_row;
    std::int32_t budget = m.options.max_batch_tokens;
    for (std::size_t r = 0; r < rows.size() && budget > 0; ++r) {
      const std::size_t left = pending[r].size() - offset[r];
      if (left == 0) continue;
      const std::size_t n = std::min<std::size_t>(left, static_cast<std::size_t>(budget));
      parts.push_back({rows[r].key, std::span<const std::int32_t>(pending[r]).subspan(offset[r], n), n == left});
      part_row.push_back(r);
      budget -= static_cast<std::int32_t>(n);
    }
    if (parts.empty()) break;
    const std::vector<bool> ran = m.forward(parts, out);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const std::size_t r = part_row[i];
      if (!ran[i]) {
        pending[r].clear();  // no pages for it: no draft this step
        offset[r] = 0;
        continue;
      }
      offset[r] += parts[i].tokens.size();
      if (parts[i].wants_logits) rows[r].draft.push_back(argmax(out[i]));
    }
  }
  // Draft: one batched pass per token over the rows that want more.
  for (;;) {
    std::vector<Impl::Part> parts;
    std::vector<std::size_t> part_row;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      Row& row = rows[r];
      if (row.draft.empty() || static_cast<std::int32_t>(row.draft.size()) >= row.max_tokens) continue;
      parts.push_back({row.key, std::span<const std::int32_t>(row.draft).last(1), true});
      part_row.push_back(r);
    }
    if (parts.empty()) break;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<bool> ran = m.forward(parts, out);
    m.decode_cost.record(static_cast<std::int32_t>(parts.size()),
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (std::size_t i = 0; i < parts.size(); ++i) {
      Row& row = rows[part_row[i]];
      if (ran[i]) {
        row.draft.push_back(argmax(out[i]));
      } else {
        row.max_tokens = static_cast<std::int32_t>(row.draft.size());  // no pages: the draft so far
      }
    }
  }
}

void DraftModelDrafter::keep(std::uint64_t key, std::int32_t n_keep) {
  Impl& m = *impl_;
  auto it = m.seqs.find(key);
  if (it == m.seqs.end() || n_keep < 0) return;
  Impl::Seq& s = it->second;
  if (static_cast<std::size_t>(n_keep) >= s.tokens.size()) return;
  if (m.kv->truncate(s.kv_seq, n_keep)) {
    s.tokens.resize(static_cast<std::size_t>(n_keep));
  } else {
    m.release(key);  // no page for the copy: it starts again from the prefix cache
  }
}

void DraftModelDrafter::release(std::uint64_t key) { impl_->release(key); }

double DraftModelDrafter::token_seconds(std::int32_t n_rows) const { return impl_->decode_cost.seconds(n_rows); }

std::vector<std::int32_t> DraftModelDrafter::cached_tokens(std::uint64_t key) const {
  auto it = impl_->seqs.find(key);
  return it == impl_->seqs.end() ? std::vector<std::int32_t>{} : it->second.tokens;
}

std::int32_t DraftModelDrafter::pages_in_use() const { return impl_->kv->stats().n_used; }

std::int64_t DraftModelDrafter::resident_bytes() const { return impl_->resident_bytes; }

}  // namespace pie
