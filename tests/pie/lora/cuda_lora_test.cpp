// LoRA on the CUDA backend (pie/src/backend/cuda/cuda_lora.*): the shrink and expand kernels against the
// CPU kernels' references on random inputs (ranks 1 to 256, two adapters of different ranks, a row in both,
// rows in neither, shrunk outputs poisoned with NaN); whole models with the committed PEFT adapters (llama,
// qwen2) on CUDA against the CPU backend within the CUDA tolerance of the engine (1e-2 absolute) in one
// batch mixing three adapters, a stack and none; rows without adapters bit-identical to the base on CUDA;
// after release the base logits exactly; residency least-recently-used first under a byte budget; the
// engine on CUDA (attach places the adapter): greedy outputs with adapters equal the merged models', requests
// of different adapters at once equal each alone (submitted together, and two of them submitted while the
// third decodes), detach refuses the name and leaves the base's outputs.
// Every test skips with the reason where CUDA cannot be used.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include "require_gpu.h"
#include "cuda_lora.h"
#include "kernels/lora.h"
#include "lora_test_util.h"
#include "pie/backend.h"
#include "pie/engine.h"
#include "pie/lora.h"
#include "pie/runner.h"
#include "runner_test_util.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/memory_pool.h"
#include "tensor/cuda/stream.h"

