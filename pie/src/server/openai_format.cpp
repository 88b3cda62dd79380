#include "server/openai_format.h"

#include <cmath>

namespace pie::server {
namespace {

Json bytes_json(const std::string& bytes) {
  Json out = Json::array();
  for (unsigned char c : bytes) out.push_back(static_cast<int>(c));
  return out;
}

// The token as text: valid UTF-8 kept, a split character replaced (the bytes field keeps the truth).
std::string token_string(const std::string& bytes) {
  return Json::parse(Json(bytes).dump(-1, ' ', false, Json::error_handler_t::replace)).get<std::string>();
}

// Float logprobs of -inf (a token the mask forbade, among the alternatives) are not JSON: a large negative.
double finite(float logprob) { return std::isfinite(logprob) ? logprob : -9999.0; }

}  // namespace

std::string dump_json(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string sse_event(const Json& value) { return "data: " + dump_json(value) + "\n\n"; }

Json usage_json(const Usage& usage) {
  Json out;
  out["prompt_tokens"] = usage.prompt_tokens;
  out["completion_tokens"] = usage.completion_tokens;
  out["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  out["prompt_tokens_details"] = Json{{"cached_tokens", usage.cached_prompt_tokens}};
  // Speculative decoding, in OpenAI's words for predicted outputs: draft tokens kept and rejected.
  if (usage.draft_tokens > 0) {
    out["completion_tokens_details"] =
        Json{{"accepted_prediction_tokens", usage.accepted_draft_tokens},
             {"rejected_prediction_tokens", usage.draft_tokens - usage.accepted_draft_tokens}};
  }
  return out;
}

Json chat_logprobs_json(const std::vector<SampledToken>& logprobs, const tokenizers::Tokenizer& tokenizer) {
  Json content = Json::array();
  for (const SampledToken& t : logprobs) {
    const std::string& bytes = tokenizer.token_bytes(t.token);
    Json entry;
    entry["token"] = token_string(bytes);
    entry["logprob"] = finite(t.logprob);
    entry["bytes"] = bytes_json(bytes);
    Json top = Json::array();
    for (const TokenLogprob& alt : t.top) {
      const std::string& alt_bytes = tokenizer.token_bytes(alt.token);
      top.push_back(Json{{"token", token_string(alt_bytes)}, {"logprob", finite(alt.logprob)},
                         {"bytes", bytes_json(alt_bytes)}});
    }
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return Json{{"content", std::move(content)}, {"refusal", nullptr}};
}

Json completion_logprobs_json(const std::vector<SampledToken>& logprobs, const tokenizers::Tokenizer& tokenizer,
                              std::size_t offset) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
  for (const SampledToken& t : logprobs) {
    const std::string& bytes = tokenizer.token_bytes(t.token);
    tokens.push_back(token_string(bytes));
    token_logprobs.push_back(finite(t.logprob));
    Json alternatives = Json::object();
    for (const TokenLogprob& alt : t.top) alternatives[token_string(tokenizer.token_bytes(alt.token))] = finite(alt.logprob);
    top.push_back(std::move(alternatives));
    offsets.push_back(offset);
    offset += bytes.size();
  }
  return Json{{"tokens", std::move(tokens)}, {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top)}, {"text_offset", std::move(offsets)}};
}

Json prompt_logprobs_json(std::span<const std::int32_t> prompt, const std::vector<SampledToken>& logprobs,
                          const tokenizers::Tokenizer& tokenizer) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
  // Offsets follow the decoded text (special tokens write none, a split character counts once whole).
  tokenizers::StreamingDetokenizer detok(tokenizer, tokenizers::DecodeOptions{.skip_special = true});
  std::size_t offset = 0;
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    tokens.push_back(token_string(tokenizer.token_bytes(prompt[i])));
    offsets.push_back(offset);
    offset += detok.push(prompt[i]).size();
    if (i == 0 || i - 1 >= logprobs.size()) {  // the first token has none (nor would a short list)
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    const SampledToken& t = logprobs[i - 1];
    token_logprobs.push_back(finite(t.logprob));
    Json alternatives = Json::object();
    for (const TokenLogprob& alt : t.top) {
      alternatives[token_string(tokenizer.token_bytes(alt.token))] = finite(alt.logprob);
    }
    top.push_back(std::move(alternatives));
  }
  return Json{{"tokens", std::move(tokens)}, {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top)}, {"text_offset", std::move(offsets)}};
}

