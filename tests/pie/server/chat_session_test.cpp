// ChatSession (the conversation behind `orchard chat` and `run --chat`): turns through the server's
// request path on the random-weight model; the history, the system message, constraints, errors that
// leave the conversation unchanged, and cancellation from another thread.
#include "pie/chat_session.h"

#include <gtest/gtest.h>

#include <atomic>
#include <regex>
#include <thread>

#include "pie/engine.h"

namespace pie {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<Engine> make_engine() {
  EngineOptions options;
  options.n_threads = 2;
  options.max_running = 2;
  options.context_length = 1024;
  return std::make_shared<Engine>(random_model(), options);
}

const Json kGreedy{{"temperature", 0}, {"max_tokens", 6}};

TEST(ChatSession, KeepsTheConversationAndStreamsTheAnswer) {
  ChatSession chat(make_engine());
  std::string streamed;
  const ChatReply first = chat.send("Hello there", kGreedy, [&](std::string_view t) { streamed += t; });
  EXPECT_EQ(streamed, first.content);
  EXPECT_EQ(first.finish_reason, "length");
  EXPECT_EQ(first.usage.completion_tokens, 6);
  const ChatReply second = chat.send("And again", kGreedy);
  // The second prompt holds the first turn: more prompt tokens than the first.
  EXPECT_GT(second.usage.prompt_tokens, first.usage.prompt_tokens + 4);
  const Json messages = chat.messages();
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[0]["role"], "user");
  EXPECT_EQ(messages[0]["content"], "Hello there");
  EXPECT_EQ(messages[1]["role"], "assistant");
  EXPECT_EQ(messages[1]["content"], first.content);
  EXPECT_EQ(messages[3]["content"], second.content);

  chat.set_system("Be brief.");
  EXPECT_EQ(chat.messages()[0]["role"], "system");
  chat.reset();
  ASSERT_EQ(chat.messages().size(), 1u);  // the system message stays
  // The same first turn after a reset gives the same greedy answer as before, with the system message
  // making the prompt longer.
  const ChatReply again = chat.send("Hello there", kGreedy);
  EXPECT_GT(again.usage.prompt_tokens, first.usage.prompt_tokens);
}

TEST(ChatSession, ConstraintsApplyToTheAnswer) {
  ChatSession chat(make_engine());
  Json fields{{"temperature", 1}, {"seed", 5}, {"max_tokens", 40}, {"regex", "[0-9]{3}-[0-9]{4}"}};
  const ChatReply reply = chat.send("A phone number?", fields);
  EXPECT_EQ(reply.finish_reason, "stop");
  EXPECT_TRUE(std::regex_match(reply.content, std::regex("[0-9]{3}-[0-9]{4}"))) << reply.content;
}

TEST(ChatSession, BadRequestsThrowAndLeaveTheConversation) {
  ChatSession chat(make_engine());
  chat.send("Hi", kGreedy);
  const Json before = chat.messages();
  try {
    chat.send("Hi", Json{{"temperature", -3}});
    FAIL() << "no error";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.param(), "temperature");
  }
  EXPECT_THROW(chat.send("Hi", Json{{"regex", "(unclosed"}}), RequestError);
  EXPECT_THROW(chat.send("Hi", Json{{"messages", Json::array()}}), RequestError);
  EXPECT_THROW(chat.send("Hi", Json::array()), RequestError);
  EXPECT_EQ(chat.messages(), before);
}

TEST(ChatSession, CancelEndsTheAnswerAndKeepsItOutOfTheHistory) {
  ChatSession chat(make_engine());
  std::atomic<bool> started{false};
  std::thread canceller([&] {
    while (!started) std::this_thread::yield();
    chat.cancel();
  });
  const ChatReply reply = chat.send("Tell me everything", Json{{"temperature", 1}, {"max_tokens", 900}, {"seed", 1}},
                                    [&](std::string_view) { started = true; });
  canceller.join();
  EXPECT_EQ(reply.finish_reason, "cancelled");
  EXPECT_LT(reply.usage.completion_tokens, 900);
  EXPECT_TRUE(chat.messages().empty());
  chat.cancel();  // between answers: no effect
  EXPECT_EQ(chat.send("Hi", kGreedy).finish_reason, "length");
}

}  // namespace
}  // namespace pie
