// The web page's files (pie/src/server/web/ and the Debian JavaScript libraries it uses), embedded in the
// binary at build time, gzip-compressed (tools/embed_web_assets.cmake generates web_assets.cpp).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

namespace pie::server {

struct WebAsset {
  std::string_view path;          // the URL path: "/", "/ui/app.js", "/ui/lib/marked.js"
  std::string_view content_type;  // "text/html; charset=utf-8", ...
  std::string_view gzip;          // the file, gzip-compressed
  std::size_t size = 0;           // the file's size uncompressed
  std::string_view etag;          // a strong ETag (quoted): a hash of the file
};

// Every embedded file (empty when the server was built without the page, ORCHARD_WEB_UI=OFF).
std::span<const WebAsset> web_assets();
// The asset served at `path`, or nullptr.
const WebAsset* find_web_asset(std::string_view path);
// The page's features left out because their library was absent at build time, one line each
// ("markdown: libjs-marked was not installed"); the page says so too.
std::span<const std::string_view> web_missing_features();

}  // namespace pie::server
