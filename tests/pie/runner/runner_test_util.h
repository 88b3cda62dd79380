// Helpers of the runner tests: the committed test models and their transformers goldens, a driver that
// runs steps of several sequences over a KvCache (the loop an engine runs, minus sampling), and a small
// safetensors writer for loader tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "pie/kv_cache.h"
#include "pie/model.h"
#include "pie/runner.h"

namespace pie::testing {

inline std::filesystem::path test_model_dir(const std::string& name) {
  return std::filesystem::path(ORCHARD_RUNNER_TEST_MODELS) / name;
}

inline nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

struct Golden {
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> logit_positions;
  std::vector<std::vector<float>> logits;  // [positions][n_vocab]
  std::vector<std::int32_t> greedy;
};

inline Golden load_golden(const std::string& name) {
  const nlohmann::json j = read_json_file(test_model_dir(name) / "golden.json");
  Golden g;
  g.prompt = j.at("prompt").get<std::vector<std::int32_t>>();
  g.logit_positions = j.at("logit_positions").get<std::vector<std::int32_t>>();
  g.logits = j.at("logits").get<std::vector<std::vector<float>>>();
  g.greedy = j.at("greedy").get<std::vector<std::int32_t>>();
  return g;
}

// max |a - b| / max |b| over all elements: the error relative to the scale of the reference logits (a
// per-element relative error would blow up on logits near zero).
inline double relative_error(std::span<const float> got, std::span<const float> want) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

inline std::int32_t argmax(std::span<const float> row) {
  return static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// One sequence of the driver: its tokens so far (prompt and generated) and how many have K/V cached.
struct Seq {
  SeqId id = -1;
  std::vector<std::int32_t> tokens;
  std::int32_t n_cached = 0;
};

// Runs one forward step in which each (sequence, n) computes its next n uncached tokens, asking for the
// logits of every one of those tokens. Returns the logits per sequence: [n][n_vocab] each.
inline std::vector<std::vector<std::vector<float>>> run_step(ModelRunner& runner, KvCache& kv,
                                                              const std::vector<std::pair<Seq*, std::int32_t>>& work) {
  const std::int32_t n_vocab = runner.model().config.n_vocab;
  std::vector<std::int32_t> tokens, qo{0}, lens, page_indptr{0}, pages, rows;
  for (const auto& [seq, n] : work) {
    const std::int32_t len = seq->n_cached + n;
    EXPECT_TRUE(kv.reserve(seq->id, len)) << "out of KV pages";
    const std::span<const std::int32_t> owned = kv.pages(seq->id);
    const std::int32_t n_pages = (len + kKvPageSize - 1) / kKvPageSize;
    pages.insert(pages.end(), owned.begin(), owned.begin() + n_pages);
    page_indptr.push_back(static_cast<std::int32_t>(pages.size()));
    for (std::int32_t i = 0; i < n; ++i) {
      rows.push_back(static_cast<std::int32_t>(tokens.size()));
      tokens.push_back(seq->tokens[static_cast<std::size_t>(seq->n_cached + i)]);
    }
    qo.push_back(static_cast<std::int32_t>(tokens.size()));
    lens.push_back(len);
  }
  std::vector<float> logits(rows.size() * static_cast<std::size_t>(n_vocab));
  ForwardBatch b{tokens, qo, lens, page_indptr, pages, rows};
  runner.forward(b, kv, logits);
  std::vector<std::vector<std::vector<float>>> out;
  std::size_t row = 0;
  for (const auto& [seq, n] : work) {
    std::vector<std::vector<float>> per;
    for (std::int32_t i = 0; i < n; ++i, ++row) {
      per.emplace_back(logits.begin() + static_cast<std::ptrdiff_t>(row * n_vocab),
                       logits.begin() + static_cast<std::ptrdiff_t>((row + 1) * n_vocab));
    }
    seq->n_cached += n;
    out.push_back(std::move(per));
  }
  return out;
}

inline KvCache make_kv(const ModelRunner& runner, std::int32_t n_pages, tensor::DType dtype = tensor::DType::f32) {
  KvCacheConfig c = runner.kv_config(n_pages, dtype);
  c.prefix_caching = false;
  return KvCache(c);
}

// A probe sequence's logits at every position ([position][n_vocab]), computed in steps of `chunk` tokens
// over `kv` (fresh, 256 pages or more); with `crowd`, each step also carries the next piece of 16 other
// sequences (prompts of 1..90 tokens, chunked by 5, then decode rows), the probe at a different place in the
// batch on different steps: batch invariance holds when the probe's logits are the same bits either way.
inline std::vector<std::vector<float>> run_probe(ModelRunner& runner, KvCache& kv, const std::vector<std::int32_t>& tokens,
                                                 std::int32_t chunk, bool crowd) {
  Seq probe;
  probe.id = kv.create();
  probe.tokens = tokens;
  std::vector<Seq> others;
  std::mt19937 rng(99);
  const std::int32_t n_vocab = runner.model().config.n_vocab;
  if (crowd) {
    for (int i = 0; i < 16; ++i) {
      Seq s;
      s.id = kv.create();
      const int len = 1 + static_cast<int>(rng() % 90);
      for (int t = 0; t < len + 40; ++t) s.tokens.push_back(static_cast<std::int32_t>(rng() % n_vocab));
      s.n_cached = 0;
      others.push_back(std::move(s));
    }
  }
  std::vector<std::vector<float>> out;
  while (probe.n_cached < static_cast<std::int32_t>(tokens.size())) {
    const std::int32_t n = std::min<std::int32_t>(chunk, static_cast<std::int32_t>(tokens.size()) - probe.n_cached);
    std::vector<std::pair<Seq*, std::int32_t>> work;
    const std::size_t at = others.empty() ? 0 : out.size() % (others.size() + 1);
    for (std::size_t i = 0; i < others.size(); ++i) {
      if (i == at) work.emplace_back(&probe, n);
      Seq& s = others[i];
      const std::int32_t left = static_cast<std::int32_t>(s.tokens.size()) - s.n_cached;
      if (left > 0) work.emplace_back(&s, std::min<std::int32_t>(left, s.n_cached < 40 ? 5 : 1));
    }
    if (at >= others.size()) work.emplace_back(&probe, n);
    auto logits = run_step(runner, kv, work);
    for (std::size_t i = 0; i < work.size(); ++i) {
      if (work[i].first == &probe) out.insert(out.end(), logits[i].begin(), logits[i].end());
    }
  }
  return out;
}

// Greedy decoding of n tokens after `prompt` (one prefill of the whole prompt, then decode rows).
inline std::vector<std::int32_t> greedy(ModelRunner& runner, KvCache& kv, const std::vector<std::int32_t>& prompt,
                                        std::int32_t n) {
  Seq s;
  s.id = kv.create();
  s.tokens = prompt;
  std::vector<std::int32_t> out;
  auto logits = run_step(runner, kv, {{&s, static_cast<std::int32_t>(prompt.size())}});
  for (std::int32_t i = 0; i < n; ++i) {
    const std::int32_t next = argmax(logits[0].back());
    out.push_back(next);
    if (i + 1 == n) break;
    s.tokens.push_back(next);
    logits = run_step(runner, kv, {{&s, 1}});
  }
  kv.release(s.id);
  return out;
}

// A safetensors file from named tensors (dtype "F32" / "F16" / "BF16", shape, raw bytes).
struct StTensor {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
};

inline void write_safetensors(const std::filesystem::path& path, const std::map<std::string, StTensor>& tensors,
                              std::size_t pad_to = 8) {
  nlohmann::json header = nlohmann::json::object();
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while ((text.size() + 8) % pad_to != 0) text.push_back(' ');
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << text;
  for (const auto& [name, t] : tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

// Reads a safetensors file back into named tensors (for rewriting test models).
inline std::map<std::string, StTensor> read_safetensors(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::uint8_t> all((std::istreambuf_iterator<char>(in)), {});
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | all[static_cast<std::size_t>(i)];
  const nlohmann::json header = nlohmann::json::parse(all.begin() + 8, all.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  std::map<std::string, StTensor> out;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    StTensor t;
    t.dtype = e.at("dtype").get<std::string>();
    t.shape = e.at("shape").get<std::vector<std::int64_t>>();
    const auto b = e.at("data_offsets")[0].get<std::size_t>(), end = e.at("data_offsets")[1].get<std::size_t>();
    t.bytes.assign(all.begin() + static_cast<std::ptrdiff_t>(8 + n + b), all.begin() + static_cast<std::ptrdiff_t>(8 + n + end));
    out.emplace(name, std::move(t));
  }
  return out;
}

// A fresh temporary folder, removed with the object.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() /
           ("orchard-runner-" + tag + "-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  // Copies a test model's config.json and model.safetensors here.
  void copy_model(const std::string& name) const {
    for (const char* f : {"config.json", "model.safetensors"}) {
      std::filesystem::copy_file(test_model_dir(name) / f, path / f,
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
  void write(const std::string& file, const std::string& text) const {
    std::ofstream out(path / file, std::ios::binary);
    out << text;
  }
};

}  // namespace pie::testing
