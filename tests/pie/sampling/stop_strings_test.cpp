// StopStringMatcher: stops across push boundaries, several and overlapping stops, held-back text, and the
// same output however the text is split.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "pie/error.h"
#include "pie/sampling.h"

namespace {

using pie::StopStringMatcher;

TEST(StopStringTest, AcrossBoundaries) {
  StopStringMatcher m({"bc"});
  auto r = m.push("ab");
  EXPECT_EQ(r.text, "a");  // "b" may begin "bc": held back
  EXPECT_FALSE(r.stopped);
  r = m.push("c");
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.matched, "bc");
}

TEST(StopStringTest, HeldBackTextIsReleasedWhenItCannotStop) {
  StopStringMatcher m({"bc"});
  EXPECT_EQ(m.push("ab").text, "a");
  auto r = m.push("d");
  EXPECT_EQ(r.text, "bd");
  EXPECT_FALSE(r.stopped);
}

TEST(StopStringTest, StopInsideOnePush) {
  StopStringMatcher m({"END"});
  auto r = m.push("hello END world");
  EXPECT_EQ(r.text, "hello ");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.matched, "END");
}

TEST(StopStringTest, MultipleStopsTheFirstToEndWins) {
  StopStringMatcher m({"xyz", "y"});
  auto r = m.push("axyz");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.matched, "y");  // ends before "xyz" does
  EXPECT_EQ(r.text, "ax");
  StopStringMatcher m2({"b", "ab"});
  r = m2.push("cab");
  EXPECT_EQ(r.matched, "ab");  // both end at the same byte: the one that starts first
  EXPECT_EQ(r.text, "c");
}

TEST(StopStringTest, OverlappingPrefixes) {
  StopStringMatcher m({"aab"});
  EXPECT_EQ(m.push("a").text, "");
  EXPECT_EQ(m.push("a").text, "");
  EXPECT_EQ(m.push("a").text, "a");  // "aaa": only the last "aa" can still begin "aab"
  auto r = m.push("b");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

TEST(StopStringTest, FlushReturnsHeldBackText) {
  StopStringMatcher m({"</s>"});
  EXPECT_EQ(m.push("hi </").text, "hi ");
  EXPECT_EQ(m.flush(), "</");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStringTest, NothingAfterAStop) {
  StopStringMatcher m({"."});
  auto r = m.push("one. two");
  EXPECT_EQ(r.text, "one");
  r = m.push("three");
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.matched, ".");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStringTest, NoStopsPassesEverything) {
  StopStringMatcher m({});
  EXPECT_EQ(m.push("abc").text, "abc");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStringTest, Utf8BytesAreNeverSplitByTheHoldBack) {
  StopStringMatcher m({"é!"});  // c3 a9 21
  EXPECT_EQ(m.push("café").text, "caf");
  EXPECT_EQ(m.push("?").text, "é?");
}

TEST(StopStringTest, EmptyStopThrows) {
  try {
    StopStringMatcher m({"a", ""});
    FAIL();
  } catch (const pie::RequestError& e) {
    EXPECT_EQ(e.param(), "stop");
  }
}

// The output (emitted text + flush, or emitted text up to the stop) is the same for every split of the
// input, and equals a direct search for the stop that ends first.
TEST(StopStringTest, SameResultForEverySplit) {
  std::mt19937 rng(7);
  const std::vector<std::string> stops{"aba", "bb", "cab"};
  for (int iter = 0; iter < 300; ++iter) {
    std::string text;
    const int len = std::uniform_int_distribution<int>(0, 20)(rng);
    for (int i = 0; i < len; ++i) text.push_back("abc"[std::uniform_int_distribution<int>(0, 2)(rng)]);
    // Reference: the smallest end, then the smallest start.
    std::size_t end = std::string::npos, start = 0;
    for (const auto& s : stops) {
      const std::size_t p = text.find(s);
      if (p != std::string::npos && (end == std::string::npos || p + s.size() < end ||
                                     (p + s.size() == end && p < start))) {
        end = p + s.size();
        start = p;
      }
    }
    const std::string want = end == std::string::npos ? text : text.substr(0, start);
    StopStringMatcher m(stops);
    std::string got;
    bool stopped = false;
    std::size_t i = 0;
    while (i < text.size()) {
      const std::size_t n = std::uniform_int_distribution<std::size_t>(1, 4)(rng);
      const auto r = m.push(std::string_view(text).substr(i, n));
      i += n;
      got += r.text;
      stopped = stopped || r.stopped;
    }
    if (!stopped) got += m.flush();
    EXPECT_EQ(got, want) << text;
    EXPECT_EQ(stopped, end != std::string::npos) << text;
  }
}

}  // namespace
