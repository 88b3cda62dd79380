// The server's models (server/model_registry.h) over a store holding the random-weight model as a
// GGUF under two names: loading on the first request, keep_alive (0, a time, never; Ollama's
// durations), the limits (a number of models, a memory budget) unloading the least recently used
// idle model and refusing (503) when every loaded one is busy, unload() with requests running, a
// model that cannot be loaded (500), an unknown one (404 naming it); an embedding model beside them.
#include "server/model_registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include <unistd.h>

#include "embedding_model.h"
#include "pie/embedding.h"
#include "pie/embedding_convert.h"
#include "pie/engine.h"
#include "pie/lora.h"
#include "pie/model.h"
#include "pie/modelfile.h"
#include "server/api_error.h"

namespace pie::server {
namespace {

namespace fs = std::filesystem;

EngineOptions small_engine() {
  EngineOptions o;
  o.n_threads = 1;
  o.max_running = 2;
  o.context_length = 128;
  return o;
}

class ModelRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("orchard_registry_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    ConvertOptions convert;
    convert.type = tensor::DType::q8_0;
    write_gguf_model(*random_model(), root_ / "tiny.gguf", convert);
    ModelStore store(root_ / "models");
    store.import_file(root_ / "tiny.gguf", "a");
    store.import_file(root_ / "tiny.gguf", "b");
    size_ = fs::file_size(root_ / "tiny.gguf");
  }
  void TearDown() override { fs::remove_all(root_); }

  std::unique_ptr<ModelRegistry> make(std::size_t max_loaded = 0, std::uint64_t budget = 0,
                                      double keep_alive = 300) {
    auto engine = std::make_shared<Engine>(random_model(), small_engine());
    auto first = std::make_shared<ServedModel>(engine, "first");
    RegistryOptions options;
    options.store_root = root_ / "models";
    options.engine = small_engine();
    options.keep_alive_seconds = keep_alive;
    options.max_loaded = max_loaded;
    options.memory_budget = budget;
    return std::make_unique<ModelRegistry>(first, options);
  }
  static std::set<std::string> loaded(const ModelRegistry& r) {
    std::set<std::string> out;
    for (const LoadedModelInfo& m : r.loaded()) out.insert(m.name);
    return out;
  }
  static int status_of(const std::function<void()>& f, std::string* message = nullptr) {
    try {
      f();
    } catch (const ApiError& e) {
      if (message) *message = e.what();
      return e.status();
    }
    return 0;
  }

  fs::path root_;
  std::uint64_t size_ = 0;
};

TEST(KeepAlive, ParsesOllamaDurations) {
  using J = nlohmann::ordered_json;
  EXPECT_DOUBLE_EQ(ModelRegistry::parse_keep_alive(J(30), "k"), 30);
  EXPECT_DOUBLE_EQ(ModelRegistry::parse_keep_alive(J(-1), "k"), -1);
  EXPECT_DOUBLE_EQ(ModelRegistry::parse_keep_alive(J("5m"), "k"), 300);
  EXPECT_DOUBLE_EQ(ModelRegistry::parse_keep_alive(J("1h30m"), "k"), 5400);
  EXPECT_DOUBLE_EQ(ModelRegistry::parse_keep_alive(J("1.5s"), "k"), 1.5);
  EXPECT_DOUBLE_EQ(ModelRegistry::parse_keep_alive(J("300ms"), "k"), 0.3);
  EXPECT_DOUBLE_EQ(ModelRegistry::parse_keep_alive(J("-1"), "k"), -1);
  EXPECT_DOUBLE_EQ(ModelRegistry::parse_keep_alive(J("-5m"), "k"), -300);
  EXPECT_DOUBLE_EQ(ModelRegistry::parse_keep_alive(J("0"), "k"), 0);
  for (const J& bad :
       {J("soon"), J(""), J("5x"), J("m"), J("5m3"), J("--1"), J(true), J::array()}) {
    try {
      ModelRegistry::parse_keep_alive(bad, "keep_alive");
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), "keep_alive");
    }
  }
}

