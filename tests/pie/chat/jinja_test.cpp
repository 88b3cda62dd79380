// Unit tests of the Jinja interpreter: expressions, filters, tests, methods, whitespace control, scoping,
// macros, and every error path (syntax errors with line and column, render errors, bounds). The expected
// strings of kCases are what Python jinja2 3.1 renders under Hugging Face's settings
// (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), loopcontrols, HF's tojson).
#include <gtest/gtest.h>

#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "pie/chat_template.h"

namespace {

struct Case {
  const char* source;
  const char* context;
  const char* expected;
};

// clang-format off
const Case kCases[] = {
    {R"~~({{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 7 / 2 }}|{{ 10 / 5 }})~~",
     R"~~({})~~",
     R"~~(7|3|-4|2|1024|3.5|2.0)~~"},
    {R"~~({{ 1.0 }}|{{ 0.1 + 0.2 }}|{{ 1e20 }}|{{ 1.5e-7 }}|{{ 3.0 * 2 }}|{{ 2 ** -1 }})~~",
     R"~~({})~~",
     R"~~(1.0|0.30000000000000004|1e+20|1.5e-07|6.0|0.5)~~"},
    {R"~~({{ 'a' ~ 1 ~ none ~ true }}|{{ 'ab' * 3 }}|{{ [1] + [2] }}|{{ 'x' if false }}|{{ 'y' if 0 else 'z' }})~~",
     R"~~({})~~",
     R"~~(a1NoneTrue|ababab|[1, 2]||z)~~"},
    {R"~~({{ [1, 'a\n', {'k': none}, (1,), true, 1.5] }}|{{ {'a': 'it\'s'} }})~~",
     R"~~({})~~",
     R"~~([1, 'a\n', {'k': None}, (1,), True, 1.5]|{'a': "it's"})~~"},
    {R"~~({{ 'abcdef'[1:4] }}|{{ 'abcdef'[::-1] }}|{{ [1,2,3,4][-2:] }}|{{ 'héllo'[1] }}|{{ [1,2,3][5] }}|{{ 'héllo'|length }})~~",
     R"~~({})~~",
     R"~~(bcd|fedcba|[3, 4]|é||5)~~"},
    {R"~~({{ 1 < 2 < 3 }}|{{ 1 == 1.0 }}|{{ 'a' in 'cat' }}|{{ 3 not in [1, 2] }}|{{ 'k' in {'k': 1} }}|{{ none is none }}|{{ 1 is number }}|{{ true is number }}|{{ true is integer }})~~",
     R"~~({})~~",
     R"~~(True|True|True|True|True|True|True|True|False)~~"},
    {R"~~({{ x is defined }}|{{ x is undefined }}|{{ d.missing is defined }}|{{ d['a'] }}|{{ d.a }}|{{ d.get('b', 'dflt') }}|{{ d.items is defined }}|{{ none.attr is defined }})~~",
     R"~~({"d": {"a": 1, "items": 2}})~~",
     R"~~(False|True|False|1|1|dflt|True|False)~~"},
    {R"~~(  {% if true %}
    yes
  {% endif %}
{# comment #}
end
)~~",
     R"~~({})~~",
     R"~~(    yes
end)~~"},
    {R"~~(a  {%- if true -%}  b  {%- endif -%}  c
{{- ' d ' -}}
 e {{ 'f' }}
{% raw %}{{ raw }}{% endraw %}
)~~",
     R"~~({})~~",
     R"~~(abc d e f
{{ raw }})~~"},
    {R"~~({% for x in items %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }};{% endfor %})~~",
     R"~~({"items": ["a", "b", "c"]})~~",
     R"~~(1/0/3/True/False/3//b;2/1/2/False/False/3/a/c;3/2/1/False/True/3/b/;)~~"},
    {R"~~({% for x in [] %}x{% else %}empty{% endfor %}|{% for x in range(10) if x is odd %}{{ x }}{% if x > 5 %}{% break %}{% endif %}{% endfor %}|{% for x in range(5) %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %})~~",
     R"~~({})~~",
     R"~~(empty|1357|0134)~~"},
    {R"~~({% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}|{% for k, v in d|dictsort %}{{ k }}={{ v }},{% endfor %}|{% for k in d %}{{ k }}{% endfor %})~~",
     R"~~({"d": {"b": 2, "a": 1, "C": 3}})~~",
     R"~~(b=2,a=1,C=3,|a=1,b=2,C=3,|baC)~~"},
    {R"~~({% set x = 0 %}{% for i in range(3) %}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}|{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}|{% set a, b = 1, 2 %}{{ a }}{{ b }})~~",
     R"~~({})~~",
     R"~~(1110|3|12)~~"},
    {R"~~({% set block %}  inner {{ 1 }}  {% endset %}[{{ block }}]|{% set t | trim %}  trimmed  {% endset %}[{{ t }}]|{% filter upper %}up{{ 'per' }}{% endfilter %})~~",
     R"~~({})~~",
     R"~~([  inner 1  ]|[trimmed]|UPPER)~~"},
    {R"~~({% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', greeting='Hi') }} {{ greet(name='Cy') }})~~",
     R"~~({})~~",
     R"~~(Hello, Ann! Hi, Bob! Hello, Cy!)~~"},
    {R"~~({% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inside{% endcall %}|{% macro rec(n) %}{{ n }}{% if n > 0 %}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(3) }})~~",
     R"~~({})~~",
     R"~~(<inside>|3210)~~"},
    {R"~~({{ '  pad  '|trim }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ 'hello world'|capitalize }}|{{ "they're here-now"|title }}|{{ 'a,b'|replace(',', ';') }}|{{ [3,1,2]|sort|join('-') }}|{{ [1,2,3]|first }}{{ [1,2,3]|last }}|{{ 'abc'|list }}|{{ 'x'|string }}|{{ '42'|int + 1 }}|{{ '2.5'|float }}|{{ -3|abs }}|{{ 2.567|round(2) }}|{{ 2.5|round }}|{{ x|default('dflt') }}|{{ ''|default('e', true) }}|{{ [1,2,2,3]|unique|list }})~~",
     R"~~({})~~",
     R"~~(pad|ABC|abc|Hello world|They're Here-Now|a;b|1-2-3|13|['a', 'b', 'c']|x|43|2.5|3|2.57|2.0|dflt|e|[1, 2, 3])~~"},
    {R"~~({{ users|map(attribute='name')|join(', ') }}|{{ users|selectattr('admin')|map(attribute='name')|list }}|{{ users|rejectattr('admin')|list|length }}|{{ [1,2,3,4]|select('even')|list }}|{{ [1,2,3,4]|reject('divisibleby', 3)|list }}|{{ users|selectattr('name', 'equalto', 'b')|list|length }}|{{ [1,2,3]|sum }}|{{ [3,1,2]|max }}{{ [3,1,2]|min }}|{{ [1,2,3]|reverse|list }}|{{ 'one two three'|wordcount }}|{{ [1,2,3,4,5]|batch(2)|list }})~~",
     R"~~({"users": [{"name": "a", "admin": true}, {"name": "b", "admin": false}]})~~",
     R"~~(a, b|['a']|1|[2, 4]|[1, 2, 4]|1|6|31|[3, 2, 1]|3|[[1, 2], [3, 4], [5]])~~"},
    {R"~~({{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é"\n'|tojson }}|{{ [1.0, 2, none, true]|tojson }}|{{ {}|tojson }}|{{ d|tojson(sort_keys=true) }})~~",
     R"~~({"d": {"b": [1, {"x": "y"}], "a": "ü"}})~~",
     R"~~({"b": [1, {"x": "y"}], "a": "ü"}|{
  "b": [
    1,
    {
      "x": "y"
    }
  ],
  "a": "ü"
}|"é\"\n"|[1.0, 2, null, true]|{}|{"a": "ü", "b": [1, {"x": "y"}]})~~"},
    {R"~~({{ text|indent(2) }}|{{ text|indent(2, first=true) }}|{{ text|indent(2, blank=true) }})~~",
     R"~~({"text": "a\n\nb\nc"})~~",
     R"~~(a

  b
  c|  a

  b
  c|a
  
  b
  c)~~"},
    {R"~~({{ ' a b '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'Hello'.upper() }}{{ 'Hello'.lower() }}|{{ 'hello world'.title() }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ '</think>x'.split('</think>')[-1] }}|{{ '\nx\n'.lstrip('\n') }})~~",
     R"~~({})~~",
     R"~~(a b|a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|True|True|HELLOhello|Hello World|bba|x|x
)~~"},
    {R"~~({{ 'Use '|safe + name + ' ok'|safe }}|{{ '<b>'|e }}|{{ ('<' ~ '>'|safe) }})~~",
     R"~~({"name": "\"q\" & <t>"})~~",
     R"~~(Use &#34;q&#34; &amp; &lt;t&gt; ok|&lt;b&gt;|<>)~~"},
    {R"~~({{ range(3)|list }}|{{ range(1, 10, 3)|list }}|{{ dict(a=1, b=2) }}|{{ namespace(a=1).a }}|{{ [1, 2] is iterable }}|{{ 'a' is string }}|{{ {} is mapping }}|{{ 3 is divisibleby 3 }}|{{ 'abc' is lower }}|{{ x is none }})~~",
     R"~~({"x": null})~~",
     R"~~([0, 1, 2]|[1, 4, 7]|{'a': 1, 'b': 2}|1|True|True|True|True|True|True)~~"},
};
// clang-format on

