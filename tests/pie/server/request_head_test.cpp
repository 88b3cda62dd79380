// Checks of a request's head before its body is read: body framing and the Bearer scheme.
#include <gtest/gtest.h>

#include "server/request_head.h"

namespace pie::server {
namespace {

httplib::Request request(const char* method, std::initializer_list<std::pair<const char*, const char*>> headers) {
  httplib::Request r;
  r.method = method;
  for (const auto& [k, v] : headers) r.headers.emplace(k, v);
  return r;
}

int status_of(const httplib::Request& r, std::size_t max = 1000) {
  auto error = check_body_framing(r, max);
  return error ? error->status() : 0;
}

TEST(RequestHead, BodyFraming) {
  EXPECT_EQ(status_of(request("POST", {{"Content-Length", "10"}})), 0);
  EXPECT_EQ(status_of(request("POST", {{"Content-Length", " 1000 "}})), 0);
  EXPECT_EQ(status_of(request("POST", {{"Transfer-Encoding", "chunked"}})), 0);
  EXPECT_EQ(status_of(request("POST", {{"Transfer-Encoding", "Chunked"}})), 0);
  EXPECT_EQ(status_of(request("GET", {})), 0);
  EXPECT_EQ(status_of(request("POST", {{"Content-Length", "1001"}})), 413);
  EXPECT_EQ(status_of(request("POST", {{"Content-Length", "99999999999999999999999"}})), 400);
  EXPECT_EQ(status_of(request("POST", {{"Content-Length", "-5"}})), 400);
  EXPECT_EQ(status_of(request("POST", {{"Content-Length", "+5"}})), 400);
  EXPECT_EQ(status_of(request("POST", {{"Content-Length", "5, 5"}})), 400);
  EXPECT_EQ(status_of(request("POST", {{"Content-Length", ""}})), 400);
  EXPECT_EQ(status_of(request("POST", {{"Content-Length", "5"}, {"Content-Length", "6"}})), 400);
  EXPECT_EQ(status_of(request("POST", {{"Content-Length", "5"}, {"Content-Length", "5"}})), 0);
  EXPECT_EQ(status_of(request("POST", {{"Content-Length", "5"}, {"Transfer-Encoding", "chunked"}})), 400);
  EXPECT_EQ(status_of(request("POST", {{"Transfer-Encoding", "gzip, chunked"}})), 501);
  EXPECT_EQ(status_of(request("POST", {{"Transfer-Encoding", "identity"}})), 501);
  EXPECT_EQ(status_of(request("POST", {})), 411);
  EXPECT_EQ(status_of(request("DELETE", {})), 411);
  EXPECT_EQ(status_of(request("GET", {{"Content-Length", "0"}})), 0);
  EXPECT_EQ(status_of(request("GET", {{"Content-Length", "12"}})), 400);
  EXPECT_EQ(status_of(request("HEAD", {{"Transfer-Encoding", "chunked"}})), 400);
  auto error = check_body_framing(request("POST", {{"Content-Length", "-5"}}), 1000);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code(), "invalid_framing");
  EXPECT_NE(std::string(error->what()).find("\"-5\""), std::string::npos) << error->what();
}

TEST(RequestHead, BearerSchemeInAnyCase) {
  EXPECT_TRUE(bearer_matches("Bearer k3y", "k3y"));
  EXPECT_TRUE(bearer_matches("bearer k3y", "k3y"));
  EXPECT_TRUE(bearer_matches("BEARER   k3y ", "k3y"));
  EXPECT_FALSE(bearer_matches("Bearer k3y2", "k3y"));
  EXPECT_FALSE(bearer_matches("Bearerk3y", "k3y"));
  EXPECT_FALSE(bearer_matches("Basic k3y", "k3y"));
  EXPECT_FALSE(bearer_matches("k3y", "k3y"));
  EXPECT_FALSE(bearer_matches("", "k3y"));
  EXPECT_FALSE(bearer_matches("Bearer ", "k3y"));
}

}  // namespace
}  // namespace pie::server
