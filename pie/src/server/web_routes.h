// GET / and GET /ui/...: the web page (chat, structured-output playground, live dashboard) from the files
// embedded at build time (server/web_assets.h). These routes need no API key: the files are the same for
// everyone and hold no data; everything the page shows comes through the API, with the key the user
// types into the page. A browser gets the gzip-compressed bytes as they are embedded; a client that does
// not accept gzip gets them inflated. Strong ETags: If-None-Match answers 304.
#pragma once

#include <string_view>

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace pie::server {

// "/" and every path under "/ui/".
bool is_web_path(std::string_view path);

// Answers the asset at req.path. Throws ApiError 404 for a path with no asset (naming the build option
// when the page was left out of the build).
void answer_web_asset(const httplib::Request& req, httplib::Response& res);

// Whether an Accept-Encoding header value accepts gzip ("gzip", "*", not "gzip;q=0").
bool accepts_gzip(std::string_view accept_encoding);

}  // namespace pie::server
