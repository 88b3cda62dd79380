// The served model: its names (the slug of the file's stem, aliases, "default"), the layout of JSON
// output, and the prompts it renders for tools (the system message of a template without tools).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "pie/engine.h"
#include "server/served_model.h"

namespace pie::server {
namespace {

// The default (random-weight) model under another path and template: naming and rendering only.
std::shared_ptr<Engine> engine_for(const std::filesystem::path& path, std::string chat_template = {},
                                   std::string name = "Some Model 1B") {
  auto model = std::make_shared<Model>(*random_model());
  model->path = path;
  model->name = std::move(name);
  model->chat_template = std::move(chat_template);
  EngineOptions options;
  options.n_threads = 1;
  options.max_running = 1;
  options.context_length = 256;
  return std::make_shared<Engine>(model, options);
}

TEST(ServedModelName, SlugKeepsNameCharactersOnly) {
  EXPECT_EQ(model_name_slug("Smollm2 135M 8k Lc100K Mix1 Ep2"), "Smollm2-135M-8k-Lc100K-Mix1-Ep2");
  EXPECT_EQ(model_name_slug("  a//b  c\t"), "a-b-c");
  EXPECT_EQ(model_name_slug("smollm2:135m-instruct-q4_1"), "smollm2:135m-instruct-q4_1");
  EXPECT_EQ(model_name_slug("Qwen2.5+x_y"), "Qwen2.5+x_y");
  EXPECT_EQ(model_name_slug("  "), "");
}

TEST(ServedModelName, FileStemThenMetadataName) {
  Model m;
  m.name = "Smollm2 135M 8k Lc100K Mix1 Ep2";
  m.path = "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  EXPECT_EQ(served_model_name(m), "SmolLM2-135M-Instruct.Q4_1");
  m.path = "/models/my model.bin";
  EXPECT_EQ(served_model_name(m), "my-model");
  m.path = std::filesystem::temp_directory_path() / "";  // a folder, written with its slash
  EXPECT_EQ(served_model_name(m), model_name_slug(std::filesystem::temp_directory_path().filename().string()));
  m.path.clear();
  EXPECT_EQ(served_model_name(m), "Smollm2-135M-8k-Lc100K-Mix1-Ep2");
  m.name.clear();
  EXPECT_EQ(served_model_name(m), "orchard");
}

TEST(ServedModelName, ServesItsNameAliasesTagsAndDefault) {
  ServedModel model(engine_for("/m/x.gguf"), "x", {.aliases = {"gpt-4o", "smol", "gpt-4o"}});
  EXPECT_EQ(model.names(), (std::vector<std::string>{"x", "gpt-4o", "smol"}));  // duplicates dropped
  for (const char* asked : {"", "default", "x", "x:latest", "gpt-4o", "smol:latest"}) {
    EXPECT_TRUE(model.serves(asked)) << asked;
  }
  for (const char* asked : {"X", "y", "x:7b", "default:latest", "smol ", ":latest"}) {
    EXPECT_FALSE(model.serves(asked)) << asked;
  }
}

TEST(ServedModelName, BadNamesAreErrors) {
  auto engine = engine_for("/m/x.gguf");
  EXPECT_THROW(ServedModel(engine, ""), Error);
  EXPECT_THROW(ServedModel(engine, "a b"), Error);
  EXPECT_THROW(ServedModel(engine, "x", {.aliases = {"tab\there"}}), Error);
  EXPECT_THROW(ServedModel(engine, "x", {.aliases = {""}}), Error);
}

}  // namespace
}  // namespace pie::server
