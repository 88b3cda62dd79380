// --device cpu|cuda|auto, the device option of the commands that run a model (run, chat, serve, perplexity),
// --gpu-memory FRACTION, --batch-invariant and --kv-type f32|f16 (run, chat, serve: the engine; perplexity
// parses --kv-type with parse_kv_type), and the log line that says which device was chosen and why.
#pragma once

#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "arg_parser.h"
#include "pie/backend.h"
#include "pie/engine.h"

namespace orchard::cli {

// --kv-type's value: f32 or f16 (llama.cpp's cache type names). Throws UsageError naming the flag otherwise.
inline tensor::DType parse_kv_type(const std::string& value) {
  if (value == "f32") return tensor::DType::f32;
  if (value == "f16") return tensor::DType::f16;
  throw UsageError("--kv-type: expected f32 or f16, got '" + value + "'");
}

struct DeviceFlag {
  std::optional<std::string> value;
  std::optional<std::string> gpu_memory_value;
  bool batch_invariant = false;
  std::optional<std::string> kv_type_value;

  void add_options(ArgParser& p) {
    p.option("device", 0, "DEVICE",
             "where the forward pass runs: cuda (a GPU), cpu, or auto (default: cuda when a usable GPU is present)",
             &value);
    p.option("gpu-memory", 0, "FRACTION",
             "on a GPU, the fraction of its memory to use (weights, KV pool, activations); the KV pool takes what "
             "the weights leave of it (default 0.9)",
             &gpu_memory_value);
    p.flag("batch-invariant", 0,
           "on a GPU, keep a token's logits bit-identical whatever else the step holds: no tensor-core (cuBLAS) "
           "products for prefill and large batches, which are faster but sum in an order that follows the batch",
           &batch_invariant);
    p.option("kv-type", 0, "TYPE",
             "the KV cache's element type, f32 or f16 (default: f16 on a GPU, f32 on the CPU); f32 takes twice the "
             "memory a token and keeps keys and values unrounded",
             &kv_type_value);
  }

  // Throws UsageError unless the value is a number in (0, 1].
  double gpu_memory() const {
    if (!gpu_memory_value) return 0.9;
    std::size_t used = 0;
    double f = 0;
    try {
      f = std::stod(*gpu_memory_value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != gpu_memory_value->size() || !(f > 0.0 && f <= 1.0)) {
      throw UsageError("--gpu-memory: expected a fraction in (0, 1], got '" + *gpu_memory_value + "'");
    }
    return f;
  }

  // Throws UsageError on a bad value.
  pie::DeviceRequest get() const {
    if (!value) return pie::DeviceRequest::automatic;
    if (*value != "cpu" && *value != "cuda" && *value != "auto") {
      throw UsageError("--device: expected cpu, cuda or auto, got '" + *value + "'");
    }
    return pie::parse_device_request(*value);
  }

  // Sets the engine's device, gpu_memory, batch_invariant and (where given) kv_dtype. Throws UsageError on a
  // bad value (call it, or get() and gpu_memory(), before the model loads).
  void apply(pie::EngineOptions& options) const {
    options.device = get();
    options.gpu_memory = gpu_memory();
    options.batch_invariant = batch_invariant;
    if (kv_type_value) options.kv_dtype = parse_kv_type(*kv_type_value);
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
