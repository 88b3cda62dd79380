// JSON Schema references inside one document: resources named by "$id", anchors ("$anchor", draft <= 7
// "$id": "#name"), and "$ref" as a URI reference resolved against the base URI of its schema, with a
// fragment that is empty, a JSON pointer (~0 ~1 and %-escapes) or an anchor name. References to other
// documents are a SchemaError: there is nothing to fetch them from.
#include <fmt/format.h>

#include "json_schema_internal.h"

namespace pse::json_schema_detail {
namespace {

bool has_scheme(const std::string& uri) {
  if (uri.empty() || !std::isalpha(static_cast<unsigned char>(uri[0]))) return false;
  for (char ch : uri) {
    if (ch == ':') return true;
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '+' && ch != '-' && ch != '.') return false;
  }
  return false;
}

std::string strip_fragment(const std::string& uri) {
  auto hash = uri.find('#');
  return hash == std::string::npos ? uri : uri.substr(0, hash);
}

std::string remove_dot_segments(const std::string& path) {
  std::vector<std::string> out;
  std::size_t i = 0;
  const bool absolute = !path.empty() && path[0] == '/';
  while (i <= path.size()) {
    auto j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string seg = path.substr(i, j - i);
    if (seg == "..") {
      if (!out.empty()) out.pop_back();
    } else if (seg != "." && !(seg.empty() && i == 0 && absolute)) {
      out.push_back(seg);
    }
    i = j + 1;
  }
  std::string result = absolute ? "/" : "";
  for (std::size_t k = 0; k < out.size(); ++k) {
    if (k) result += '/';
    result += out[k];
  }
  return result;
}

// RFC 3986 section 5.2, enough for schema identifiers.
std::string resolve_uri(const std::string& ref, const std::string& base) {
  if (has_scheme(ref)) return ref;
  const std::string base_nf = strip_fragment(base);
  if (ref.empty()) return base_nf;
  if (ref[0] == '#') return base_nf + ref;
  const auto colon = base_nf.find(':');
  const std::string scheme = colon == std::string::npos ? "" : base_nf.substr(0, colon + 1);
  const std::string rest = colon == std::string::npos ? base_nf : base_nf.substr(colon + 1);
  if (ref.rfind("//", 0) == 0) return scheme + ref;
  std::string authority;
  std::string path = rest;
  if (rest.rfind("//", 0) == 0) {
    auto slash = rest.find('/', 2);
    authority = slash == std::string::npos ? rest : rest.substr(0, slash);
    path = slash == std::string::npos ? "" : rest.substr(slash);
  }
  std::string query_free = path.substr(0, path.find('?'));
  std::string merged;
  if (ref[0] == '/') {
    merged = ref;
  } else {
    auto last = query_free.rfind('/');
    merged = (last == std::string::npos ? (authority.empty() ? "" : "/") : query_free.substr(0, last + 1)) + ref;
  }
  auto hash = merged.find('#');
  std::string frag = hash == std::string::npos ? "" : merged.substr(hash);
  std::string p = hash == std::string::npos ? merged : merged.substr(0, hash);
  auto q = p.find('?');
  std::string query = q == std::string::npos ? "" : p.substr(q);
  if (q != std::string::npos) p = p.substr(0, q);
  return scheme + authority + remove_dot_segments(p) + query + frag;
}

std::string percent_decode(const std::string& s, bool& ok) {
  std::string out;
  ok = true;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
          !std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
        ok = false;
        return out;
      }
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::string escape_pointer_token(const std::string& token) {
  std::string out;
  for (char ch : token) {
    if (ch == '~') {
      out += "~0";
    } else if (ch == '/') {
      out += "~1";
    } else {
      out += ch;
    }
  }
  return out;
}

std::string Converter::base_of(const json& schema, const std::string& parent_base) const {
  if (!schema.is_object()) return parent_base;
  auto id = schema.find(draft_of(Node{}) <= 4 ? "id" : "$id");
  if (id == schema.end() || !id->is_string()) return parent_base;
  const std::string& s = id->get_ref<const std::string&>();
  if (s.empty() || (s[0] == '#' && draft_of(Node{}) <= 7)) return parent_base;
  if (draft_of(Node{}) <= 7 && schema.contains("$ref")) return parent_base;  // $ref hides its siblings
  return strip_fragment(resolve_uri(s, parent_base));
}

int Converter::draft_of(const Node& node) const {
  (void)node;
  const json* schema = &root_;
  if (schema->is_object()) {
    auto it = schema->find("$schema");
    if (it != schema->end() && it->is_string()) {
      const std::string& s = it->get_ref<const std::string&>();
      if (s.find("draft-04") != std::string::npos) return 4;
      if (s.find("draft-06") != std::string::npos) return 6;
      if (s.find("draft-07") != std::string::npos) return 7;
      if (s.find("2019-09") != std::string::npos) return 2019;
      if (s.find("2020-12") != std::string::npos) return 2020;
    }
  }
  return options_.default_draft;
}

void Converter::index_resources(const json& schema, const std::string& base, const std::string& pointer,
                                int depth) {
  if (depth > static_cast<int>(options_.max_depth)) {
    throw LimitError(fmt::format("[json_schema] {}: schema nesting deeper than {}", pointer, options_.max_depth));
  }
  if (!schema.is_object()) return;
  std::string my_base = base;
  const int draft = draft_of(Node{});
  auto id = schema.find(draft <= 4 ? "id" : "$id");
  if (draft <= 4 && id == schema.end()) id = schema.find("$id");
  if (id != schema.end() && id->is_string() && !(draft <= 7 && schema.contains("$ref"))) {
    const std::string& s = id->get_ref<const std::string&>();
    if (!s.empty() && s[0] == '#' && draft <= 7) {
      anchors_.emplace(strip_fragment(base) + s, Node{&schema, base, pointer, {}});
    } else {
      my_base = strip_fragment(resolve_uri(s, base));
      resources_.emplace(my_base, Node{&schema, my_base, pointer, {}});
    }
  }
  for (const char* kw : {"$anchor", "$dynamicAnchor"}) {
    auto a = schema.find(kw);
    if (a != schema.end() && a->is_string()) {
      anchors_.emplace(my_base + "#" + a->get<std::string>(), Node{&schema, my_base, pointer, {}});
    }
  }
  for (const char* kw : kSchemaValued) {
    auto it = schema.find(kw);
    if (it != schema.end() && (it->is_object() || it->is_boolean())) {
      index_resources(*it, my_base, pointer + "/" + kw, depth + 1);
    }
  }
  for (const char* kw : kSchemaArrays) {
    auto it = schema.find(kw);
    if (it != schema.end() && it->is_array()) {
      for (std::size_t i = 0; i < it->size(); ++i) {
        index_resources((*it)[i], my_base, pointer + "/" + kw + "/" + std::to_string(i), depth + 1);
      }
    }
  }
  for (const char* kw : kSchemaMaps) {
    auto it = schema.find(kw);
    if (it != schema.end() && it->is_object()) {
      for (auto& [k, v] : it->items()) {
        index_resources(v, my_base, pointer + "/" + kw + "/" + escape_pointer_token(k), depth + 1);
      }
    }
  }
}

Node Converter::resolve_ref(const Node& from, const std::string& ref, const std::string& keyword) {
  const std::string where = from.pointer + "/" + keyword;
  const std::string target = resolve_uri(ref, from.base);
  const std::string doc = strip_fragment(target);
  const auto hash = target.find('#');
  const std::string fragment = hash == std::string::npos ? "" : target.substr(hash + 1);
  auto res = resources_.find(doc);
  if (res == resources_.end()) {
    fail(from.pointer, keyword,
         fmt::format("\"{}\" refers to \"{}\", which is not in this document (remote references are not fetched)",
                     ref, doc));
  }
  if (fragment.empty()) return res->second;
  bool ok = true;
  std::string decoded = percent_decode(fragment, ok);
  if (!ok) fail(from.pointer, keyword, fmt::format("\"{}\" has a malformed %-escape", ref));
  if (decoded[0] != '/') {
    auto a = anchors_.find(doc + "#" + decoded);
    if (a == anchors_.end()) fail(from.pointer, keyword, fmt::format("\"{}\": no anchor \"{}\"", ref, decoded));
    return a->second;
  }
  // Walk the JSON pointer from the resource, following "$id" changes of the base on the way.
  const json* cur = res->second.schema;
  std::string base = res->second.base;
  std::string pointer = res->second.pointer;
  std::size_t i = 1;
  while (i <= decoded.size()) {
    auto j = decoded.find('/', i);
    if (j == std::string::npos) j = decoded.size();
    std::string token = decoded.substr(i, j - i);
    std::string unescaped;
    for (std::size_t k = 0; k < token.size(); ++k) {
      if (token[k] == '~' && k + 1 < token.size() && (token[k + 1] == '0' || token[k + 1] == '1')) {
        unescaped += token[k + 1] == '0' ? '~' : '/';
        ++k;
      } else if (token[k] == '~') {
        fail(from.pointer, keyword, fmt::format("\"{}\": bad escape in JSON pointer token \"{}\"", ref, token));
      } else {
        unescaped += token[k];
      }
    }
    if (cur->is_object()) {
      auto it = cur->find(unescaped);
      if (it == cur->end()) fail(from.pointer, keyword, fmt::format("\"{}\": no member \"{}\"", ref, unescaped));
      cur = &*it;
    } else if (cur->is_array()) {
      std::size_t idx = 0;
      bool digits = !unescaped.empty() && unescaped.size() < 10;
      for (char ch : unescaped) digits = digits && std::isdigit(static_cast<unsigned char>(ch));
      if (digits) idx = std::stoul(unescaped);
      if (!digits || idx >= cur->size()) {
        fail(from.pointer, keyword, fmt::format("\"{}\": no element \"{}\"", ref, unescaped));
      }
      cur = &(*cur)[idx];
    } else {
      fail(from.pointer, keyword, fmt::format("\"{}\": \"{}\" is not inside an object or array", ref, unescaped));
    }
    pointer += "/" + escape_pointer_token(unescaped);
    if (cur->is_object() && j < decoded.size()) {
      auto id = cur->find("$id");
      if (id != cur->end() && id->is_string() && !id->get_ref<const std::string&>().empty() &&
          id->get_ref<const std::string&>()[0] != '#') {
        base = strip_fragment(resolve_uri(id->get<std::string>(), base));
      }
    }
    i = j + 1;
  }
  if (cur->is_object()) {
    auto id = cur->find("$id");
    if (id != cur->end() && id->is_string() && !id->get_ref<const std::string&>().empty() &&
        id->get_ref<const std::string&>()[0] != '#') {
      base = strip_fragment(resolve_uri(id->get<std::string>(), base));
    }
  }
  (void)where;
  return Node{cur, base, pointer, {}};
}

}  // namespace pse::json_schema_detail
