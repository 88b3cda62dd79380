// load_model: recognises the format from the content: GGUF magic, a folder with config.json (Hugging
// Face), otherwise a llama2.c checkpoint.
#include <fmt/format.h>

#include <array>
#include <fstream>

#include "pie/error.h"
#include "pie/model.h"

namespace pie {

std::shared_ptr<const Model> load_model(const std::filesystem::path& path, const LoadOptions& options) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    throw ModelError(fmt::format("[model] {}: no such file or folder", path.string()));
  }
  if (std::filesystem::is_directory(status)) {
    if (!std::filesystem::is_regular_file(path / "config.json")) {
      throw ModelError(fmt::format("[model] {}: a folder without config.json is not a Hugging Face model", path.string()));
    }
    return load_hf_model(path, options);
  }
  std::array<char, 4> magic{};
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError(fmt::format("[model] {}: cannot open", path.string()));
  in.read(magic.data(), magic.size());
  if (in.gcount() == 4 && std::string_view(magic.data(), 4) == "GGUF") return load_gguf_model(path, options);
  return load_llama2c_model(path, options);
}

}  // namespace pie