void expect_render_error(const std::string& source, const std::string& message_part,
                         const nlohmann::ordered_json& context = nlohmann::ordered_json::object(),
                         const pie::RenderOptions& options = {});

std::string render(const std::string& source, const nlohmann::ordered_json& context = nlohmann::ordered_json::object(),
                   const pie::RenderOptions& options = {}) {
  return pie::ChatTemplate(source).render(context, options);
}

TEST(Jinja, RendersLikePythonJinja2) {
  int index = 0;
  for (const Case& c : kCases) {
    SCOPED_TRACE("case " + std::to_string(index++) + ": " + c.source);
    EXPECT_EQ(render(c.source, nlohmann::ordered_json::parse(c.context)), c.expected);
  }
}

TEST(Jinja, StrFormat) {
  EXPECT_EQ(render("{{ 'a{}b{}c{x}{{}}'.format(1, 2, x='y') }}|{{ '{1}{0}'.format('a', 'b') }}"), "a1b2cy{}|ba");
  expect_render_error("{{ '{}{0}'.format(1) }}", "cannot switch from manual");
  expect_render_error("{{ '{:>3}'.format(1) }}", "not supported");
  expect_render_error("{{ '{}'.format() }}", "out of range");
}

TEST(Jinja, TrailingNewlineAndCrLf) {
  EXPECT_EQ(render("a\r\nb\n"), "a\nb");
  EXPECT_EQ(render("a\n\n"), "a\n");
  EXPECT_EQ(render("{% if true %}\r\nx\r\n{% endif %}\r\n"), "x\n");
}

