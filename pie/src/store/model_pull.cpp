#include "pie/model_pull.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "store/atomic_file.h"
#include "store/sha256.h"
#include "tensor/gguf.h"

namespace pie {
namespace {

namespace fs = std::filesystem;

struct Url {
  std::string origin;  // scheme://host[:port]
  std::string path;    // /path?query
};

Url split_url(std::string_view url) {
  const std::size_t scheme_end = url.find("://");
  const std::size_t path_start = url.find('/', scheme_end + 3);
  Url out{std::string(url.substr(0, path_start)), path_start == std::string_view::npos
                                                      ? std::string("/")
                                                      : std::string(url.substr(path_start))};
  if (out.origin.size() <= scheme_end + 3)
    throw ModelError(fmt::format("[pull] {}: no host in the URL", url));
  return out;
}

// Downloads `url` into the partial file (appending to what an earlier pull left), then hashes it.
// Returns the digest of the complete file, left at `partial`.
std::string download(const std::string& url, const fs::path& partial,
                     const PullProgress& progress) {
  const Url parts = split_url(url);
  httplib::Client client(parts.origin);
  client.set_follow_location(true);
  client.set_connection_timeout(10);
  client.set_read_timeout(60);
  store::AtomicFile out(partial, partial, /*keep_on_failure=*/true);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const std::uint64_t start = out.size();
    httplib::Headers headers;
    if (start > 0) headers.emplace("Range", fmt::format("bytes={}-", start));
    std::uint64_t total = 0;
    int status = 0;
    bool restart = false;
    httplib::Result result = client.Get(
        parts.path, headers,
        [&](const httplib::Response& response) {
          status = response.status;
          if (status == 416 &&
              start > 0) {  // the part kept is not a prefix the server knows: start again
            restart = true;
            return false;
          }
          if (status != 200 && status != 206) return false;
          if (status == 200 && start > 0) out.truncate();  // the server ignored the range
          const std::string length = response.get_header_value("Content-Length");
          if (!length.empty()) total = std::stoull(length) + (status == 206 ? start : 0);
          return true;
        },
        [&](const char* data, std::size_t n) {
          out.write(std::span(reinterpret_cast<const std::uint8_t*>(data), n));
          if (progress.bytes) progress.bytes(out.size(), total);
          return true;
        });
    if (restart) {
      out.truncate();
      continue;
    }
    if (status != 0 && status != 200 && status != 206) {
      throw ModelError(fmt::format("[pull] {}: the server answered HTTP {}", url, status));
    }
    if (!result || (total != 0 && out.size() != total)) {
      throw DownloadError(fmt::format(
          "[pull] {}: the download stopped after {} of {} bytes ({}); the part is kept in {}: pull "
          "again to "
          "resume",
          url, out.size(), total == 0 ? std::string("?") : std::to_string(total),
          result ? std::string("the connection closed early") : httplib::to_string(result.error()) + " error",
          partial.string()));
    }
    break;
  }
  if (progress.status) progress.status("verifying sha256 digest");
  return "sha256:" + store::sha256_file(partial);
}

}  // namespace

bool is_url(std::string_view source) {
  return source.starts_with("http://") || source.starts_with("https://");
}

std::string default_pull_name(std::string_view source) {
  std::string_view file = source.substr(source.find_last_of('/') + 1);
  file = file.substr(0, file.find_first_of("?#"));
  if (file.ends_with(".gguf")) file.remove_suffix(5);
  std::string name;
  for (char c : file) {
    const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool ok = (lower >= 'a' && lower <= 'z') || (lower >= '0' && lower <= '9') ||
                    lower == '.' || lower == '_' || lower == '-';
    if (ok) {
      name += lower;
    } else if (!name.empty() && name.back() != '-') {
      name += '-';
    }
  }
  while (!name.empty() && (name.front() == '.' || name.front() == '-')) name.erase(name.begin());
  while (!name.empty() && name.back() == '-') name.pop_back();
  if (name.size() > 128) name.resize(128);
  if (!ModelName::valid(name)) {
    throw ModelNotFoundError(
        fmt::format("[pull] cannot make a model name of '{}': give one", source));
  }
  return name + ":latest";
}

StoredModel pull_model(const ModelStore& store, std::string_view source, std::string_view name,
                       const PullProgress& progress) {
  const std::string target = name.empty() ? default_pull_name(source) : std::string(name);
  ModelName::parse(target);  // a bad name is refused before anything is fetched
  if (progress.status) progress.status(fmt::format("pulling {}", source));
  if (!is_url(source)) {
    StoredModel model = store.import_file(std::string(source), target, progress.bytes);
    if (progress.status) progress.status("success");
    return model;
  }
  const std::string url(source);
  const fs::path partial = store.partial_path(url);
  const std::string digest = download(url, partial, progress);
  try {
    tensor::gguf::File::open(partial);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove(partial, ec);  // complete, and not a model: nothing to resume
    throw ModelError(fmt::format("[pull] {}: not a GGUF model file: {}", url, e.what()));
  }
  std::error_code ec;
  fs::rename(partial, store.root() / "blobs" / fmt::format("sha256-{}", digest.substr(7)), ec);
  if (ec)
    throw StoreError(fmt::format("[store] cannot write the blob of {}: {}", url, ec.message()));
  if (progress.status) progress.status("writing manifest");
  StoredModel model = store.write_model(target, digest, {}, url);
  if (progress.status) progress.status("success");
  return model;
}

}  // namespace pie
