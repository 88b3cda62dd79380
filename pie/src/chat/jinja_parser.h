// The Jinja parser: tokens -> Program, following jinja2's grammar and operator precedence (with the
// loopcontrols extension's break/continue and HF's {% generation %} block).
#pragma once

#include <memory>
#include <string>

#include "chat/jinja_ast.h"

namespace pie::jinja {

// Throws TemplateError with the line and column of the first syntax error. Nesting deeper than
// kMaxParseDepth is a syntax error (a hostile template cannot exhaust the stack).
constexpr int kMaxParseDepth = 128;
std::shared_ptr<Program> parse(const std::string& source);

}  // namespace pie::jinja
