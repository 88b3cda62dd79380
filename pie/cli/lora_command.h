// The PEFT -> GGUF adapter conversion that `orchard convert` hands LoRA adapters to.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace orchard::cli {

// Whether `path` is a PEFT adapter folder (it holds adapter_config.json).
bool is_peft_adapter(const std::filesystem::path& path);
// Writes the PEFT adapter `input`, fitted to the model `base` names, as a GGUF adapter. Throws UsageError
// without a base, pie::LoraError / ModelError when the adapter or base cannot be read or do not fit.
int convert_lora_adapter(const std::filesystem::path& input, const std::filesystem::path& output,
                         const std::optional<std::string>& base);

}  // namespace orchard::cli
