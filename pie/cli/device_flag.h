// --device cpu|cuda|auto, the device option of the commands that run a model (run, chat, serve, perplexity),
// and the log line that says which device was chosen and why.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "arg_parser.h"
#include "pie/backend.h"

namespace orchard::cli {

struct DeviceFlag {
  std::optional<std::string> value;

  void add_options(ArgParser& p) {
    p.option("device", 0, "DEVICE",
             "where the forward pass runs: cuda (a GPU), cpu, or auto (default: cuda when a usable GPU is present)",
             &value);
  }

  // Throws UsageError on a bad value.
  pie::DeviceRequest get() const {
    if (!value) return pie::DeviceRequest::automatic;
    if (*value != "cpu" && *value != "cuda" && *value != "auto") {
      throw UsageError("--device: expected cpu, cuda or auto, got '" + *value + "'");
    }
    return pie::parse_device_request(*value);
  }
};

// "orchard: forward pass on cuda (a usable GPU: NVIDIA H100 80GB HBM3)" on standard error, when the forward
// pass runs on a GPU or the device was asked for; the default on a machine without one stays quiet (so that
// a command's error stays its one line of standard error).
inline void log_device(const pie::DeviceChoice& choice, pie::DeviceRequest request) {
  if (choice.device != tensor::Device::cuda && request == pie::DeviceRequest::automatic) return;
  std::fprintf(stderr, "orchard: forward pass on %s (%s)\n", choice.device == tensor::Device::cuda ? "cuda" : "cpu",
               choice.reason.c_str());
}

}  // namespace orchard::cli