TEST_F(ModelRegistryTest, LoadsOnFirstRequestAndNamesTheUnknown) {
  auto r = make();
  EXPECT_EQ(loaded(*r), (std::set<std::string>{"first"}));
  {
    auto lease = r->acquire("a", true);
    EXPECT_EQ(lease->model().name(), "a:latest");
    ASSERT_TRUE(lease->stored());
    EXPECT_EQ(lease->stored()->size, size_);
  }
  EXPECT_EQ(loaded(*r), (std::set<std::string>{"first", "a:latest"}));
  EXPECT_EQ(r->acquire("default", false)->model().name(), "first");
  std::string message;
  EXPECT_EQ(status_of([&] { r->acquire("nope:7b", true); }, &message), 404);
  EXPECT_EQ(message, "model 'nope:7b' not found");
  EXPECT_EQ(status_of([&] { r->acquire("Not A Name", false); }, &message), 404);
  EXPECT_NE(message.find("'Not A Name'"), std::string::npos);
  const std::vector<std::string> names = r->names();
  EXPECT_EQ(names, (std::vector<std::string>{"first", "a:latest", "b:latest"}));
}

TEST_F(ModelRegistryTest, KeepAliveZeroUnloadsWhenDone) {
  auto r = make();
  auto one = r->acquire("a", true, 0.0);
  auto two = r->acquire("a", true);
  one.reset();
  EXPECT_TRUE(loaded(*r).contains("a:latest"));  // a request still runs on it
  two.reset();
  EXPECT_TRUE(loaded(*r).contains("a:latest"));  // the last release's keep_alive (the default) wins
  r->acquire("a", true, 0.0).reset();
  EXPECT_FALSE(loaded(*r).contains("a:latest"));
  r->acquire("a", true, -1.0).reset();
  bool forever = false;
  for (const LoadedModelInfo& m : r->loaded()) forever |= m.name == "a:latest" && !m.expires;
  EXPECT_TRUE(forever);
}

