// The model store's writes: blobs by sha256 (stored once), manifests with a Modelfile's layers read
// back, copies sharing blobs, removal collecting only unnamed blobs, create FROM a file and FROM a
// stored name, the details `show` reads from a GGUF file, and the errors (a file that is not GGUF,
// an unwritable store, an unknown name) leaving no half file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "pie/engine.h"
#include "pie/model_details.h"
#include "pie/model_pull.h"
#include "pie/model_store.h"
#include "pie/modelfile.h"
#include "store/sha256.h"

namespace pie {
namespace {

namespace fs = std::filesystem;

class StoreWritesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_file_ = new fs::path(fs::temp_directory_path() / "orchard_store_writes_random.gguf");
    ConvertOptions options;
    options.type = tensor::DType::q8_0;
    write_gguf_model(*random_model(), *model_file_, options);
  }
  static void TearDownTestSuite() {
    fs::remove(*model_file_);
    delete model_file_;
  }
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("orchard_store_writes_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::size_t count_files(const fs::path& dir) const {
    std::error_code ec;
    std::size_t n = 0;
    for (auto it = fs::recursive_directory_iterator(dir, ec);
         !ec && it != fs::recursive_directory_iterator(); ++it) {
      n += it->is_regular_file() ? 1 : 0;
    }
    return n;
  }
  // No temporary or partial file anywhere in the store.
  bool clean() const {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root_, ec);
         !ec && it != fs::recursive_directory_iterator(); ++it) {
      const std::string name = it->path().filename().string();
      if (name.starts_with(".tmp-") || name.starts_with("partial-")) return false;
    }
    return true;
  }

  static fs::path* model_file_;
  fs::path root_;
};
fs::path* StoreWritesTest::model_file_ = nullptr;

TEST_F(StoreWritesTest, ImportStoresOnceAndFindsIt) {
  ModelStore store(root_);
  const StoredModel a = store.import_file(*model_file_, "tiny");
  EXPECT_EQ(a.name.str(), "tiny:latest");
  EXPECT_EQ(a.digest, "sha256:" + store::sha256_file(*model_file_));
  EXPECT_EQ(a.size, fs::file_size(*model_file_));
  const StoredModel b = store.import_file(*model_file_, "other/tiny:q8");
  EXPECT_EQ(b.file, a.file);
  EXPECT_EQ(count_files(root_ / "blobs"), 1u);
  EXPECT_EQ(store.find("tiny").file, a.file);
  EXPECT_EQ(store.list().size(), 2u);
  EXPECT_TRUE(clean());
  // The model runs from the store under its name.
  const OpenedModel opened = open_model(std::string("other/tiny:q8"), store);
  EXPECT_EQ(opened.store_name, "other/tiny:q8");
  EXPECT_EQ(opened.model->config.n_layer, random_model()->config.n_layer);
}

TEST_F(StoreWritesTest, CreateRecordsLayersAndInherits) {
  ModelStore store(root_);
  const fs::path dir = root_.parent_path() / (root_.filename().string() + "_files");
  fs::create_directories(dir);
  fs::copy_file(*model_file_, dir / "m.gguf", fs::copy_options::overwrite_existing);
  std::ofstream(dir / "lora.bin") << "adapter bytes";
  const Modelfile mf = parse_modelfile(
      "FROM m.gguf\nPARAMETER temperature 0\nTEMPLATE \"{{ x }}\"\nSYSTEM Be brief.\nADAPTER "
      "lora.bin\n"
      "LICENSE MIT\nMESSAGE user hi\n");
  const StoredModel created = create_model(store, "made:v1", mf, dir);
  EXPECT_EQ(created.chat_template, "{{ x }}");
  EXPECT_EQ(created.system, "Be brief.");
  EXPECT_EQ(nlohmann::json::parse(created.parameters)["temperature"], 0);
  ASSERT_EQ(created.licenses.size(), 1u);
  ASSERT_EQ(created.adapters.size(), 1u);
  EXPECT_TRUE(fs::is_regular_file(created.adapters[0]));
  EXPECT_EQ(created.layer_digests.size(), 7u);
  EXPECT_EQ(created.layer_digests[0], created.digest);
  // The template replaces the model's own when it is opened.
  EXPECT_EQ(open_model(std::string("made:v1"), store).model->chat_template, "{{ x }}");
  // FROM a stored name: its layers are inherited, the new SYSTEM wins.
  const StoredModel child =
      create_model(store, "child", parse_modelfile("FROM made:v1\nSYSTEM Be kind.\n"), dir);
  EXPECT_EQ(child.system, "Be kind.");
  EXPECT_EQ(child.chat_template, "{{ x }}");
  EXPECT_EQ(child.digest, created.digest);
  EXPECT_THROW(create_model(store, "x", parse_modelfile("FROM nothing:here\n"), dir),
               ModelNotFoundError);
  EXPECT_THROW(create_model(store, "x", parse_modelfile("FROM m.gguf\nADAPTER absent.bin\n"), dir),
               ModelError);
  fs::remove_all(dir);
}

