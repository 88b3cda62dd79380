#include "server/request_head.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace pie::server {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trimmed(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

// Compares without an early exit, so the key cannot be guessed byte by byte from response times.
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

ApiError framing_error(int status, const std::string& message, const char* code) {
  return ApiError(status, "invalid_request_error", message, {}, code);
}

}  // namespace

std::optional<ApiError> check_body_framing(const httplib::Request& request, std::size_t max_body_bytes) {
  const std::size_t n_lengths = request.get_header_value_count("Content-Length");
  const std::size_t n_codings = request.get_header_value_count("Transfer-Encoding");
  // The routes that read no body (GET, HEAD): a body there would be taken for the next request.
  const bool reads_body = request.method == "POST" || request.method == "PUT" || request.method == "PATCH" ||
                          request.method == "DELETE";
  if (!reads_body && (n_codings > 0 || (n_lengths > 0 && request.get_header_value("Content-Length") != "0"))) {
    return framing_error(400, fmt::format("a {} request carries no body here", request.method), "invalid_framing");
  }
  if (n_codings > 0) {
    if (n_lengths > 0) {
      return framing_error(400, "a request may not carry both Content-Length and Transfer-Encoding",
                           "invalid_framing");
    }
    const std::string coding = lower(trimmed(request.get_header_value("Transfer-Encoding")));
    if (n_codings > 1 || coding != "chunked") {
      return framing_error(501, fmt::format("the transfer coding \"{}\" is not supported (only chunked)", coding),
                           "unsupported_transfer_encoding");
    }
    return std::nullopt;  // chunked: the transport bounds the bytes read
  }
  if (n_lengths == 0) {
    if (reads_body) {
      return framing_error(411, "the request has a body but no Content-Length (or chunked Transfer-Encoding)",
                           "length_required");
    }
    return std::nullopt;
  }
  std::string value = trimmed(request.get_header_value("Content-Length"));
  for (std::size_t i = 1; i < n_lengths; ++i) {
    if (trimmed(request.get_header_value("Content-Length", i)) != value) {
      return framing_error(400, "the request carries different Content-Length values", "invalid_framing");
    }
  }
  const bool digits = !value.empty() && value.size() <= 19 &&
                      std::all_of(value.begin(), value.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  if (!digits) {
    return framing_error(400, fmt::format("Content-Length must be a non-negative decimal number, got \"{}\"",
                                          value.substr(0, 32)),
                         "invalid_framing");
  }
  const unsigned long long length = std::stoull(value);
  if (length > max_body_bytes) {
    return framing_error(413, fmt::format("the request body is larger than the limit of {} bytes", max_body_bytes),
                         "request_too_large");
  }
  return std::nullopt;
}

bool bearer_matches(const std::string& header, const std::string& key) {
  constexpr std::string_view kScheme = "bearer";
  if (header.size() <= kScheme.size() || lower(header.substr(0, kScheme.size())) != kScheme) return false;
  std::size_t at = kScheme.size();
  if (header[at] != ' ' && header[at] != '\t') return false;
  while (at < header.size() && (header[at] == ' ' || header[at] == '\t')) ++at;
  std::string_view token(header);
  token.remove_prefix(at);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
  return same_secret(token, key);
}

}  // namespace pie::server