namespace pie::testing {
namespace {

namespace tc = tensor::cuda;

// The committed models and adapters; the environment's ORCHARD_RUNNER_TEST_MODELS and
// ORCHARD_LORA_TEST_ADAPTERS override the build's paths (a copy of the tree on a GPU machine).
std::filesystem::path models_dir(const std::string& name) {
  const char* env = std::getenv("ORCHARD_RUNNER_TEST_MODELS");
  return env != nullptr ? std::filesystem::path(env) / name : test_model_dir(name);
}
std::filesystem::path adapters_dir(const std::string& model, const std::string& adapter) {
  const char* env = std::getenv("ORCHARD_LORA_TEST_ADAPTERS");
  return std::filesystem::path(env != nullptr ? env : ORCHARD_LORA_TEST_ADAPTERS) / model / adapter;
}

std::vector<float> random_floats(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

template <typename T>
tc::DeviceBuffer device_copy(const std::vector<T>& host) {
  tc::DeviceBuffer b = tc::MemoryPool::global().allocate(std::max<std::size_t>(host.size() * sizeof(T), 16));
  if (!host.empty()) b.copy_from_host(host.data(), host.size() * sizeof(T));
  return b;
}

template <typename T>
std::vector<T> to_host(const tc::DeviceBuffer& b, std::size_t n) {
  std::vector<T> v(n);
  b.copy_to_host(v.data(), n * sizeof(T));
  return v;
}

TEST(CudaLoraKernels, ShrinkAndExpandMatchTheCpuReferences) {
  REQUIRE_GPU();
  tc::make_current(0);
  tc::Stream stream;
  std::mt19937 rng(7);
  constexpr std::int32_t kRows = 7, kSlot = 2, kSlots = 3;
  // Group 0 on rows 0, 2, 5; group 1 on rows 2, 3, 6 (row 2 in both: stacked); rows 1 and 4 in neither.
  const std::vector<std::vector<std::int32_t>> group_rows = {{0, 2, 5}, {2, 3, 6}};
  const float group_scale[2] = {0.5f, -1.25f};
  for (std::int32_t rank : {1, 6, 16, 256}) {
    for (auto [n_in, n_out] : {std::pair{300, 1024}, {512, 300}}) {
      SCOPED_TRACE("rank " + std::to_string(rank) + " n_in " + std::to_string(n_in) + " n_out " + std::to_string(n_out));
      const std::int32_t ranks[2] = {rank, std::max(1, rank / 2 + 1)};
      const float pair_scale[2] = {2.0f, 0.25f};
      std::vector<float> a[2], b[2];
      std::vector<tc::DeviceBuffer> keep;
      std::vector<cuda::LoraPairDesc> descs[2];
      std::vector<tc::DeviceBuffer> desc_bufs;
      std::vector<cuda::LoraGroupDesc> groups;
      for (int g = 0; g < 2; ++g) {
        a[g] = random_floats(static_cast<std::size_t>(ranks[g] * n_in), rng, 0.1f);
        b[g] = random_floats(static_cast<std::size_t>(n_out * ranks[g]), rng, 0.1f);
        keep.push_back(device_copy(a[g]));
        keep.push_back(device_copy(b[g]));
        descs[g].resize(kSlots);
        descs[g][kSlot] = {keep[keep.size() - 2].as<const float>(), keep.back().as<const float>(), ranks[g], pair_scale[g]};
        desc_bufs.push_back(device_copy(descs[g]));
        groups.push_back({desc_bufs.back().as<const cuda::LoraPairDesc>(), group_scale[g], 0});
      }
      std::vector<std::int32_t> entry_group, entry_row;
      for (int g = 0; g < 2; ++g) {
        for (std::int32_t r : group_rows[static_cast<std::size_t>(g)]) {
          entry_group.push_back(g);
          entry_row.push_back(r);
        }
      }
      const auto n_entries = static_cast<std::int32_t>(entry_group.size());
      std::vector<std::int32_t> row_ptr{0}, row_entries;
      for (std::int32_t r = 0; r < kRows; ++r) {
        for (std::int32_t e = 0; e < n_entries; ++e) {
          if (entry_row[static_cast<std::size_t>(e)] == r) row_entries.push_back(e);
        }
        row_ptr.push_back(static_cast<std::int32_t>(row_entries.size()));
      }
      const std::vector<float> x = random_floats(static_cast<std::size_t>(kRows * n_in), rng);
      const std::vector<float> y0 = random_floats(static_cast<std::size_t>(kRows * n_out), rng);
      auto dx = device_copy(x);
      auto dy = device_copy(y0);
      auto dgroups = device_copy(groups);
      auto deg = device_copy(entry_group), der = device_copy(entry_row), drp = device_copy(row_ptr),
           dre = device_copy(row_entries);
      tc::DeviceBuffer dt = tc::MemoryPool::global().allocate(static_cast<std::size_t>(n_entries) * cuda::kLoraTStride * 4);
      dt.fill_bytes(0xFF);  // NaN
      cuda::launch_lora_shrink(dx.as<const float>(), n_in, deg.as<const std::int32_t>(), der.as<const std::int32_t>(),
                               n_entries, std::max(ranks[0], ranks[1]), dgroups.as<const cuda::LoraGroupDesc>(), kSlot,
                               dt.as<float>(), &stream);
      cuda::launch_lora_expand(dt.as<const float>(), drp.as<const std::int32_t>(), dre.as<const std::int32_t>(),
                               deg.as<const std::int32_t>(), kRows, dgroups.as<const cuda::LoraGroupDesc>(), kSlot, n_out,
                               dy.as<float>(), &stream);
      stream.synchronize();
      const auto t = to_host<float>(dt, static_cast<std::size_t>(n_entries) * cuda::kLoraTStride);
      const auto y = to_host<float>(dy, y0.size());
      // The references: kernels::lora_shrink_ref per group, then lora_expand_ref in group order.
      std::vector<float> y_ref = y0;
      std::int32_t e0 = 0;
      for (int g = 0; g < 2; ++g) {
        const auto& rows = group_rows[static_cast<std::size_t>(g)];
        const auto n = static_cast<std::int64_t>(rows.size());
        std::vector<float> t_ref(static_cast<std::size_t>(n * ranks[g]));
        kernels::lora_shrink_ref({n_in, ranks[g], a[g].data(), x.data(), n_in, {rows.data(), n, kRows}}, t_ref.data());
        for (std::int64_t i = 0; i < n; ++i) {
          for (std::int32_t k = 0; k < ranks[g]; ++k) {
            const float got = t[static_cast<std::size_t>((e0 + i) * cuda::kLoraTStride + k)];
            const float want = t_ref[static_cast<std::size_t>(i * ranks[g] + k)];
            ASSERT_NEAR(got, want, 1e-4 * (1 + std::fabs(want))) << "shrink group " << g << " row " << i << " rank " << k;
          }
        }
        kernels::lora_expand_ref({n_out, ranks[g], b[g].data(), t_ref.data(), group_scale[g] * pair_scale[g], 0, n_out,
                                  y_ref.data(), n_out, {rows.data(), n, kRows}});
        e0 += static_cast<std::int32_t>(n);
      }
      for (std::int32_t r = 0; r < kRows; ++r) {
        for (std::int32_t j = 0; j < n_out; ++j) {
          const std::size_t i = static_cast<std::size_t>(r * n_out + j);
          if (r == 1 || r == 4) {
            ASSERT_EQ(y[i], y0[i]) << "row " << r << " has no adapter";
          } else {
            ASSERT_NEAR(y[i], y_ref[i], 1e-4 * (1 + std::fabs(y_ref[i]))) << "expand row " << r << " column " << j;
          }
        }
      }
    }
  }
}

// One step of sequences each running `prompt` under its adapters; the logits of every prompt position.
std::vector<std::vector<float>> forward(ModelRunner& runner, KvCache& kv, const std::vector<std::int32_t>& prompt,
                                        const std::vector<std::vector<ScaledLora>>& per_seq) {
  const auto n = static_cast<std::int32_t>(prompt.size());
  std::vector<std::int32_t> tokens, qo{0}, lens, page_indptr{0}, pages, rows;
  std::vector<LoraGroup> groups;
  std::vector<SeqId> ids;
  for (const auto& adapters : per_seq) {
    const SeqId id = kv.create();
    ids.push_back(id);
    EXPECT_TRUE(kv.reserve(id, n));
    const auto owned = kv.pages(id);
    pages.insert(pages.end(), owned.begin(), owned.end());
    page_indptr.push_back(static_cast<std::int32_t>(pages.size()));
    const auto first = static_cast<std::int32_t>(tokens.size());
    for (const ScaledLora& s : adapters) {
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const LoraGroup& g) { return g.adapter == s.adapter.get() && g.scale == s.scale; });
      if (it == groups.end()) it = groups.insert(groups.end(), LoraGroup{s.adapter.get(), s.scale, {}, {}});
      for (std::int32_t i = 0; i < n; ++i) {
        it->rows.push_back(first + i);
        it->logit_rows.push_back(first + i);
      }
    }
    tokens.insert(tokens.end(), prompt.begin(), prompt.end());
    for (std::int32_t i = 0; i < n; ++i) rows.push_back(first + i);
    qo.push_back(static_cast<std::int32_t>(tokens.size()));
    lens.push_back(n);
  }
  const std::int32_t n_vocab = runner.model().config.n_vocab;
  std::vector<float> logits(rows.size() * static_cast<std::size_t>(n_vocab));
  runner.forward(ForwardBatch{tokens, qo, lens, page_indptr, pages, rows, groups}, kv, logits);
  for (SeqId id : ids) kv.release(id);
  std::vector<std::vector<float>> out;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    out.emplace_back(logits.begin() + static_cast<std::ptrdiff_t>(r * n_vocab),
                     logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * n_vocab));
  }
  return out;
}

