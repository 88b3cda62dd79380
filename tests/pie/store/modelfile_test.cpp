// Modelfiles: every instruction read (quoted, triple-quoted, case-insensitive, comments), every
// error with its line and column, and the parameters as request fields in Ollama's and OpenAI's
// names.
#include "pie/modelfile.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace pie {
namespace {

ModelfileError error_of(std::string_view text) {
  try {
    parse_modelfile(text);
  } catch (const ModelfileError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for: " << text;
  return ModelfileError("", 0, 0);
}

TEST(Modelfile, ReadsEveryInstruction) {
  const Modelfile m = parse_modelfile(
      "# comment\n"
      "from ./model.gguf\n"
      "PARAMETER temperature 0.5\n"
      "PARAMETER top_k 20\n"
      "PARAMETER stop \"<|im_end|>\"\n"
      "PARAMETER stop </s>\n"
      "PARAMETER penalize_newline false\n"
      "TEMPLATE \"\"\"{{ messages }}\n"
      "two lines\"\"\"\n"
      "SYSTEM \"Say \\\"hi\\\".\"\n"
      "ADAPTER lora.gguf\n"
      "LICENSE MIT\n"
      "LICENSE \"\"\"Apache\n2.0\"\"\"\n"
      "MESSAGE user Hello there\n"
      "MESSAGE assistant Hi\n");
  EXPECT_EQ(m.from, "./model.gguf");
  EXPECT_EQ(m.chat_template, "{{ messages }}\ntwo lines");
  EXPECT_EQ(m.system, "Say \"hi\".");
  ASSERT_EQ(m.adapters.size(), 1u);
  EXPECT_EQ(m.adapters[0], "lora.gguf");
  ASSERT_EQ(m.licenses.size(), 2u);
  EXPECT_EQ(m.licenses[1], "Apache\n2.0");
  const nlohmann::json params = nlohmann::json::parse(m.parameters);
  EXPECT_EQ(params["temperature"], 0.5);
  EXPECT_EQ(params["top_k"], 20);
  EXPECT_TRUE(params["top_k"].is_number_integer());
  EXPECT_EQ(params["stop"], nlohmann::json::array({"<|im_end|>", "</s>"}));
  EXPECT_EQ(params["penalize_newline"], false);
  const nlohmann::json messages = nlohmann::json::parse(m.messages);
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0]["content"], "Hello there");
  EXPECT_EQ(messages[1]["role"], "assistant");
}

TEST(Modelfile, ErrorsSayLineAndColumn) {
  ModelfileError e = error_of("FROM x\n\n   FORM y\n");
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.column(), 4);
  EXPECT_NE(std::string(e.what()).find("Modelfile:3:4: unknown instruction 'FORM'"),
            std::string::npos)
      << e.what();
  e = error_of("FROM x\nPARAMETER top_k 1.5\n");
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 17);
  EXPECT_NE(std::string(e.what()).find("must be an integer"), std::string::npos);
  e = error_of("FROM x\nPARAMETER colour red\n");
  EXPECT_EQ(e.column(), 11);
  EXPECT_NE(std::string(e.what()).find("unknown parameter 'colour'"), std::string::npos);
  e = error_of("FROM x\nPARAMETER temperature\n");
  EXPECT_EQ(e.line(), 2);
  e = error_of("FROM x\nTEMPLATE \"\"\"never closed\n\n");
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 10);
  e = error_of("FROM x\nSYSTEM \"open\nnext\"\n");
  EXPECT_NE(std::string(e.what()).find("unterminated \" string"), std::string::npos);
  e = error_of("FROM x\nSYSTEM \"a\" trailing\n");
  EXPECT_EQ(e.column(), 12);
  e = error_of("FROM x\nFROM y\n");
  EXPECT_EQ(e.line(), 2);
  e = error_of("SYSTEM hi\n");
  EXPECT_NE(std::string(e.what()).find("no FROM"), std::string::npos);
  e = error_of("FROM x\nMESSAGE robot hi\n");
  EXPECT_EQ(e.column(), 9);
  e = error_of("FROM x\nSYSTEM\n");
  EXPECT_NE(std::string(e.what()).find("SYSTEM needs a value"), std::string::npos);
  e = error_of("FROM x\nPARAMETER temperature inf\n");
  EXPECT_NE(std::string(e.what()).find("must be a number"), std::string::npos);
}

TEST(Modelfile, ParametersAsRequestFields) {
  StoredModel model;
  model.parameters =
      R"({"temperature": 0.1, "num_predict": 7, "repeat_penalty": 1.2, "num_ctx": 512, "stop": ["x"]})";
  const nlohmann::json options = sampling_options(model);
  EXPECT_EQ(options["num_predict"], 7);
  EXPECT_EQ(options["repeat_penalty"], 1.2);
  EXPECT_FALSE(options.contains("num_ctx"));
  const nlohmann::json openai = openai_sampling_fields(model);
  EXPECT_EQ(openai["max_tokens"], 7);
  EXPECT_EQ(openai["repetition_penalty"], 1.2);
  EXPECT_EQ(openai["stop"], nlohmann::json::array({"x"}));
  EXPECT_FALSE(openai.contains("num_predict"));
  EXPECT_FALSE(openai.contains("repeat_penalty"));
  model.parameters =
      R"({"num_predict": -1})";  // Ollama's "until the context is full": no max_tokens
  EXPECT_FALSE(openai_sampling_fields(model).contains("max_tokens"));
  EXPECT_TRUE(openai_sampling_fields(StoredModel{}).empty());
}

}  // namespace
}  // namespace pie
