// Backend's default for sampling on the device: a backend without it says so.
#include "pie/backend.h"
#include "pie/error.h"

namespace pie {

void Backend::sample_rows(std::span<const DeviceSampleRow> rows, std::span<DeviceSampleResult> out) {
  (void)rows;
  (void)out;
  throw Error("[backend:" + name() + "] this backend does not sample on the device");
}

}  // namespace pie
