#include "server/http_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "pie/error.h"

namespace pie::server {
namespace {

using Clock = std::chrono::steady_clock;

thread_local Connection* t_connection = nullptr;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(s, 0.0)));
}

int millis_until(Clock::time_point until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1'000'000));
}

void close_fd(int fd) {
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

std::string address_of(const sockaddr_storage& addr, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    port = ntohs(a->sin6_port);
  }
  return text;
}

// A whole-response answer written by the transport itself (the request never reached httplib).
std::string plain_response(int status, const char* reason, const char* message) {
  const std::string body = fmt::format(
      R"({{"error":{{"message":"{}","type":"invalid_request_error","param":null,"code":null}}}})", message);
  return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n"
                     "{}\r\n{}",
                     status, reason, body.size(), status == 503 ? "Retry-After: 1\r\n" : "", body);
}

}  // namespace

Connection* current_connection() { return t_connection; }

// --- Connection ------------------------------------------------------------------------------------

Connection::Connection(int fd, const TransportOptions& options, const std::atomic<bool>& stopping, int wake_fd)
    : fd_(fd), options_(options), stopping_(stopping), wake_fd_(wake_fd), buffer_(16u << 10) {
  begin_request();
}

Connection::~Connection() { close_fd(fd_); }

void Connection::begin_request() {
  in_body_ = false;
  saw_newline_ = false;
  line_bytes_ = 0;
  phase_bytes_ = 0;
  phase_start_ = Clock::now();
  failure_ = ReadFailure::none;
  close_after_response_ = false;
  bytes_written_ = 0;
}

void Connection::begin_body() {
  in_body_ = true;
  phase_bytes_ = 0;
  phase_start_ = Clock::now();
}

Clock::time_point Connection::read_deadline() const {
  const Clock::time_point phase_end =
      phase_start_ + seconds(in_body_ ? options_.body_timeout_seconds : options_.head_timeout_seconds);
  return std::min(phase_end, Clock::now() + seconds(options_.idle_timeout_seconds));
}

bool Connection::wait(short events, Clock::time_point until) const {
  for (;;) {
    pollfd p{fd_, events, 0};
    const int n = ::poll(&p, 1, millis_until(until));
    if (n > 0) return true;  // ready, or an error the next call reports
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

bool Connection::is_readable() const {
  return buffer_begin_ < buffer_end_ || wait(POLLIN, Clock::now() + seconds(options_.idle_timeout_seconds));
}

bool Connection::is_writable() const { return wait(POLLOUT, Clock::now() + seconds(options_.idle_timeout_seconds)); }

ssize_t Connection::read(char* ptr, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t limit = in_body_ ? options_.max_body_bytes : options_.max_head_bytes;
  if (phase_bytes_ >= limit) {
    failure_ = in_body_ ? ReadFailure::body_too_large
                        : saw_newline_ ? ReadFailure::head_too_large : ReadFailure::request_line_too_large;
    return -1;
  }
  size = std::min(size, limit - phase_bytes_);
  if (buffer_begin_ == buffer_end_) {
    const Clock::time_point until = read_deadline();
    for (;;) {
      if (!wait(POLLIN, until)) {
        if (Clock::now() >= until) failure_ = ReadFailure::timed_out;
        return -1;
      }
      const ssize_t n = ::recv(fd_, buffer_.data(), buffer_.size(), 0);
      if (n > 0) {
        buffer_begin_ = 0;
        buffer_end_ = static_cast<std::size_t>(n);
        break;
      }
      if (n == 0) return 0;
      if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    }
  }
  const std::size_t n = std::min(size, buffer_end_ - buffer_begin_);
  std::memcpy(ptr, buffer_.data() + buffer_begin_, n);
  if (!in_body_) {
    // httplib refuses a header line over its limit with a plain 400; it is told apart here (431).
    for (std::size_t i = 0; i < n; ++i) {
      if (ptr[i] == '\n') {
        saw_newline_ = true;
        line_bytes_ = 0;
      } else if (++line_bytes_ > CPPHTTPLIB_HEADER_MAX_LENGTH && saw_newline_) {
        failure_ = ReadFailure::head_too_large;
      }
    }
  }
  buffer_begin_ += n;
  phase_bytes_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t Connection::write(const char* ptr, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    if (!wait(POLLOUT, Clock::now() + seconds(options_.idle_timeout_seconds))) return -1;
    const ssize_t n = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return -1;
    }
    done += static_cast<std::size_t>(n);
  }
  bytes_written_ += size;
  return static_cast<ssize_t>(size);
}

void Connection::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  port = 0;
  ip.clear();
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip = address_of(addr, port);
}

