// Completions (the one-shot requests behind Python's orchard.Engine.generate): chat and text bodies through
// the server's request path on the random-weight model; deltas that add up to the reply, a constraint, a
// timeout, cancellation, and the errors that name their field.
#include "pie/completions.h"

#include <gtest/gtest.h>

#include <regex>

#include "pie/engine.h"

namespace pie {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<Engine> make_engine() {
  EngineOptions options;
  options.n_threads = 2;
  options.max_running = 4;
  options.context_length = 1024;
  return std::make_shared<Engine>(random_model(), options);
}

std::string drain(CompletionStream& s) {
  std::string text;
  while (auto d = s.next()) text += d->content;
  return text;
}

TEST(Completions, ChatAndTextBodiesStreamTheirReply) {
  Completions completions(make_engine());
  const Json chat{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"temperature", 0}, {"max_tokens", 6}};
  auto a = completions.start(chat);
  EXPECT_EQ(drain(*a), a->reply().content);
  EXPECT_EQ(a->reply().finish_reason, "length");
  EXPECT_EQ(a->reply().usage.completion_tokens, 6);
  auto b = completions.start(chat);  // nothing remembered between calls: the same answer
  drain(*b);
  EXPECT_EQ(b->reply().content, a->reply().content);
  auto text = completions.start(Json{{"prompt", "Once"}, {"temperature", 0}, {"max_tokens", 4}});
  drain(*text);
  EXPECT_EQ(text->reply().usage.completion_tokens, 4);
}

TEST(Completions, ConstraintsHold) {
  Completions completions(make_engine());
  auto s = completions.start(Json{{"prompt", "x"}, {"regex", "[0-9]{3}-[a-z]{2}"}, {"seed", 3}});
  EXPECT_TRUE(std::regex_match(drain(*s), std::regex("[0-9]{3}-[a-z]{2}")));
  EXPECT_EQ(s->reply().finish_reason, "stop");
}

TEST(Completions, CancelEndsTheRequest) {
  Completions completions(make_engine());
  auto s = completions.start(Json{{"prompt", "x"}, {"max_tokens", 500}});
  ASSERT_TRUE(s->next().has_value());
  s->cancel();
  drain(*s);
  EXPECT_EQ(s->reply().finish_reason, "cancelled");
  EXPECT_LT(s->reply().usage.completion_tokens, 500);
}

TEST(Completions, AWaitThatTimesOutLosesNothing) {
  Completions completions(make_engine());
  auto s = completions.start(Json{{"prompt", "x"}, {"max_tokens", 200}});
  std::string text;
  bool timed_out = false;
  while (true) {
    auto d = s->next_for(std::chrono::milliseconds(0));
    if (d) {
      text += d->content;
      continue;
    }
    if (!s->timed_out()) break;  // the end
    timed_out = true;  // nothing yet: the stream goes on
  }
  EXPECT_TRUE(timed_out);
  EXPECT_EQ(text, s->reply().content);
  EXPECT_FALSE(text.empty());
}

TEST(Completions, ErrorsNameTheField) {
  Completions completions(make_engine());
  auto field_of = [&](const Json& body) {
    try {
      completions.start(body);
    } catch (const RequestError& e) {
      return e.param();
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(field_of(Json::array()), "");
  EXPECT_EQ(field_of(Json{{"prompt", "x"}, {"n", 2}}), "n");
  EXPECT_EQ(field_of(Json{{"prompt", "x"}, {"temperature", -1}}), "temperature");
  EXPECT_EQ(field_of(Json{{"prompt", "x"}, {"grammar", "root ::= ("}}), "grammar");
  EXPECT_EQ(field_of(Json{{"messages", "hi"}}).rfind("messages", 0), 0u);
  EXPECT_THROW(completions.start(Json::array()), RequestError);
}

}  // namespace
}  // namespace pie