TEST(Jinja, LstripOnlyWhenTheTagStartsTheLine) {
  EXPECT_EQ(render("x  {% if true %}y{% endif %}"), "x  y");
  EXPECT_EQ(render("  {%+ if true %}y{% endif %}"), "  y");
  EXPECT_EQ(render("  {{ 'v' }}"), "  v");
}

void expect_syntax_error(const std::string& source, int line, int column) {
  SCOPED_TRACE(source);
  try {
    pie::ChatTemplate t(source);
    FAIL() << "no error";
  } catch (const pie::TemplateError& e) {
    EXPECT_EQ(e.line(), line) << e.what();
    EXPECT_EQ(e.column(), column) << e.what();
  }
}

TEST(Jinja, SyntaxErrorsCarryLineAndColumn) {
  expect_syntax_error("{% if x %}", 1, 11);           // end of template inside if
  expect_syntax_error("a\n{{ 1 + }}", 2, 8);          // expression expected at '}}'
  expect_syntax_error("{% foo %}", 1, 4);             // unknown tag
  expect_syntax_error("\n\n  {{ 'abc }}", 3, 6);     // unterminated string
  expect_syntax_error("{# never closed", 1, 1);       // comment
  expect_syntax_error("{% for x in y %}{% endif %}", 1, 20);
  expect_syntax_error("{{ x ) }}", 1, 6);
  expect_syntax_error("{% break %}", 1, 4);           // outside a loop
  expect_syntax_error("{{ a | }}", 1, 8);
  expect_syntax_error("{{ 1 @ 2 }}", 1, 6);
  expect_syntax_error("{% macro m(a=1, b) %}{% endmacro %}", 1, 18);
  expect_syntax_error("{{ 99999999999999999999 }}", 1, 4);
}

