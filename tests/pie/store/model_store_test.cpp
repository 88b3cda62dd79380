// The model store: names, manifests, blob checks (missing, truncated, corrupt), listing, and what
// open_model() makes of a name, a path, orchard-random and nothing (the default model).
#include "pie/model_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "default_model.h"
#include "pie/engine.h"
#include "store/sha256.h"

namespace pie {
namespace {

namespace fs = std::filesystem;

// A store in a fresh temporary folder, with helpers to put a file in it under a name.
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("orchard_store_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  static void write(const fs::path& path, const std::string& bytes) {
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  // Stores `bytes` as a blob named `name`:`tag`; returns the blob's path.
  fs::path put(const std::string& name, const std::string& tag, const std::string& bytes) {
    store::Sha256 h;
    h.update(bytes);
    const std::string hex = h.hex_digest();
    const fs::path blob = root_ / "blobs" / ("sha256-" + hex);
    write(blob, bytes);
    write(root_ / "manifests" / name / tag,
          R"({"schemaVersion": 2, "layers": [{"mediaType": "application/vnd.orchard.model.gguf", "digest": "sha256:)" +
              hex + R"(", "size": )" + std::to_string(bytes.size()) + R"(}], "source": "test"})");
    return blob;
  }
  std::string message_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "(no exception)";
  }

  fs::path root_;
};

TEST(ModelName, ParsesNamesAndTags) {
  EXPECT_EQ(ModelName::parse("smollm2:135m-instruct-q4_1").str(), "smollm2:135m-instruct-q4_1");
  EXPECT_EQ(ModelName::parse("smollm2").tag, "latest");
  EXPECT_EQ(ModelName::parse("library/qwen2.5:0.5b").name, "library/qwen2.5");
  for (const char* bad : {"", ":tag", "name:", "Upper", "a b", "../x", "a/../b", ".hidden", "a//b", "a:b:c",
                          "-dash", "x/", "na\nme"}) {
    EXPECT_FALSE(ModelName::valid(bad)) << bad;
    EXPECT_THROW(ModelName::parse(bad), ModelNotFoundError) << bad;
  }
}

TEST_F(StoreTest, FindsAStoredModelAndRecordsTheCheck) {
  const fs::path blob = put("tiny", "v1", "GGUF-but-not-really");
  ModelStore store(root_);
  const StoredModel m = store.find("tiny:v1");
  EXPECT_EQ(m.file, blob);
  EXPECT_EQ(m.size, 19u);
  EXPECT_EQ(m.source, "test");
  EXPECT_TRUE(fs::exists(root_ / "verified" / blob.filename()));
  EXPECT_TRUE(store.contains("tiny:v1"));
  EXPECT_FALSE(store.contains("tiny"));  // tag latest
  EXPECT_FALSE(store.contains("Not A Name"));
}

TEST_F(StoreTest, UnknownNameIsNotFound) {
  ModelStore store(root_);
  EXPECT_THROW(store.find("nothing:here"), ModelNotFoundError);
  const std::string msg = message_of([&] { store.find(std::string(kDefaultModelName)); });
  EXPECT_NE(msg.find("fetch-models.sh"), std::string::npos) << msg;
}

TEST_F(StoreTest, MissingTruncatedAndCorruptBlobsAreErrors) {
  ModelStore store(root_);
  const fs::path blob = put("tiny", "v1", "0123456789");
  fs::remove(blob);
  EXPECT_NE(message_of([&] { store.find("tiny:v1"); }).find("missing"), std::string::npos);

  put("tiny", "v1", "0123456789");
  write(blob, "01234");
  EXPECT_NE(message_of([&] { store.find("tiny:v1"); }).find("truncated"), std::string::npos);

  // Same size, other bytes, after a successful check: the changed time makes it hashed again.
  put("tiny", "v1", "0123456789");
  store.find("tiny:v1");
  write(blob, "9876543210");
  fs::last_write_time(blob, fs::last_write_time(blob) + std::chrono::seconds(5));
  const std::string msg = message_of([&] { store.find("tiny:v1"); });
  EXPECT_NE(msg.find("corrupt"), std::string::npos) << msg;
  EXPECT_NE(msg.find(blob.string()), std::string::npos) << msg;
}

TEST_F(StoreTest, MalformedManifestsAreErrorsNamingTheFile) {
  ModelStore store(root_);
  const fs::path manifest = root_ / "manifests" / "bad" / "latest";
  for (const char* text : {"not json", R"({"layers": []})", R"({"layers": [{"digest": "md5:00", "size": 1}]})",
                           R"({"layers": [{"digest": "sha256:abc", "size": 1}]})",
                           R"({"layers": [{"size": 1}]})"}) {
    write(manifest, text);
    const std::string msg = message_of([&] { store.find("bad"); });
    EXPECT_NE(msg.find("malformed manifest"), std::string::npos) << text << ": " << msg;
    EXPECT_NE(msg.find(manifest.string()), std::string::npos) << msg;
  }
  // Listing skips what it cannot read rather than failing.
  put("good", "latest", "x");
  const auto listed = store.list();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name.str(), "good:latest");
}

TEST_F(StoreTest, ListsEveryModelSorted) {
  put("zeta", "1", "a");
  put("alpha", "2", "b");
  put("org/beta", "latest", "c");
  ModelStore store(root_);
  std::vector<std::string> names;
  for (const StoredModel& m : store.list()) names.push_back(m.name.str());
  EXPECT_EQ(names, (std::vector<std::string>{"alpha:2", "org/beta:latest", "zeta:1"}));
  EXPECT_TRUE(ModelStore(root_ / "absent").list().empty());
}

TEST_F(StoreTest, OpenModelNamesRandomPathsAndUnknowns) {
  ModelStore store(root_);
  const OpenedModel random = open_model(std::string(kRandomModelName), store);
  EXPECT_EQ(random.model, random_model());
  EXPECT_EQ(random.store_name, kRandomModelName);

  EXPECT_THROW(open_model(std::string("no-such-model:7b"), store), ModelNotFoundError);
  EXPECT_THROW(open_model(std::string("/no/such/file.gguf"), store), ModelNotFoundError);
  // The default model, absent from this store: a one-line error that says how to get it.
  for (const std::optional<std::string>& asked : {std::optional<std::string>(), std::optional<std::string>("default")}) {
    const std::string msg = message_of([&] { open_model(asked, store); });
    EXPECT_NE(msg.find(std::string(kDefaultModelName)), std::string::npos) << msg;
    EXPECT_NE(msg.find("fetch-models.sh"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // A stored file that is not a model: the loader's error, not a store error.
  put("junk", "latest", "this is no model file at all");
  EXPECT_THROW(open_model(std::string("junk"), store), ModelError);
}

TEST(DefaultModel, OpensFromTheStoreWithItsMetadata) {
  ORCHARD_REQUIRE_DEFAULT_MODEL();
  const OpenedModel opened = open_model(std::nullopt);
  EXPECT_EQ(opened.store_name, kDefaultModelName);
  EXPECT_EQ(opened.model->config.n_layer, 30);
  EXPECT_EQ(opened.model->config.n_embd, 576);
  // SmolLM2's GGUF says add_bos_token = false: every entry point follows it.
  EXPECT_FALSE(opened.model->tokenizer->add_bos_by_default());
  EXPECT_FALSE(opened.model->chat_template.empty());
}

}  // namespace
}  // namespace pie