void Connection::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  port = 0;
  ip.clear();
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip = address_of(addr, port);
}

bool Connection::peer_gone() const {
  pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
  if (p.revents & POLLIN) {
    char byte;
    const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

bool Connection::wait_for_request() const {
  if (buffer_begin_ < buffer_end_) return true;
  const Clock::time_point until = Clock::now() + seconds(options_.idle_timeout_seconds);
  for (;;) {
    if (stopping_.load()) return false;
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int n = ::poll(p, 2, millis_until(until));
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (p[1].revents != 0) return false;  // stopping
    if (p[0].revents & (POLLHUP | POLLERR)) return false;
    char byte;
    const ssize_t got = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return got > 0;
  }
}

// --- HttpTransport ---------------------------------------------------------------------------------

HttpTransport::HttpTransport(TransportOptions options, Serve serve)
    : options_(std::move(options)), serve_(std::move(serve)) {
  if (options_.n_workers == 0) throw Error("[server] the transport needs at least one worker thread");
  if (options_.max_waiting == 0) options_.max_waiting = 8 * options_.n_workers;
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw Error(fmt::format("[server] eventfd: {}", std::strerror(errno)));
}

HttpTransport::~HttpTransport() {
  stop();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (int fd : main_queue_) close_fd(fd);
  for (int fd : priority_queue_) close_fd(fd);
  ::close(wake_fd_);
}

int HttpTransport::bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    throw Error(fmt::format("[server] cannot listen on {}:{}: {}", host, port, ::gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd_ = fd;
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
      int bound = port;
      address_of(addr, bound);
      return bound;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  throw Error(fmt::format("[server] cannot listen on {}:{} ({})", host, port, why));
}

HttpTransport::Route HttpTransport::triage(const Pending& p) const {
  // The first request's start, as far as it has arrived (not consumed: the worker reads it).
  char head[4096];
  const ssize_t n = ::recv(p.fd, head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return Route::close;
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? Route::wait : Route::close;
  const std::string_view text(head, static_cast<std::size_t>(n));
  bool could_be_priority = false;
  for (const std::string& path : options_.priority_paths) {
    const std::string line = "GET " + path;
    const std::size_t k = std::min(text.size(), line.size());
    if (text.substr(0, k) != std::string_view(line).substr(0, k)) continue;
    if (text.size() <= line.size()) {
      could_be_priority = true;
      continue;
    }
    const char after = text[line.size()];
    if (after != ' ' && after != '?') continue;
    // Served on the priority thread only when its whole head is here: reading it there never waits.
    if (text.find("\r\n\r\n") != std::string_view::npos) return Route::priority;
    could_be_priority = static_cast<std::size_t>(n) < sizeof head;
  }
  return could_be_priority ? Route::wait : Route::main;
}

void HttpTransport::refuse(int fd, int status, const char* message) const {
  const char* reason = status == 503 ? "Service Unavailable" : status == 408 ? "Request Timeout" : "Bad Request";
  const std::string response = plain_response(status, reason, message);
  (void)::send(fd, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close_fd(fd);
}

void HttpTransport::dispatch(int fd, bool priority) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::deque<int>& queue = priority ? priority_queue_ : main_queue_;
    if (priority || queue.size() < options_.max_waiting) {
      queue.push_back(fd);
      queued_.notify_all();
      return;
    }
  }
  refuse(fd, 503, "the server has too many connections waiting; retry later");
}

void HttpTransport::serve_connection(int fd, bool single_request) {
  Connection connection(fd, options_, stopping_, wake_fd_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.push_back(fd);
  }
  // Destroyed before `connection` closes the socket: close_connections() never touches a reused number.
  struct Unregister {
    HttpTransport& transport;
    int fd;
    ~Unregister() {
      std::lock_guard<std::mutex> lock(transport.mutex_);
      std::erase(transport.live_, fd);
    }
  } unregister{*this, fd};
  t_connection = &connection;
  for (std::size_t n = 0; n < options_.max_requests_per_connection; ++n) {
    if (n > 0 && !connection.wait_for_request()) break;
    connection.begin_request();
    const bool last = single_request || stopping_.load() || n + 1 == options_.max_requests_per_connection;
    bool closed = false;
    const bool ok = serve_(connection, last, closed);
    if (!ok || closed || last || connection.closing()) {
      // A head too large to reach httplib's parser was never answered: say why before closing.
      if (!connection.wrote() && connection.failure() == ReadFailure::request_line_too_large) {
        const std::string r = plain_response(414, "URI Too Long", "the request line is too long");
        (void)connection.write(r.data(), r.size());
      } else if (!connection.wrote() && connection.failure() == ReadFailure::head_too_large) {
        const std::string r =
            plain_response(431, "Request Header Fields Too Large", "the request headers are too large");
        (void)connection.write(r.data(), r.size());
      }
      break;
    }
  }
  t_connection = nullptr;
}

void HttpTransport::worker_loop(bool priority) {
  for (;;) {
    int fd = -1;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      std::deque<int>& queue = priority ? priority_queue_ : main_queue_;
      queued_.wait(lock, [&] { return !queue.empty() || stopping_.load(); });
      if (queue.empty()) return;
      fd = queue.front();
      queue.pop_front();
    }
    try {
      serve_connection(fd, priority);
    } catch (...) {
      // A failure of one connection (httplib's own, an allocation) ends that connection only.
      t_connection = nullptr;
    }
  }
}

void HttpTransport::run() {
  if (listen_fd_ < 0) throw Error("[server] run() before bind()");
  running_ = true;
  // Two for /health and /metrics: one client slow to read its answer cannot hold both.
  for (int i = 0; i < 2; ++i) workers_.emplace_back([this] { worker_loop(true); });
  for (std::size_t i = 0; i < options_.n_workers; ++i) workers_.emplace_back([this] { worker_loop(false); });

  // Accepted connections wait here (no thread each) until their first request shows where it goes.
  std::vector<Pending> pending;
  constexpr std::size_t kMaxPending = 4096;
  std::vector<pollfd> polls;
  while (!stopping_.load()) {
    polls.clear();
    polls.push_back({wake_fd_, POLLIN, 0});
    polls.push_back({listen_fd_, POLLIN, 0});
    Clock::time_point next = Clock::now() + std::chrono::seconds(1);
    for (const Pending& p : pending) {
      polls.push_back({p.fd, POLLIN, 0});
      next = std::min(next, p.since + seconds(options_.head_timeout_seconds));
    }
    const int n = ::poll(polls.data(), polls.size(), std::max(millis_until(next), 1));
    if (n < 0 && errno != EINTR) break;
    if (stopping_.load()) break;
    // Triage first: new connections go to the end of `pending`.
    const Clock::time_point now = Clock::now();
    std::vector<Pending> still;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const Pending& p = pending[i];
      const short revents = polls[i + 2].revents;
      Route route = Route::wait;
      if (revents & (POLLHUP | POLLERR)) {
        route = Route::close;
      } else if (revents & POLLIN) {
        route = triage(p);
      }
      if (route == Route::wait && now - p.since > seconds(options_.head_timeout_seconds)) {
        refuse(p.fd, 408, "the request did not arrive in time");
        continue;
      }
      switch (route) {
        case Route::wait: still.push_back(p); break;
        case Route::close: close_fd(p.fd); break;
        case Route::main: dispatch(p.fd, false); break;
        case Route::priority: dispatch(p.fd, true); break;
      }
    }
    pending.swap(still);
    if (polls[1].revents & POLLIN) {
      for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          // EAGAIN: all taken. Out of descriptors (EMFILE, ENFILE): the backlog keeps them; a pause spares
          // the CPU a busy loop until connections close.
          if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(20));
          break;
        }
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (pending.size() >= kMaxPending) {
          refuse(fd, 503, "the server has too many connections opening; retry later");
          continue;
        }
        pending.push_back({fd, Clock::now()});
      }
    }
  }
  for (const Pending& p : pending) close_fd(p.fd);
  stop();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
  running_ = false;
}

void HttpTransport::close_connections() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int fd : live_) ::shutdown(fd, SHUT_RDWR);
}

void HttpTransport::stop() {
  if (stopping_.exchange(true)) return;
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  std::lock_guard<std::mutex> lock(mutex_);
  queued_.notify_all();
}

}  // namespace pie::server