TEST_F(ModelRegistryTest, ExpiresAfterKeepAlive) {
  auto r = make(0, 0, 0.2);
  r->acquire("a", true).reset();
  EXPECT_TRUE(loaded(*r).contains("a:latest"));
  for (int i = 0; i < 100 && loaded(*r).contains("a:latest"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(loaded(*r).contains("a:latest"));
}

TEST_F(ModelRegistryTest, LimitsUnloadTheLeastRecentlyUsedIdleModel) {
  auto r = make(/*max_loaded=*/2);
  auto held = r->acquire("a", true);
  std::string message;
  EXPECT_EQ(status_of([&] { r->acquire("b", true); }, &message), 503);  // 'a' is busy: no room
  EXPECT_NE(message.find("no room to load 'b:latest'"), std::string::npos) << message;
  held.reset();
  r->acquire("b", true).reset();
  EXPECT_EQ(loaded(*r), (std::set<std::string>{"first", "b:latest"}));
  // A budget of the first model's KV pool (it has no file) and one stored model's file and pool,
  // and some: loading another unloads the idle one.
  const auto kv =
      static_cast<std::uint64_t>(Engine(random_model(), small_engine()).options().kv_cache_bytes);
  auto budgeted = make(0, kv + (size_ + kv) + size_ / 2);
  budgeted->acquire("a", true).reset();
  budgeted->acquire("b", true).reset();
  EXPECT_EQ(loaded(*budgeted), (std::set<std::string>{"first", "b:latest"}));
}

TEST_F(ModelRegistryTest, UnloadWaitsForRunningRequests) {
  auto r = make();
  auto held = r->acquire("a", true);
  EXPECT_TRUE(r->unload("a"));
  EXPECT_TRUE(loaded(*r).contains("a:latest"));
  held.reset();
  EXPECT_FALSE(loaded(*r).contains("a:latest"));
  EXPECT_FALSE(r->unload("a"));      // not loaded
  EXPECT_FALSE(r->unload("first"));  // never
}

TEST_F(ModelRegistryTest, ConcurrentFirstRequestsShareOneLoad) {
  auto r = make();
  std::vector<std::thread> threads;
  std::vector<const ServedModel*> got(6);
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      auto lease = r->acquire(i % 2 ? "a" : "b:latest", true);
      got[i] = &lease->model();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(got[1], got[3]);
  EXPECT_EQ(got[0], got[2]);
  EXPECT_NE(got[0], got[1]);
}

TEST_F(ModelRegistryTest, AModelThatCannotLoadIs500) {
  auto r = make();
  const StoredModel a = ModelStore(root_ / "models").find("a");
  fs::resize_file(a.file, 1000);  // truncated (both names share the blob)
  std::string message;
  EXPECT_EQ(status_of([&] { r->acquire("a", true); }, &message), 500);
  EXPECT_NE(message.find("cannot load 'a:latest'"), std::string::npos) << message;
  EXPECT_EQ(loaded(*r), (std::set<std::string>{"first"}));
}

// A rank-4 adapter on every q projection of `model`, large enough to change greedy outputs.
std::shared_ptr<LoraAdapter> random_adapter(const Model& model) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto adapter = std::make_shared<LoraAdapter>();
  adapter->name = "random";
  adapter->alpha = 8;
  for (std::int32_t layer = 0; layer < model.config.n_layer; ++layer) {
    const Weight& w = model.weights.layers[static_cast<std::size_t>(layer)].wq;
    LoraPair p;
    p.site = ProjectionSite::q;
    p.layer = layer;
    p.rank = 4;
    p.n_in = n_in(w);
    p.n_out = n_out(w);
    p.scale = 2;
    p.a.resize(static_cast<std::size_t>(p.rank * p.n_in));
    p.b.resize(static_cast<std::size_t>(p.n_out * p.rank));
    for (float& x : p.a) x = normal(rng) / std::sqrt(static_cast<float>(p.n_in));
    for (float& x : p.b) x = normal(rng);
    adapter->pairs.push_back(std::move(p));
  }
  return adapter;
}

std::vector<std::int32_t> greedy(Engine& engine, std::vector<LoraRequest> loras) {
  GenerateRequest request;
  request.prompt = {1, 2, 3, 4};
  request.sampling.temperature = 0;
  request.max_tokens = 8;
  request.ignore_eos = true;
  request.loras = std::move(loras);
  auto stream = engine.submit(std::move(request));
  std::vector<std::int32_t> out;
  while (auto event = stream->next()) {
    EXPECT_TRUE(event->error.empty()) << event->error;
    out.insert(out.end(), event->tokens.begin(), event->tokens.end());
  }
  return out;
}

TEST_F(ModelRegistryTest, ModelfileAdaptersApplyToItsRequests) {
  const auto base = random_model();
  write_gguf_adapter(*random_adapter(*base), *base, root_ / "adapter.gguf");
  ModelStore store(root_ / "models");
  create_model(store, "adapted", parse_modelfile("FROM a\nADAPTER adapter.gguf\n"), root_);
  auto r = make();
  auto lease = r->acquire("adapted", true);
  ASSERT_EQ(lease->adapters().size(), 1u);
  EXPECT_EQ(lease->model().engine().loras().size(), 1u);
  EXPECT_NE(greedy(lease->model().engine(), lease->adapters()),
            greedy(lease->model().engine(), {}));
  EXPECT_TRUE(r->acquire("a", true)->adapters().empty());
  // An ADAPTER that is no adapter: the model cannot load.
  std::ofstream(root_ / "junk.gguf") << "not an adapter";
  create_model(store, "broken", parse_modelfile("FROM a\nADAPTER junk.gguf\n"), root_);
  std::string message;
  EXPECT_EQ(status_of([&] { r->acquire("broken", true); }, &message), 500);
  EXPECT_NE(message.find("cannot load 'broken:latest'"), std::string::npos) << message;
}

// An embedding model in the store (all-MiniLM-L6-v2 written as llama.cpp's bert GGUF; skipped when
// absent) beside a generative one: each embeds by name, the encoder from its own Embedder (the
// vectors its file gives), the generative model from its hidden states; the encoder asked to
// generate is a 400 naming it, loaded or not; it counts against the limits and keep_alive as an
// engine does; a corrupt blob is a 500 naming it.
class EmbeddingModelsTest : public ModelRegistryTest {
 protected:
  // The GGUF is written once for the suite (45 MB); each test stores it anew.
  static void SetUpTestSuite() {
    if (orchard::testing::embedding_model_path().empty()) return;
    folder_model_ = load_embedding_model(orchard::testing::embedding_model_path());
    gguf_ = fs::temp_directory_path() / ("orchard_registry_minilm_" + std::to_string(::getpid()) + ".gguf");
    write_gguf_embedding_model(*folder_model_, gguf_, ConvertOptions{});
  }
  static void TearDownTestSuite() {
    if (!gguf_.empty()) fs::remove(gguf_);
    folder_model_.reset();
  }
  void SetUp() override {
    ORCHARD_REQUIRE_EMBEDDING_MODEL();
    ModelRegistryTest::SetUp();
    ModelStore(root_ / "models").import_file(gguf_, "minilm");
  }
  static inline std::shared_ptr<const EmbeddingModel> folder_model_;
  static inline fs::path gguf_;
};

TEST_F(EmbeddingModelsTest, EveryStoredModelEmbedsByName) {
  auto r = make();
  const std::vector<std::string> texts = {"A man is eating food.", "Müller's café, 東京!"};
  auto lease = r->acquire("minilm", true, std::nullopt, ModelUse::embed);
  ASSERT_NE(lease->embedder(), nullptr);
  EXPECT_EQ(lease->name(), "minilm:latest");
  EXPECT_EQ(lease->embedder()->model().architecture(), "bert");
  Embedder direct(load_embedding_model(gguf_), 1);  // the same file, opened directly
  EXPECT_EQ(lease->embedder()->embed(texts).embeddings, direct.embed(texts).embeddings);
  // The generative model's hidden states, as its file gives them directly.
  auto generative = r->acquire("a", true, std::nullopt, ModelUse::embed);
  ASSERT_NE(generative->embedder(), nullptr);
  Embedder from_file(load_embedding_model(root_ / "tiny.gguf"), 1);
  const std::vector<std::vector<std::int32_t>> ids = {{1, 5, 9, 13}};
  EXPECT_EQ(generative->embedder()->embed_tokens(ids).embeddings,
            from_file.embed_tokens(ids).embeddings);
  EXPECT_EQ(generative->embedder(), r->acquire("a", true, std::nullopt, ModelUse::embed)->embedder());
  EXPECT_NE(&generative->model(), nullptr);  // and it still generates
  bool listed = false;
  for (const LoadedModelInfo& m : r->loaded()) listed |= m.name == "minilm:latest" && m.embedding;
  EXPECT_TRUE(listed);
  // Asked to generate, loaded or not: a 400 naming it.
  std::string message;
  try {
    r->acquire("minilm", true);
    ADD_FAILURE() << "an embedding model generated";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.code(), "model_not_generative");
    EXPECT_NE(std::string(e.what()).find("'minilm:latest' is an embedding model"), std::string::npos)
        << e.what();
  }
  lease.reset();
  EXPECT_TRUE(r->unload("minilm"));
  EXPECT_EQ(status_of([&] { r->acquire("minilm", true); }, &message), 400);
  EXPECT_FALSE(loaded(*r).contains("minilm:latest"));  // nothing was loaded for it
  EXPECT_EQ(status_of([&] { r->acquire("nope", true, std::nullopt, ModelUse::embed); }, &message), 404);
  EXPECT_NE(message.find("'nope' not found"), std::string::npos) << message;
}

