// A file written whole or not at all: bytes go to a temporary file beside the target (same folder,
// so the rename is atomic), which commit() syncs and renames over the target; destroyed before
// commit(), the temporary file is removed. Every failure (a full disk, no permission) is a
// StoreError naming the file and the system's reason.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

namespace pie::store {

class AtomicFile {
 public:
  // Opens a temporary file in target's folder (created when missing). Throws StoreError.
  explicit AtomicFile(std::filesystem::path target);
  // Opens `existing` to append to it (a partial download), renamed to `target` by commit().
  AtomicFile(std::filesystem::path existing, std::filesystem::path target, bool keep_on_failure);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Throws StoreError (ENOSPC: "no space left on device").
  void write(std::span<const std::uint8_t> bytes);
  void write(std::string_view text);
  std::uint64_t size() const { return size_; }
  // Drops what was written so far (a download the server restarts from the beginning).
  void truncate();
  // fsync, close, rename onto the target. Throws StoreError; the temporary file is then removed.
  void commit();
  // Renames the written file onto `target` instead of the constructor's (a blob named by its
  // digest).
  void commit_as(const std::filesystem::path& target);
  const std::filesystem::path& temp_path() const { return temp_; }

 private:
  std::filesystem::path temp_;
  std::filesystem::path target_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  bool keep_on_failure_ = false;
  bool done_ = false;
};

// Writes `text` to `path` atomically. Throws StoreError.
void write_file_atomic(const std::filesystem::path& path, std::string_view text);

}  // namespace pie::store
