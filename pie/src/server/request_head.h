// Checks of a request's head made before its body is read: how the body is framed (Content-Length,
// Transfer-Encoding) and the API key. A request that fails one is answered at once, and its connection
// closed, since its body was not read.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <httplib.h>

#include "server/api_error.h"

namespace pie::server {

// The error for a body framed in a way this server does not read, or too large to read: 400 for a
// Content-Length that is not one decimal number (-5, "1, 2") or that comes with a Transfer-Encoding
// (request smuggling), 501 for a transfer coding other than chunked, 411 for a POST with neither, 413
// for a Content-Length over max_body_bytes, 400 for a body on a GET or HEAD (nothing would read it).
// nullopt when the body may be read.
std::optional<ApiError> check_body_framing(const httplib::Request& request, std::size_t max_body_bytes);

// Whether an Authorization header value carries `key` with the Bearer scheme (the scheme in any case, as
// HTTP auth schemes are case-insensitive; one or more spaces after it). Compares the key in time that
// does not depend on where it differs.
bool bearer_matches(const std::string& header, const std::string& key);

}  // namespace pie::server
