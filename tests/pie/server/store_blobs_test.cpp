// Ollama's blob routes over a store (server/store_routes.h): a body stored under its sha256 digest, a
// body whose sha256 is not its digest refused with nothing stored, digests of another form refused, a
// model created from an uploaded blob ('files') and its errors (an absent blob, 'from' and 'files'
// together, more than one file, 'quantize'); a server without a store (501).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include "pie/engine.h"
#include "pie/model.h"
#include "server/api_error.h"
#include "server/store_routes.h"
#include "store/sha256.h"

namespace pie::server {
namespace {

namespace fs = std::filesystem;

class StoreBlobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("orchard_blobs_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    ConvertOptions convert;
    convert.type = tensor::DType::q8_0;
    write_gguf_model(*random_model(), root_ / "tiny.gguf", convert);
    std::ifstream in(root_ / "tiny.gguf", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    bytes_ = ss.str();
    EngineOptions eo;
    eo.n_threads = 1;
    eo.context_length = 128;
    first_ = std::make_shared<ServedModel>(std::make_shared<Engine>(random_model(), eo), "first");
    RegistryOptions options;
    options.store_root = root_ / "models";
    options.engine = eo;
    registry_ = std::make_unique<ModelRegistry>(first_, options);
  }
  void TearDown() override {
    registry_.reset();
    fs::remove_all(root_);
  }
  std::string digest() const { return "sha256:" + store::sha256_hex(bytes_); }
  // The ApiError `f` throws: its status, and whether its message holds `words`.
  static void expect_error(const std::function<void()>& f, int status, const std::string& words) {
    try {
      f();
      ADD_FAILURE() << "no error (expected " << status << ": " << words << ")";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), status) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  }

  fs::path root_;
  std::string bytes_;
  std::shared_ptr<ServedModel> first_;
  std::unique_ptr<ModelRegistry> registry_;
};

TEST_F(StoreBlobsTest, AnUploadIsStoredUnderItsDigestAndNamedByCreate) {
  EXPECT_FALSE(blob_stored(*registry_, digest()));
  put_blob_route(*registry_, digest(), bytes_);
  EXPECT_TRUE(blob_stored(*registry_, digest()));
  EXPECT_TRUE(blob_stored(*registry_, "sha256-" + digest().substr(7)));  // Ollama's file form
  const Json body{{"model", "uploaded"}, {"files", {{"tiny.gguf", digest()}}}, {"system", "Be brief."}};
  EXPECT_EQ(create_model_route(*registry_, body)["status"], "success");
  const StoredModel stored = registry_->store()->find("uploaded");
  EXPECT_EQ(stored.digest, digest());
  EXPECT_EQ(stored.system, "Be brief.");
  EXPECT_NE(&registry_->acquire("uploaded", true)->model(), nullptr);  // it loads and serves
}

TEST_F(StoreBlobsTest, BadUploadsAndCreatesAreRefusedByName) {
  const std::string zeros = "sha256:" + std::string(64, '0');
  expect_error([&] { put_blob_route(*registry_, zeros, bytes_); }, 400, "nothing stored");
  EXPECT_FALSE(blob_stored(*registry_, digest()));  // the body went nowhere, under no digest
  for (const std::string& bad : std::vector<std::string>{"md5:abc", "sha256:" + std::string(64, 'A'),
                                                         "sha256:" + std::string(63, 'a'), "x"}) {
    expect_error([&] { put_blob_route(*registry_, bad, bytes_); }, 400, "not a blob digest");
    expect_error([&] { blob_stored(*registry_, bad); }, 400, "not a blob digest");
  }
  put_blob_route(*registry_, digest(), bytes_);
  expect_error([&] { create_model_route(*registry_, {{"model", "x"}, {"files", {{"a.gguf", zeros}}}}); }, 400,
               "is not on the server");
  expect_error(
      [&] { create_model_route(*registry_, {{"model", "x"}, {"from", "tiny"}, {"files", {{"a.gguf", digest()}}}}); },
      400, "not both");
  expect_error(
      [&] {
        create_model_route(*registry_,
                           {{"model", "x"}, {"files", {{"a.gguf", digest()}, {"b.gguf", digest()}}}});
      },
      400, "holds 2 files");
  expect_error([&] { create_model_route(*registry_, {{"model", "x"}, {"files", "a.gguf"}}); }, 400,
               "'files' must be an object");
  expect_error(
      [&] { create_model_route(*registry_, {{"model", "x"}, {"files", {{"a.gguf", digest()}}}, {"quantize", "q4_K_M"}}); },
      400, "'quantize' is not supported");
  // A blob that is no GGUF model: stored, but no model is made of it.
  const std::string text = "not a model";
  const std::string text_digest = "sha256:" + store::sha256_hex(text);
  put_blob_route(*registry_, text_digest, text);
  expect_error([&] { create_model_route(*registry_, {{"model", "x"}, {"files", {{"a.gguf", text_digest}}}}); }, 400,
               "not a GGUF model file");
  EXPECT_FALSE(registry_->store()->contains("x"));
}

TEST_F(StoreBlobsTest, NoStoreIs501) {
  RegistryOptions options;  // no store_root
  ModelRegistry alone(first_, options);
  expect_error([&] { put_blob_route(alone, digest(), bytes_); }, 501, "no model store");
  expect_error([&] { blob_stored(alone, digest()); }, 501, "no model store");
}

}  // namespace
}  // namespace pie::server
