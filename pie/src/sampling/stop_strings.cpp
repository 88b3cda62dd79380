#include <algorithm>
#include <string>

#include "pie/error.h"
#include "pie/sampling.h"

namespace pie {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty()) {
      throw RequestError("[request] stop[" + std::to_string(i) + "] is an empty string", "stop");
    }
  }
}

StopStringMatcher::Result StopStringMatcher::push(std::string_view text) {
  Result r;
  if (stopped_) {
    r.stopped = true;
    r.matched = matched_;
    return r;
  }
  pending_.append(text);
  // The stop that ends first in the stream (then the one that starts first): the same answer however the
  // text was split into pushes, since pushing byte by byte would have met that one first.
  std::size_t best_end = std::string::npos, best_pos = 0;
  const std::string* best = nullptr;
  for (const std::string& s : stops_) {
    const std::size_t pos = pending_.find(s);
    if (pos == std::string::npos) continue;
    const std::size_t end = pos + s.size();
    if (best == nullptr || end < best_end || (end == best_end && pos < best_pos)) {
      best = &s;
      best_end = end;
      best_pos = pos;
    }
  }
  if (best != nullptr) {
    r.text = pending_.substr(0, best_pos);
    r.stopped = true;
    r.matched = *best;
    matched_ = *best;
    stopped_ = true;
    pending_.clear();
    return r;
  }
  // Hold back the longest tail that is a proper prefix of some stop string: it may still become one.
  std::size_t hold = 0;
  for (const std::string& s : stops_) {
    for (std::size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  r.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return r;
}

std::string StopStringMatcher::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace pie