TEST(Jinja, DeepNestingIsASyntaxErrorNotACrash) {
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_THROW(pie::ChatTemplate{deep}, pie::TemplateError);
  std::string blocks;
  for (int k = 0; k < 3000; ++k) blocks += "{% if true %}";
  EXPECT_THROW(pie::ChatTemplate{blocks}, pie::TemplateError);
}

void expect_render_error(const std::string& source, const std::string& message_part,
                         const nlohmann::ordered_json& context, const pie::RenderOptions& options) {
  SCOPED_TRACE(source);
  pie::ChatTemplate t(source);
  try {
    t.render(context, options);
    FAIL() << "no error";
  } catch (const pie::TemplateError& e) {
    EXPECT_NE(e.message().find(message_part), std::string::npos) << e.what();
  }
}

TEST(Jinja, RenderErrorsAreTemplateErrors) {
  expect_render_error("{{ raise_exception('Conversation roles must alternate') }}",
                      "Conversation roles must alternate");
  expect_render_error("{{ 'a' + 1 }}", "can only concatenate str");
  expect_render_error("{{ x.y }}", "'x' is undefined");
  expect_render_error("{{ x + 1 }}", "'x' is undefined");
  expect_render_error("{{ 1 / 0 }}", "division by zero");
  expect_render_error("{{ none|length }}", "has no len()");
  expect_render_error("{% for x in 3 %}{% endfor %}", "not iterable");
  expect_render_error("{{ x|tojson }}", "not JSON serializable");
  expect_render_error("{{ [1]|map('upper')|tojson }}", "not JSON serializable");  // a generator
  expect_render_error("{{ [1].append(2) }}", "unsafe");                           // immutable sandbox
  expect_render_error("{{ {}.update({}) }}", "unsafe");
  expect_render_error("{{ x|nofilter }}", "no filter named 'nofilter'");
  expect_render_error("{{ x is notatest }}", "no test named 'notatest'");
  expect_render_error("{% set a, b = [1] %}", "not enough values to unpack");
  expect_render_error("{% set x = 1 %}{% set x.y = 2 %}", "non-namespace");
  expect_render_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "takes not more than 1");
  expect_render_error("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", "no keyword argument 'b'");
  expect_render_error("{{ 1 < 'a' }}", "not supported between");
  expect_render_error("{{ range(1000000)|length }}", "Range too big");
  expect_render_error("{{ 9223372036854775807 + 1 }}", "integer overflow");
  expect_render_error("{{ 'abc'.split('') }}", "empty separator");
  expect_render_error("{{ messages }}", "render context must be a JSON object", nlohmann::ordered_json::array());
}

TEST(Jinja, RenderErrorsCarryThePlace) {
  pie::ChatTemplate t("line one\n  {{ raise_exception('boom') }}");
  try {
    t.render(nlohmann::ordered_json::object());
    FAIL();
  } catch (const pie::TemplateError& e) {
    EXPECT_EQ(e.line(), 2);
    EXPECT_EQ(e.message(), "boom");
  }
}

TEST(Jinja, BoundsStopHostileTemplates) {
  pie::RenderOptions small;
  small.limits.max_output_bytes = 1000;
  expect_render_error("{% for i in range(100000) %}xxxxxxxx{% endfor %}", "exceeds the bound", {}, small);
  expect_render_error("{{ 'x' * 100000 }}", "output bound", {}, small);
  pie::RenderOptions few;
  few.limits.max_loop_iterations = 50;
  expect_render_error("{% for i in range(10) %}{% for j in range(10) %}{% endfor %}{% endfor %}", "loop iterations",
                      {}, few);
  expect_render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested deeper");
  expect_render_error("{{ ('x' * 100)|replace('x', 'y' * 100000) }}", "output bound", {}, small);
  expect_render_error("{{ ('\n' * 500)|indent(100) }}", "output bound", {}, small);
  pie::RenderOptions copies;
  copies.limits.max_work_bytes = 1 << 24;
  expect_render_error("{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ s|length }}{% endfor %}",
                      "work bound", {}, copies);
  expect_render_error("{% set s = ['x' * 1000000] * 100 %}{% for i in range(100000) %}{{ s|first|length }}"
                      "{% endfor %}", "work bound", {}, copies);
  pie::RenderOptions work;
  work.limits.max_work_bytes = 1 << 20;
  expect_render_error(
      "{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ 'abcdefgh' %}{% endfor %}",
      "work bound", {}, work);
}

