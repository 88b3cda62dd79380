#include "server/web_routes.h"

#include <httplib.h>
#include <zlib.h>

#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "server/api_error.h"
#include "server/web_assets.h"

namespace pie::server {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The embedded bytes inflated, for a client that takes no gzip.
std::string gunzip(std::string_view gz, std::size_t size) {
  std::string out(size, '\0');
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw ApiError(500, "server_error", "[web] inflateInit2 failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  const std::size_t produced = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || produced != size) {
    throw ApiError(500, "server_error", "[web] an embedded file does not inflate to its size");
  }
  return out;
}

// The page reads model output into the DOM (sanitized): scripts come only from this server, and the page
// is never framed.
constexpr const char* kPagePolicy =
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

}  // namespace

bool is_web_path(std::string_view path) { return path == "/" || path.starts_with("/ui/"); }

bool accepts_gzip(std::string_view header) {
  while (!header.empty()) {
    const std::size_t comma = header.find(',');
    std::string_view item = trim(header.substr(0, comma));
    header = comma == std::string_view::npos ? std::string_view() : header.substr(comma + 1);
    const std::size_t semi = item.find(';');
    const std::string_view coding = trim(item.substr(0, semi));
    if (coding != "gzip" && coding != "x-gzip" && coding != "*") continue;
    if (semi == std::string_view::npos) return true;
    // "q=0" (or 0.0, 0.000) refuses it.
    std::string_view param = trim(item.substr(semi + 1));
    if (!param.starts_with("q=")) return true;
    const double q = std::strtod(std::string(param.substr(2)).c_str(), nullptr);
    if (q > 0) return true;
  }
  return false;
}

void answer_web_asset(const httplib::Request& req, httplib::Response& res) {
  const WebAsset* asset = find_web_asset(req.path);
  if (asset == nullptr) {
    if (web_assets().empty()) {
      throw ApiError(404, "invalid_request_error",
                     "this server was built without its web page (cmake -DORCHARD_WEB_UI=OFF)", {}, "not_found");
    }
    throw ApiError(404, "invalid_request_error", fmt::format("unknown route: GET {}", req.path), {}, "not_found");
  }
  res.set_header("ETag", std::string(asset->etag));
  res.set_header("Cache-Control", "no-cache");  // revalidated (a 304) on every load: a new build shows at once
  res.set_header("Vary", "Accept-Encoding");
  res.set_header("X-Content-Type-Options", "nosniff");
  if (asset->path == "/") {
    res.set_header("Content-Security-Policy", kPagePolicy);
    res.set_header("Referrer-Policy", "no-referrer");
  }
  if (req.get_header_value("If-None-Match") == asset->etag) {
    res.status = 304;
    return;
  }
  const std::string type(asset->content_type);
  if (accepts_gzip(req.get_header_value("Accept-Encoding"))) {
    // A provider with a length: httplib sends it as it is (it compresses bodies, not these).
    res.set_header("Content-Encoding", "gzip");
    const std::string_view gz = asset->gzip;
    res.set_content_provider(gz.size(), type, [gz](std::size_t offset, std::size_t length, httplib::DataSink& sink) {
      return sink.write(gz.data() + offset, length);
    });
  } else {
    res.set_content(gunzip(asset->gzip, asset->size), type);
  }
}

}  // namespace pie::server