KvCache f16_kv(ModelRunner& runner) {
  KvCacheConfig c = runner.kv_config(128, tensor::DType::f16);
  c.prefix_caching = false;
  return KvCache(runner.make_kv_storage(c));
}

class CudaLoraModels : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaLoraModels, MixedBatchMatchesTheCpuBackendAndReleaseGivesTheBase) {
  REQUIRE_GPU();
  const auto model = load_hf_model(models_dir(GetParam()));
  std::map<std::string, std::shared_ptr<const LoraAdapter>> a;
  for (const char* name : {"a", "b", "c"}) a[name] = load_lora_adapter(adapters_dir(GetParam(), name), *model);
  const std::vector<std::int32_t> prompt = {1, 17, 42, 99, 5, 230, 64, 12, 7, 150, 33, 201};
  // Three adapters, a stack of two with different scales, and none, in one batch.
  const std::vector<std::vector<ScaledLora>> batch = {
      {{a["c"], 1.0f}}, {}, {{a["a"], 1.0f}}, {{a["a"], 0.5f}, {a["b"], 1.5f}}, {{a["b"], 1.0f}}};
  ModelRunner gpu(model, make_cuda_backend());
  ModelRunner cpu(model, make_cpu_backend(0));
  KvCache gkv = f16_kv(gpu), ckv = f16_kv(cpu);
  const auto base_before = forward(gpu, gkv, prompt, {{}});
  for (const auto& [name, adapter] : a) gpu.backend().prepare_lora(*adapter);
  const auto g = forward(gpu, gkv, prompt, batch);
  const auto c = forward(cpu, ckv, prompt, batch);
  ASSERT_EQ(g.size(), c.size());
  double max_abs = 0, max_effect = 0;
  for (std::size_t r = 0; r < g.size(); ++r) {
    for (std::size_t i = 0; i < g[r].size(); ++i) {
      ASSERT_TRUE(std::isfinite(g[r][i])) << "row " << r << " logit " << i;
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(g[r][i] - c[r][i])));
    }
  }
  EXPECT_LE(max_abs, 1e-2);
  std::printf("%s: max |cuda - cpu| over the mixed batch's logits %.3g\n", GetParam(), max_abs);
  const std::size_t n = prompt.size();
  // The adapters move the logits far beyond the tolerance (a LoRA path doing nothing would fail above),
  // and the row without one is the base's, bit for bit.
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < g[r].size(); ++i) max_effect = std::max(max_effect, static_cast<double>(std::fabs(g[r][i] - g[n + r][i])));
    EXPECT_EQ(g[n + r], base_before[r]) << "position " << r;
  }
  EXPECT_GT(max_effect, 10 * 1e-2);
  for (const auto& [name, adapter] : a) gpu.backend().release_lora(*adapter);
  EXPECT_EQ(forward(gpu, gkv, prompt, {{}}), base_before);
  // Released adapters are placed again when a step names them.
  EXPECT_EQ(forward(gpu, gkv, prompt, {batch[0]}), std::vector<std::vector<float>>(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(n)));
}

