// The server's sockets: the listening socket, the accept loop, the worker threads, and the stream each
// request is read from, with the limits httplib 0.11 does not keep by itself:
//   - the request head (request line and headers) at most max_head_bytes and head_timeout_seconds;
//   - the body at most max_body_bytes as read from the socket, whatever the transfer encoding (httplib
//     checks only a Content-Length; a chunked body was read without bound);
//   - connections whose first request is a GET of a priority path (/health, /metrics) served on threads
//     of their own, so they answer however busy the workers are;
//   - connections waiting for a worker past max_waiting answered 503 at once;
//   - the client's end of a connection observable while its request runs (Connection::peer_gone), so a
//     request whose client went away can be cancelled.
// httplib still parses and routes each request: the transport hands it the stream (Serve).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

namespace pie::server {

struct TransportOptions {
  std::size_t max_head_bytes = 64u << 10;    // request line and headers, together
  std::size_t max_body_bytes = 16u << 20;    // body bytes as read (chunked framing included)
  double head_timeout_seconds = 10;          // for the whole head, from its first byte
  double body_timeout_seconds = 60;          // for the whole body
  double idle_timeout_seconds = 5;           // keep-alive wait for the next request; each read and write
  std::size_t n_workers = 128;               // connections served at once
  std::size_t max_waiting = 0;               // connections waiting for a worker; 0: 8 * n_workers
  std::size_t max_requests_per_connection = 100000;
  std::vector<std::string> priority_paths = {"/health", "/metrics"};
};

// Why reading a request failed, for its error answer.
enum class ReadFailure : std::uint8_t { none, request_line_too_large, head_too_large, body_too_large, timed_out };

// One client connection, as the worker serving it sees it: a buffered httplib::Stream over the socket that
// keeps the limits of the request being read.
class Connection final : public httplib::Stream {
 public:
  Connection(int fd, const TransportOptions& options, const std::atomic<bool>& stopping, int wake_fd);
  ~Connection() override;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, std::size_t size) override;
  ssize_t write(const char* ptr, std::size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return fd_; }

  // A new request starts: the head limits apply.
  void begin_request();
  // The head was read (httplib routes the request now): the body limits apply.
  void begin_body();
  // Whether the client closed its end or reset the connection. Cheap (a poll and a peek); thread-safe.
  bool peer_gone() const;
  // The answer being sent ends this connection (a refused request whose body was not read).
  void close_after_response() { close_after_response_ = true; }
  bool closing() const { return close_after_response_; }
  ReadFailure failure() const { return failure_; }
  bool wrote() const { return bytes_written_ > 0; }
  // Waits for the next request's first byte; false on idle timeout, a closed peer or stop.
  bool wait_for_request() const;

 private:
  bool wait(short events, std::chrono::steady_clock::time_point until) const;
  std::chrono::steady_clock::time_point read_deadline() const;

  int fd_;
  const TransportOptions& options_;
  const std::atomic<bool>& stopping_;
  int wake_fd_;
  std::vector<char> buffer_;
  std::size_t buffer_begin_ = 0, buffer_end_ = 0;
  bool in_body_ = false;
  bool saw_newline_ = false;    // the head's first line is complete
  std::size_t line_bytes_ = 0;  // of the head line being read
  std::size_t phase_bytes_ = 0;
  std::chrono::steady_clock::time_point phase_start_;
  ReadFailure failure_ = ReadFailure::none;
  bool close_after_response_ = false;
  std::size_t bytes_written_ = 0;
};

// The connection the calling thread is serving; nullptr on any other thread.
Connection* current_connection();

class HttpTransport {
 public:
  // Runs one request read from `connection` (httplib's Server::process_request); returns false when the
  // connection must close. `close_connection`: this is the connection's last request.
  using Serve = std::function<bool(Connection& connection, bool close_connection, bool& connection_closed)>;

  HttpTransport(TransportOptions options, Serve serve);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds and listens; returns the port (port 0: any free one). Throws pie::Error when it cannot.
  int bind(const std::string& host, int port);
  // Accepts and serves until stop(); returns once every connection is closed.
  void run();
  // Thread-safe: stops accepting, wakes idle connections; requests in progress finish on their workers.
  void stop();
  // Thread-safe: shuts every open connection down (a worker blocked on a client that stopped reading
  // returns at once). After stop(), when the time to finish is over.
  void close_connections();
  const TransportOptions& options() const { return options_; }

 private:
  struct Pending {
    int fd;
    std::chrono::steady_clock::time_point since;
  };
  enum class Route : std::uint8_t { wait, main, priority, close };
  Route triage(const Pending& p) const;
  void dispatch(int fd, bool priority);
  void worker_loop(bool priority);
  void serve_connection(int fd, bool single_request);
  void refuse(int fd, int status, const char* message) const;

  TransportOptions options_;
  Serve serve_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd, readable once stop() was called
  std::atomic<bool> stopping_{false};
  std::atomic<bool> running_{false};

  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<int> main_queue_, priority_queue_;
  std::vector<int> live_;  // sockets being served (registered before use, removed before close)
  std::vector<std::thread> workers_;
};

}  // namespace pie::server