TEST_F(EmbeddingModelsTest, CountsAgainstTheLimitsAndKeepAlive) {
  auto r = make(/*max_loaded=*/2);
  r->acquire("minilm", true, 0.0, ModelUse::embed).reset();
  EXPECT_FALSE(loaded(*r).contains("minilm:latest"));  // keep_alive 0: unloaded when done
  r->acquire("minilm", true, std::nullopt, ModelUse::embed).reset();
  EXPECT_TRUE(loaded(*r).contains("minilm:latest"));
  r->acquire("a", true).reset();  // room for one more: the idle encoder goes
  EXPECT_EQ(loaded(*r), (std::set<std::string>{"first", "a:latest"}));
  r->acquire("minilm", true, std::nullopt, ModelUse::embed).reset();  // and back, unloading 'a'
  EXPECT_EQ(loaded(*r), (std::set<std::string>{"first", "minilm:latest"}));
}

TEST_F(EmbeddingModelsTest, ACorruptBlobIs500NamingIt) {
  const StoredModel stored = ModelStore(root_ / "models").find("minilm");
  {
    std::fstream blob(stored.file, std::ios::in | std::ios::out | std::ios::binary);
    blob.seekp(static_cast<std::streamoff>(stored.size / 2));
    blob.write("corrupt!", 8);
  }
  auto r = make();
  std::string message;
  EXPECT_EQ(status_of([&] { r->acquire("minilm", true, std::nullopt, ModelUse::embed); }, &message), 500);
  EXPECT_NE(message.find("cannot load 'minilm:latest'"), std::string::npos) << message;
  EXPECT_NE(message.find("corrupt"), std::string::npos) << message;
}

}  // namespace
}  // namespace pie::server