INSTANTIATE_TEST_SUITE_P(Models, CudaLoraModels, ::testing::Values("llama", "qwen2"));

TEST(CudaLoraResidency, LeastRecentlyUsedEvictedPastTheBudget) {
  REQUIRE_GPU();
  const auto model = load_hf_model(models_dir("llama"));
  // One adapter fitted three times: three distinct adapters to the backend, of one size.
  std::vector<std::shared_ptr<const LoraAdapter>> a;
  for (int i = 0; i < 3; ++i) a.push_back(load_lora_adapter(adapters_dir("llama", "a"), *model));
  tc::make_current(0);
  tc::Stream stream;
  // Room for two of the three: an adapter takes its A and B on the device, each padded to 16 bytes.
  auto device_bytes = [](const LoraAdapter& x) {
    std::size_t n = 0;
    for (const LoraPair& p : x.pairs) n += ((p.a.size() + 3) / 4 + (p.b.size() + 3) / 4) * 16;
    return n;
  };
  const std::size_t biggest = device_bytes(*a[0]);
  cuda::CudaLora lora(0, &stream, 2 * biggest + 4096);
  lora.prepare(*a[0]);
  lora.prepare(*a[1]);
  EXPECT_TRUE(lora.resident(*a[0]) && lora.resident(*a[1]));
  lora.prepare(*a[2]);  // evicts a[0], the least recently placed
  EXPECT_FALSE(lora.resident(*a[0]));
  EXPECT_TRUE(lora.resident(*a[1]) && lora.resident(*a[2]));
  EXPECT_EQ(lora.resident_adapters(), 2u);
  EXPECT_LE(lora.resident_bytes(), 2 * biggest + 4096);
  lora.release(*a[2]);
  EXPECT_FALSE(lora.resident(*a[2]));
  EXPECT_EQ(lora.resident_adapters(), 1u);
  // An adapter not fitted to a model is refused by name.
  LoraAdapter unfitted;
  unfitted.name = "loose";
  try {
    lora.prepare(unfitted);
    ADD_FAILURE() << "an unfitted adapter was placed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loose"), std::string::npos) << e.what();
  }
  // Nor a rank past 256 (the readers refuse one; an adapter built in memory is checked here).
  auto wide = std::make_shared<LoraAdapter>();
  wide->name = "wide";
  const Weight& wq = model->weights.layers[0].wq;
  LoraPair p{ProjectionSite::q, 0, 300, n_in(wq), n_out(wq), 1.0f, {}, {}};
  p.a.assign(static_cast<std::size_t>(p.rank * p.n_in), 0.0f);
  p.b.assign(static_cast<std::size_t>(p.n_out * p.rank), 0.0f);
  wide->pairs.push_back(std::move(p));
  fit_lora_adapter(*wide, *model);
  try {
    lora.prepare(*wide);
    ADD_FAILURE() << "a rank-300 adapter was placed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 300"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(lora.resident(*wide));
}

std::shared_ptr<RequestStream> submit_greedy(Engine& engine, const std::vector<std::int32_t>& prompt,
                                             std::vector<LoraRequest> loras) {
  GenerateRequest r;
  r.prompt = prompt;
  r.max_tokens = 12;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  r.loras = std::move(loras);
  return engine.submit(std::move(r));
}