TEST(Jinja, DeepAndCyclicValuesAreBounded) {
  // A namespace holding itself cannot be printed forever, and the cycle does not outlive the render.
  expect_render_error("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}", "nested too deeply");
  // Values nested one level per iteration: releasing them never recurses (50,000 levels would overflow the
  // stack of a recursive destructor under the sanitizers); printing and comparing stop at a bound.
  const auto wrap = [](int n) {
    return "{% set ns = namespace(v=[]) %}{% for i in range(" + std::to_string(n) +
           ") %}{% set ns.v = [ns.v] %}{% endfor %}";
  };
  EXPECT_EQ(render(wrap(50000) + "{{ ns.v|length }}"), "1");
  expect_render_error(wrap(1000) + "{{ ns.v }}", "nested too deeply");
  expect_render_error(wrap(1000) + "{{ ns.v == ns.v[0] }}", "nested too deeply");
  expect_render_error(wrap(1000) + "{{ ns.v|tojson }}", "nesting too deep");
  // Deep JSON in the context is refused, not recursed into.
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  EXPECT_THROW(render("{{ x }}", nlohmann::ordered_json{{"x", nlohmann::ordered_json::parse(deep)}}),
               pie::TemplateError);
}

TEST(Jinja, StrftimeNowUsesTheGivenTime) {
  std::tm tm{};
  tm.tm_year = 124;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  pie::RenderOptions options;
  options.now = std::chrono::system_clock::from_time_t(std::mktime(&tm));
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }}", nlohmann::ordered_json::object(), options), "26 Jul 2024");
}

TEST(ChatTemplate, ApplyChatTemplatePassesHfVariables) {
  pie::ChatTemplate t(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
      "{% if tools is none %}no-tools{% endif %}{% if add_generation_prompt %}>{% endif %}{{ eos_token }}{{ extra }}");
  const auto messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(pie::apply_chat_template(t, messages, nullptr, true, {"<s>", "</s>"}), "<s>[user:hi]no-tools></s>");
  EXPECT_EQ(pie::apply_chat_template(t, messages, nlohmann::ordered_json::array(), false, {"", ""},
                                     nlohmann::ordered_json{{"extra", 7}}),
            "[user:hi]7");
  EXPECT_THROW(pie::apply_chat_template(t, nlohmann::ordered_json::object(), nullptr, true, {}),
               pie::TemplateError);
  EXPECT_THROW(pie::apply_chat_template(t, messages, nullptr, true, {}, nlohmann::ordered_json::array()),
               pie::TemplateError);
}

