// OpenAI response bodies: chat.completion and text_completion objects, their streamed chunks, usage and
// logprobs, and the server-sent-event framing. Token texts come from the tokenizer as raw bytes; invalid
// UTF-8 (a token holding part of a character) is replaced, never an exception while answering.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pie/engine.h"
#include "server/api_request.h"
#include "server/choice_output.h"

namespace pie::server {

// Serializes without throwing on invalid UTF-8 (replaced by U+FFFD).
std::string dump_json(const Json& value);
// "data: <json>\n\n".
std::string sse_event(const Json& value);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

Json usage_json(const Usage& usage);

// {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
Json chat_logprobs_json(const std::vector<SampledToken>& logprobs, const tokenizers::Tokenizer& tokenizer);
// Legacy completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; offset: where the
// first token's text starts in the returned text.
Json completion_logprobs_json(const std::vector<SampledToken>& logprobs, const tokenizers::Tokenizer& tokenizer,
                              std::size_t offset);

// The echoed prompt's legacy logprobs (echo with logprobs, as the legacy OpenAI API and vLLM return them):
// every prompt token, the first one's logprob and alternatives null, the others' from `logprobs`
// (Event::prompt_logprobs: prompt token i + 1 at i); text_offset where each token's text starts in the
// prompt's decoded text.
Json prompt_logprobs_json(std::span<const std::int32_t> prompt, const std::vector<SampledToken>& logprobs,
                          const tokenizers::Tokenizer& tokenizer);
// Two legacy logprobs objects one after the other (the echoed prompt's, then the output's).
Json concat_completion_logprobs(Json first, const Json& second);

// The message of a finished chat choice: role, content (null with tool calls and no text),
// reasoning_content when any, tool_calls when any.
Json chat_message_json(const ParsedOutput& parsed);

// A chat.completion.chunk's delta from a StreamDelta (first_of_call pieces carry id, type and name).
Json chat_delta_json(const StreamDelta& delta);

struct ResponseHeader {
  std::string id;        // "chatcmpl-..." / "cmpl-..."
  std::int64_t created = 0;
  std::string model;
  std::string system_fingerprint;
};

// chat.completion.chunk with one choice.
Json chat_chunk_json(const ResponseHeader& header, std::int32_t index, Json delta,
                     const std::optional<std::string>& finish_reason, Json logprobs, bool usage_null);
// The last chunk with include_usage: no choices, the usage.
Json usage_chunk_json(const ResponseHeader& header, const char* object, const Usage& usage);
// text_completion chunk with one choice.
Json completion_chunk_json(const ResponseHeader& header, std::int32_t index, const std::string& text,
                           const std::optional<std::string>& finish_reason, Json logprobs, bool usage_null);

}  // namespace pie::server
