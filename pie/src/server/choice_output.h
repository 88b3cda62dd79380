// One sample ("choice") of a request as it streams out of the engine: text deltas in, API-level deltas out
// (content, reasoning_content, tool-call pieces), and the whole message at the end. Tool calls and
// reasoning are split by pie's ToolCallStreamParser, so streamed and non-streamed answers agree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pie/engine.h"
#include "pie/tool_calls.h"
#include "server/served_model.h"

namespace pie::server {

class ChoiceOutput {
 public:
  ChoiceOutput(std::int32_t index, const PreparedRequest& prepared);

  // Feeds one engine event of this sample; returns what became certain (may be empty).
  StreamDelta push(const Event& event);
  // After the sample's last event: flushes held-back text.
  StreamDelta finish();

  std::int32_t index() const { return index_; }
  bool finished() const { return finish_ != FinishReason::none; }
  FinishReason finish_reason() const { return finish_; }
  const std::string& error() const { return error_; }
  // OpenAI's finish_reason: "tool_calls" when the sample stopped after calling tools.
  std::string finish_reason_name() const;

  const std::string& text() const { return text_; }  // the raw output
  const ParsedOutput& parsed() const;                  // valid after finish()
  const std::vector<SampledToken>& logprobs() const { return logprobs_; }
  const std::vector<std::int32_t>& tokens() const { return tokens_; }

 private:
  std::int32_t index_;
  // Tools on: the tool-call parser (it splits reasoning too). Otherwise the reasoning splitter below, which
  // never reads tool-call markers, or plain text.
  std::optional<ToolCallStreamParser> parser_;
  ParsedOutput plain_;
  // The reasoning split without tools: where the output is, and text held back that may be a marker.
  enum class Section : std::uint8_t { start, reasoning, answer } section_ = Section::answer;
  ReasoningMarkers markers_;
  std::string held_;
  bool after_reasoning_ = false;  // the answer has not started since the close marker
  StreamDelta split_reasoning(std::string_view text, bool final);
  std::string text_;
  std::vector<SampledToken> logprobs_;
  std::vector<std::int32_t> tokens_;
  FinishReason finish_ = FinishReason::none;
  std::string error_;
};

}  // namespace pie::server
