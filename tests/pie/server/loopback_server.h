// A pie::Server on a free loopback port, serving from a thread of its own from construction until it is
// destroyed (stopped, then joined), for the tests that drive the HTTP layer with a real client.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "pie/engine.h"
#include "pie/server.h"

namespace orchard::testing {

// What every loopback test server sets: its model's name, no request log, a 1 s shutdown grace.
inline pie::ServerOptions loopback_server_options(std::string model_name) {
  pie::ServerOptions so;
  so.model_name = std::move(model_name);
  so.log_requests = false;
  so.shutdown_grace_seconds = 1;
  return so;
}

class LoopbackServer {
 public:
  // Serves `engine` with `options` on a free port (options.port is ignored).
  LoopbackServer(std::shared_ptr<pie::Engine> engine, pie::ServerOptions options) {
    options.port = 0;
    server_ = std::make_unique<pie::Server>(std::move(engine), std::move(options));
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->serve(); });
  }
  ~LoopbackServer() {
    server_->stop();
    thread_.join();
  }
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  int port() const { return port_; }

  // A client of it, waiting up to `read_timeout_s` for an answer, with `key` as a bearer token on every
  // request when not empty.
  httplib::Client client(const std::string& key = "", int read_timeout_s = 120) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(read_timeout_s, 0);
    if (!key.empty()) c.set_default_headers({{"Authorization", "Bearer " + key}});
    return c;
  }

 private:
  std::unique_ptr<pie::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace orchard::testing
