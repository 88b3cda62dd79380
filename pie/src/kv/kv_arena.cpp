#include "kv/kv_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "pie/error.h"

namespace pie::kv_detail {

namespace {

std::size_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;  // unknown: no bound
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_size);
}

}  // namespace

KvArena::KvArena(std::int32_t n_layer, std::size_t pool_bytes, bool resident) : pool_bytes_(pool_bytes) {
  std::size_t total = 0;
  if (n_layer <= 0 || pool_bytes == 0 ||
      __builtin_mul_overflow(static_cast<std::size_t>(n_layer) * 2, pool_bytes, &total)) {
    throw Error("[kv_cache] arena of " + std::to_string(n_layer) + " layers x 2 pools x " +
                std::to_string(pool_bytes) + " bytes: size overflows");
  }
  // Checked here rather than left to the kernel: with overcommit a mapping larger than the machine can
  // succeed and the process dies later, on first touch, far from the cause.
  const std::size_t physical = physical_memory_bytes();
  if (physical != 0 && total > physical) {
    throw Error("[kv_cache] arena of " + std::to_string(total) + " bytes exceeds this machine's " +
                std::to_string(physical) + " bytes of physical memory");
  }
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    throw Error("[kv_cache] cannot allocate an arena of " + std::to_string(total) +
                " bytes: " + std::strerror(err));
  }
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  if (total >= kHuge) ::madvise(p, total, MADV_HUGEPAGE);  // advice only: failure is harmless
  base_ = static_cast<std::byte*>(p);
  total_bytes_ = total;
  if (resident) commit();
}

void KvArena::commit() {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and the pages are touched instead
#endif
  if (::madvise(base_, total_bytes_, MADV_POPULATE_WRITE) == 0) return;
  const int err = errno;
  if (err != EINVAL) {
    ::munmap(base_, total_bytes_);
    base_ = nullptr;
    throw Error("[kv_cache] cannot commit an arena of " + std::to_string(total_bytes_) + " bytes: " +
                std::strerror(err));
  }
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  for (std::size_t at = 0; at < total_bytes_; at += page) base_[at] = std::byte{0};
}

KvArena::~KvArena() {
  if (base_ != nullptr) ::munmap(base_, total_bytes_);
}

}  // namespace pie::kv_detail
