// SHA-256 (FIPS 180-4), for the model store's content addresses. Streaming: update() any number of times,
// then hex_digest(). About 200 MB/s in portable code; the store hashes a blob once, not at every load.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace pie::store {

class Sha256 {
 public:
  Sha256();
  void update(std::span<const std::uint8_t> data);
  void update(std::string_view text);
  // The digest as 64 lower-case hex digits. Ends the computation: call nothing else afterwards.
  std::string hex_digest();

 private:
  void block(const std::uint8_t* p);
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

// The sha256 of a whole file, as hex. Throws pie::ModelError naming the file when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);
// The sha256 of `bytes`, as hex.
std::string sha256_hex(std::string_view bytes);

}  // namespace pie::store