Json concat_completion_logprobs(Json first, const Json& second) {
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
    for (const Json& v : second.at(key)) first.at(key).push_back(v);
  }
  return first;
}

Json chat_message_json(const ParsedOutput& parsed) {
  Json message;
  message["role"] = "assistant";
  if (parsed.content.empty() && !parsed.tool_calls.empty()) {
    message["content"] = nullptr;
  } else {
    message["content"] = parsed.content;
  }
  if (!parsed.reasoning_content.empty()) message["reasoning_content"] = parsed.reasoning_content;
  if (!parsed.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCall& call : parsed.tool_calls) {
      calls.push_back(Json{{"id", call.id},
                           {"type", "function"},
                           {"function", Json{{"name", call.name}, {"arguments", call.arguments}}}});
    }
    message["tool_calls"] = std::move(calls);
  }
  message["refusal"] = nullptr;
  return message;
}

Json chat_delta_json(const StreamDelta& delta) {
  Json out = Json::object();
  if (!delta.reasoning_content.empty()) out["reasoning_content"] = delta.reasoning_content;
  if (!delta.content.empty()) out["content"] = delta.content;
  if (!delta.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCallDelta& piece : delta.tool_calls) {
      // Pieces of one call in one delta become one entry, as OpenAI sends them (one entry per index).
      if (!calls.empty() && calls.back()["index"] == piece.index && piece.id.empty() && piece.name.empty()) {
        calls.back()["function"]["arguments"] =
            calls.back()["function"]["arguments"].get<std::string>() + piece.arguments;
        continue;
      }
      Json call;
      call["index"] = piece.index;
      Json function = Json::object();
      if (!piece.id.empty()) {
        call["id"] = piece.id;
        call["type"] = "function";
      }
      if (!piece.name.empty()) function["name"] = piece.name;
      function["arguments"] = piece.arguments;
      call["function"] = std::move(function);
      calls.push_back(std::move(call));
    }
    out["tool_calls"] = std::move(calls);
  }
  return out;
}

namespace {
Json header_json(const ResponseHeader& header, const char* object) {
  Json out;
  out["id"] = header.id;
  out["object"] = object;
  out["created"] = header.created;
  out["model"] = header.model;
  out["system_fingerprint"] = header.system_fingerprint;
  return out;
}
}  // namespace

Json chat_chunk_json(const ResponseHeader& header, std::int32_t index, Json delta,
                     const std::optional<std::string>& finish_reason, Json logprobs, bool usage_null) {
  Json out = header_json(header, "chat.completion.chunk");
  Json choice;
  choice["index"] = index;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_reason ? Json(*finish_reason) : Json();
  out["choices"] = Json::array({std::move(choice)});
  if (usage_null) out["usage"] = nullptr;
  return out;
}

Json usage_chunk_json(const ResponseHeader& header, const char* object, const Usage& usage) {
  Json out = header_json(header, object);
  out["choices"] = Json::array();
  out["usage"] = usage_json(usage);
  return out;
}

Json completion_chunk_json(const ResponseHeader& header, std::int32_t index, const std::string& text,
                           const std::optional<std::string>& finish_reason, Json logprobs, bool usage_null) {
  Json out = header_json(header, "text_completion");
  Json choice;
  choice["index"] = index;
  choice["text"] = text;
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_reason ? Json(*finish_reason) : Json();
  out["choices"] = Json::array({std::move(choice)});
  if (usage_null) out["usage"] = nullptr;
  return out;
}

}  // namespace pie::server
