#include "store/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "pie/model_store.h"

namespace pie::store {
namespace {

namespace fs = std::filesystem;

std::string reason(int error) { return std::strerror(error); }

// A name no other writer of this process or another uses: ".tmp-<target>-<pid>-<n>".
fs::path temp_name(const fs::path& target) {
  static std::atomic<std::uint64_t> counter{0};
  return target.parent_path() /
         fmt::format(".tmp-{}-{}-{}", target.filename().string(), ::getpid(), counter.fetch_add(1));
}

}  // namespace

AtomicFile::AtomicFile(fs::path target) : target_(std::move(target)) {
  std::error_code ec;
  fs::create_directories(target_.parent_path(), ec);
  if (ec) {
    throw StoreError(fmt::format("[store] cannot create the folder {}: {}",
                                 target_.parent_path().string(), ec.message()));
  }
  temp_ = temp_name(target_);
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw StoreError(
        fmt::format("[store] cannot write {}: {}", target_.parent_path().string(), reason(errno)));
  }
}

AtomicFile::AtomicFile(fs::path existing, fs::path target, bool keep_on_failure)
    : temp_(std::move(existing)), target_(std::move(target)), keep_on_failure_(keep_on_failure) {
  std::error_code ec;
  fs::create_directories(temp_.parent_path(), ec);
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw StoreError(fmt::format("[store] cannot write {}: {}", temp_.string(), reason(errno)));
  const off_t end = ::lseek(fd_, 0, SEEK_END);
  size_ = end > 0 ? static_cast<std::uint64_t>(end) : 0;
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!done_ && (!keep_on_failure_ || size_ == 0)) {
    std::error_code ec;
    fs::remove(temp_, ec);
  }
}

void AtomicFile::write(std::span<const std::uint8_t> bytes) {
  const std::uint8_t* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw StoreError(fmt::format("[store] cannot write {} (after {} bytes): {}", target_.string(),
                                   size_, reason(n < 0 ? errno : ENOSPC)));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
    size_ += static_cast<std::uint64_t>(n);
  }
}

void AtomicFile::write(std::string_view text) {
  write(std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

void AtomicFile::truncate() {
  if (::ftruncate(fd_, 0) != 0) {
    throw StoreError(fmt::format("[store] cannot truncate {}: {}", temp_.string(), reason(errno)));
  }
  size_ = 0;
}

void AtomicFile::commit() { commit_as(target_); }

void AtomicFile::commit_as(const fs::path& target) {
  // A failed commit leaves nothing under the target's name, and no temporary file either.
  keep_on_failure_ = false;
  if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
    const int error = errno;
    fd_ = -1;
    throw StoreError(fmt::format("[store] cannot write {}: {}", target.string(), reason(error)));
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), target.c_str()) != 0) {
    throw StoreError(fmt::format("[store] cannot write {}: {}", target.string(), reason(errno)));
  }
  done_ = true;
}

void write_file_atomic(const fs::path& path, std::string_view text) {
  AtomicFile file(path);
  file.write(text);
  file.commit();
}

}  // namespace pie::store