// The tokens of a stream's events from here to its end (or only its next event's).
std::vector<std::int32_t> tokens_of(RequestStream& stream, bool next_only = false) {
  std::vector<std::int32_t> tokens;
  while (auto e = stream.next()) {
    tokens.insert(tokens.end(), e->tokens.begin(), e->tokens.end());
    EXPECT_NE(e->finish, FinishReason::error) << e->error;
    if (next_only) break;
  }
  return tokens;
}

std::vector<std::int32_t> greedy(Engine& engine, const std::vector<std::int32_t>& prompt,
                                 std::vector<LoraRequest> loras) {
  return tokens_of(*submit_greedy(engine, prompt, std::move(loras)));
}

TEST(CudaLoraEngine, AdapterOutputsEqualTheMergedModelsAndDetachGivesTheBase) {
  REQUIRE_GPU();
  TempDir dir("cuda-lora-engine");
  const auto model = load_model_with_tokenizer("llama", dir);
  const std::vector<std::int32_t> prompt = load_lora_golden("llama").prompt;
  EngineOptions o;
  o.device = DeviceRequest::cuda;
  o.context_length = 128;
  Engine engine(model, o);
  ASSERT_EQ(engine.device().device, tensor::Device::cuda);
  engine.attach_lora("a", adapters_dir("llama", "a"));
  engine.attach_lora("b", adapters_dir("llama", "b"));
  const auto base = greedy(engine, prompt, {});
  const auto with_a = greedy(engine, prompt, {{"a", 1.0f}});
  const auto stacked = greedy(engine, prompt, {{"a", 0.5f}, {"b", 1.5f}});
  EXPECT_NE(with_a, base);
  EXPECT_NE(stacked, with_a);
  const auto a = load_lora_adapter(adapters_dir("llama", "a"), *model);
  const auto b = load_lora_adapter(adapters_dir("llama", "b"), *model);
  Engine merged_a(merge_lora_adapters(model, {{a, 1.0f}}), o);
  EXPECT_EQ(greedy(merged_a, prompt, {}), with_a);
  Engine merged_ab(merge_lora_adapters(model, {{a, 0.5f}, {b, 1.5f}}), o);
  EXPECT_EQ(greedy(merged_ab, prompt, {}), stacked);
  // Requests of an adapter, a stack and none at once give what each gives alone. Which steps they share
  // depends on timing: submitted together, and then with the adapter's request already decoding while the
  // other two prefill (steps of decode rows and prefill chunks, the request's rows not the first of their
  // attention group: the generic attention kernel once gave them the first rows' positions there).
  const std::vector<std::vector<LoraRequest>> sets = {{{"a", 1.0f}}, {}, {{"a", 0.5f}, {"b", 1.5f}}};
  std::vector<std::vector<std::int32_t>> together(3);
  {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < sets.size(); ++i) {
      threads.emplace_back([&, i] { together[i] = greedy(engine, prompt, sets[i]); });
    }
    for (std::thread& t : threads) t.join();
  }
  EXPECT_EQ(together[0], with_a);
  EXPECT_EQ(together[1], base);
  EXPECT_EQ(together[2], stacked);
  std::vector<std::vector<std::int32_t>> staggered(3);
  {
    auto first = submit_greedy(engine, prompt, sets[0]);
    staggered[0] = tokens_of(*first, true);  // its first token: it decodes from now on
    std::vector<std::shared_ptr<RequestStream>> later = {submit_greedy(engine, prompt, sets[1]),
                                                         submit_greedy(engine, prompt, sets[2])};
    const std::vector<std::int32_t> rest = tokens_of(*first);
    staggered[0].insert(staggered[0].end(), rest.begin(), rest.end());
    staggered[1] = tokens_of(*later[0]);
    staggered[2] = tokens_of(*later[1]);
  }
  EXPECT_EQ(staggered[0], with_a);
  EXPECT_EQ(staggered[1], base);
  EXPECT_EQ(staggered[2], stacked);
  // Detached: a request naming it is refused; the base gives its own outputs.
  engine.detach_lora("a");
  EXPECT_THROW(greedy(engine, prompt, {{"a", 1.0f}}), LoraNotFoundError);
  EXPECT_EQ(greedy(engine, prompt, {}), base);
  EXPECT_EQ(greedy(engine, prompt, {{"b", 1.0f}}).size(), 12u);
}

}  // namespace
}  // namespace pie::testing