TEST_F(StoreWritesTest, CopyAndRemoveCollectUnnamedBlobs) {
  ModelStore store(root_);
  const StoredModel a = store.write_model("a", store.import_file(*model_file_, "base").digest,
                                          ModelRecipe{.system = "only a's"});
  store.copy("a", "b:two");
  EXPECT_EQ(store.find("b:two").system, "only a's");
  store.remove("base");
  store.remove("a");
  EXPECT_TRUE(fs::exists(a.file)) << "b:two still names the model file";
  EXPECT_EQ(count_files(root_ / "blobs"), 2u);  // the model and the system prompt
  store.remove("b:two");
  EXPECT_EQ(count_files(root_ / "blobs"), 0u);
  EXPECT_TRUE(store.list().empty());
  EXPECT_THROW(store.remove("b:two"), ModelNotFoundError);
  EXPECT_THROW(store.copy("absent", "c"), ModelNotFoundError);
  EXPECT_THROW(store.copy("b:two", "Bad Name"), ModelNotFoundError);
}

TEST_F(StoreWritesTest, BadInputLeavesNothing) {
  ModelStore store(root_);
  const fs::path noise = root_.parent_path() / (root_.filename().string() + ".noise");
  std::ofstream(noise) << std::string(4096, 'x');
  EXPECT_THROW(store.import_file(noise, "noise"), ModelError);
  EXPECT_THROW(store.import_file(root_ / "absent.gguf", "absent"), ModelError);
  EXPECT_THROW(store.import_file(*model_file_, "UPPER"), ModelNotFoundError);
  EXPECT_TRUE(store.list().empty());
  EXPECT_TRUE(clean());
  fs::remove(noise);
  // A file where the store's folder would be: a StoreError naming it, nothing written.
  fs::create_directories(root_.parent_path());
  std::ofstream(root_) << "in the way";
  ModelStore blocked(root_ / "models");
  EXPECT_THROW(blocked.import_file(*model_file_, "tiny"), StoreError);
  fs::remove(root_);
}

TEST_F(StoreWritesTest, DamagedLayerIsAnError) {
  ModelStore store(root_);
  store.write_model("m", store.import_file(*model_file_, "m").digest,
                    ModelRecipe{.system = "hello"});
  const std::string digest = store.find("m").layer_digests.at(1);
  std::ofstream(root_ / "blobs" / ("sha256-" + digest.substr(7))) << "tampered";
  try {
    store.find("m");
    FAIL() << "a tampered layer was read";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
}

TEST_F(StoreWritesTest, DetailsFromTheGgufFile) {
  const ModelDetails d = read_model_details(*model_file_);
  const auto model = random_model();
  EXPECT_EQ(d.family, "llama");
  EXPECT_EQ(d.parameter_count, static_cast<std::uint64_t>(model->weights.n_parameters()));
  EXPECT_EQ(d.quantization, "Q8_0");
  EXPECT_EQ(d.context_length, static_cast<std::uint64_t>(model->config.context_length));
  EXPECT_EQ(d.embedding_length, static_cast<std::uint64_t>(model->config.n_embd));
  EXPECT_EQ(d.block_count, static_cast<std::uint64_t>(model->config.n_layer));
  EXPECT_EQ(format_parameter_size(135'000'000), "135.0M");
  EXPECT_EQ(format_parameter_size(1'500'000'000), "1.5B");
  EXPECT_THROW(read_model_details(root_ / "absent.gguf"), ModelError);
}

TEST(ModelPull, DefaultNames) {
  EXPECT_EQ(default_pull_name("https://h/x/SmolLM2-135M-Instruct.Q4_1.gguf?download=1"),
            "smollm2-135m-instruct.q4_1:latest");
  EXPECT_EQ(default_pull_name("/models/My Model (v2).gguf"), "my-model-v2:latest");
  EXPECT_THROW(default_pull_name("/models/###.gguf"), ModelNotFoundError);
  EXPECT_TRUE(is_url("http://a/b"));
  EXPECT_FALSE(is_url("./http:/x"));
}

}  // namespace
}  // namespace pie
