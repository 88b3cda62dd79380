#include "model/mapped_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "pie/error.h"

namespace pie::model_detail {

namespace {
// mmap cannot map 0 bytes; an empty file gets a static empty view.
const std::uint8_t kEmpty[1] = {0};
}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw ModelError(fmt::format("[model] {}: cannot open: {}", path.string(), std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ModelError(fmt::format("[model] {}: not a regular file", path.string()));
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return std::shared_ptr<const MappedFile>(new MappedFile(kEmpty, 0));
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (m == MAP_FAILED) {
    throw ModelError(fmt::format("[model] {}: cannot map {} bytes: {}", path.string(), size, std::strerror(err)));
  }
  return std::shared_ptr<const MappedFile>(new MappedFile(static_cast<const std::uint8_t*>(m), size));
}

MappedFile::~MappedFile() {
  if (size_ != 0) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

}  // namespace pie::model_detail