TEST(ChatTemplate, BuiltinIsChatML) {
  pie::ChatTemplate t(pie::builtin_chat_template());
  const auto messages = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  EXPECT_EQ(pie::apply_chat_template(t, messages, nullptr, true, {}),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
}

// The tracked text of a render, each range as the text it covers: "{a|b}" for two ranges.
std::string tracked_text(const pie::RenderedText& r) {
  std::string out = "{";
  for (const auto& [b, e] : r.tracked) out += (out.size() > 1 ? "|" : "") + r.text.substr(b, e - b);
  return out + "}";
}

std::string tracked(const std::string& source, const char* messages, const char* extra = "{}") {
  const pie::ChatTemplate t(source);
  return tracked_text(pie::apply_chat_template_tracked(t, nlohmann::ordered_json::parse(messages), nullptr, true,
                                                       {"<s>", "</s>"}, nlohmann::ordered_json::parse(extra)));
}

// Where the messages' text lands in the prompt: exactly through printing, concatenation, set blocks,
// macros, slicing, trim and join; as a whole through anything else built from it (filters, methods,
// str() of containers); never the template's own text, bos_token or untracked variables.
TEST(ChatTemplate, TracksWhereTheMessagesTextLands) {
  const char* one = R"([{"role": "user", "content": " Hi<|im_end|> "}])";
  pie::ChatTemplate chatml(pie::builtin_chat_template());
  const pie::RenderedText r = pie::apply_chat_template_tracked(chatml, nlohmann::ordered_json::parse(one), nullptr,
                                                               true, {});
  EXPECT_EQ(r.text, "<|im_start|>user\n Hi<|im_end|> <|im_end|>\n<|im_start|>assistant\n");
  ASSERT_EQ(r.tracked.size(), 2u);  // "user" and the content, not the markup between them
  EXPECT_EQ(tracked_text(r), "{user| Hi<|im_end|> }");
  EXPECT_EQ(r.tracked[1], (std::pair<std::size_t, std::size_t>{17, 31}));

  EXPECT_EQ(tracked("{{ bos_token }}{% for m in messages %}[{{ m.content ~ '|' ~ m.role }}]{% endfor %}{{ x }}", one,
                    R"({"x": "<|x|>"})"),
            "{ Hi<|im_end|> |user}");
  EXPECT_EQ(tracked("{% set c %}<a>{{ messages[0].content }}<b>{% endset %}{{ c | trim }}", one), "{ Hi<|im_end|> }");
  EXPECT_EQ(tracked("{{ (messages[0].content | trim) + '<e>' }}", one), "{Hi<|im_end|>}");
  // (Adjacent ranges merge.)
  EXPECT_EQ(tracked("{{ messages[0].content.strip()[2:4] }}{{ messages[0].content[-1:] }}", one), "{<| }");
  EXPECT_EQ(tracked("{% macro m(x) %}<m>{{ x }}</m>{% endmacro %}{{ m(messages[0].content) }}", one),
            "{ Hi<|im_end|> }");
  EXPECT_EQ(tracked("{{ '<sep>'.join([messages[0].role, messages[0].role]) }}", one), "{user|user}");
  EXPECT_EQ(tracked("{{ [messages[0].role, 'x'] | join('<sep>') }}", one), "{user}");
  EXPECT_EQ(tracked("{% for c in messages[0].role %}{{ c }}.{% endfor %}", one), "{u|s|e|r}");
  EXPECT_EQ(tracked("{{ messages[0].role * 2 }}", one), "{useruser}");
  // Derived without byte-by-byte tracking: the whole result, and nothing else.
  EXPECT_EQ(tracked("<{{ messages[0] | tojson }}>", R"([{"role": "user", "content": "a"}])"),
            R"({{"role": "user", "content": "a"}})");
  EXPECT_EQ(tracked("<{{ messages[0].content.replace('H', 'h') }}>", one), "{ hi<|im_end|> }");
  EXPECT_EQ(tracked("<{{ messages[0].role | upper }}>", one), "{USER}");
  EXPECT_EQ(tracked("<{{ messages | map(attribute='role') | list }}>", one), "{['user']}");
  EXPECT_EQ(tracked("{% for k in messages[0] %}{{ k }};{% endfor %}", one), "{role|content}");
  EXPECT_EQ(tracked("{{ '%s!' % messages[0].role }}", one), "{user!}");
  // Nothing of the messages printed: nothing tracked.
  EXPECT_EQ(tracked("{{ bos_token }}{{ messages | length }}<|im_start|>", one), "{}");
}

TEST(ChatTemplate, DeepValuesAreRefusedBeforeAnyCopy) {
  const std::string deep = std::string(50000, '[') + std::string(50000, ']');
  const auto value = nlohmann::ordered_json::parse(deep);
  EXPECT_THROW(pie::check_template_value_depth(value, "tools"), pie::TemplateError);
  pie::ChatTemplate t(pie::builtin_chat_template());
  const auto messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  try {
    (void)pie::apply_chat_template(t, messages, value, true, {});
    ADD_FAILURE() << "a 50,000-deep tools value was rendered";
  } catch (const pie::TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("tools nests arrays and objects deeper than 256"), std::string::npos)
        << e.what();
  }
  const std::string ok = std::string(255, '[') + std::string(255, ']');
  EXPECT_NO_THROW(pie::check_template_value_depth(nlohmann::ordered_json::parse(ok), "tools"));
}

TEST(ChatTemplate, RendersConcurrently) {
  pie::ChatTemplate t("{% for i in range(n) %}{{ i }}{% endfor %}");
  std::vector<std::thread> threads;
  std::vector<std::string> out(8);
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] { out[static_cast<std::size_t>(k)] = t.render({{"n", 100}}); });
  }
  for (auto& th : threads) th.join();
  for (const auto& o : out) EXPECT_EQ(o, out[0]);
}

}  // namespace
