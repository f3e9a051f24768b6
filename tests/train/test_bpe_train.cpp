// Training a byte-level BPE as GPT-2's (ablate/bpe_train.hpp): the greedy most-frequent-pair
// merges and their tie-breaking on a corpus checked by hand; the tokenizer.json it writes has
// Hugging Face's structure (checked with python3's json), loads in ablate's gpt2 tokenizer with
// exact round trips, and gives the ids of Hugging Face's own implementation
// (@huggingface/tokenizers, from npm, installed once under the build directory).
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ablate/bpe_train.hpp"
#include "ablate/byte_bpe.hpp"
#include "ablate/tokenizer.hpp"
#include "plugin_test_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using Json = nlohmann::json;
using ablate::test::contains;

namespace {

std::string shakespeare() {
  return ablate::test::read_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt");
}

// The merges as text pairs, "a|b".
std::vector<std::string> merge_texts(const ablate::ByteBpe& bpe) {
  std::vector<std::string> out;
  for (const auto& [a, b] : bpe.merges)
    out.push_back(bpe.tokens[static_cast<size_t>(a)] + "|" + bpe.tokens[static_cast<size_t>(b)]);
  return out;
}

ptest::Built<ablate::Tokenizer> gpt2_from(const std::string& json_path) {
  return ptest::build<ablate::Tokenizer>("{type: gpt2, tokenizer_json: " + json_path + "}",
                                         ptest::dims(), 7, "tokenizer");
}

// Hugging Face's tokenizers in JavaScript (@huggingface/tokenizers), installed once into
// <build>/npm-hf-tokenizers; "" and a reason in `problem` when npm cannot install it.
std::string hf_tokenizers(std::string& problem, bool& npm_missing) {
  const std::string dir = std::string(ABLATE_BINARY_DIR) + "/npm-hf-tokenizers";
  const std::string pkg = dir + "/node_modules/@huggingface/tokenizers/package.json";
  if (fs::is_regular_file(pkg)) return dir;
  if (ablate::test::run_command("command -v npm && command -v node").status != 0) {
    npm_missing = true;
    problem = "npm (or node) is not installed; tools/bootstrap.sh --tests installs it";
    return "";
  }
  const std::string tmp = dir + ".tmp." + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  const auto c = ablate::test::run_command(
      "cd '" + tmp +
      "' && timeout 300 npm install --no-audit --no-fund --loglevel=error "
      "@huggingface/tokenizers@0.2.0");
  if (c.status == 0) fs::rename(tmp, dir, ec);
  fs::remove_all(tmp, ec);
  if (fs::is_regular_file(pkg)) return dir;
  problem = "npm install @huggingface/tokenizers@0.2.0 failed (is the npm registry reachable?): " +
            (c.output.size() > 600 ? "..." + c.output.substr(c.output.size() - 600) : c.output);
  return "";
}

}  // namespace

TEST_CASE(
    "bpe_train: the greedy most-frequent-pair merges of a corpus checked by hand, ties by the "
    "pair's bytes") {
  // GPT-2's pre-tokenizer makes the words low x1, " low" x4, " lower" x2, " newest" x6,
  // " widest" x3. Pair counts: e s 9, s t 9, w e 8, l o 7, o w 7, " " l 6, " " n 6, n e 6,
  // e w 6, ... Each merge takes the most frequent pair; equal counts go to the pair whose
  // first token's bytes sort first (then the second's):
  //  1 e s (9, before s t)   2 es t (9)      3 l o (7, before o w)   4 lo w (7)
  //  5 " " low (6: " " sorts before e, n, w; "low" before "n")      6 " " n (6)
  //  7 " n" e (6)            8 " ne" w (6)   9 " new" est (6)       10 " " w (3)
  const std::string corpus =
      "low low low low low lower lower newest newest newest newest newest newest widest widest "
      "widest";
  const ablate::WordCounts words = ablate::count_words(corpus);
  const ablate::WordCounts expected_words = {
      {" low", 4}, {" lower", 2}, {" newest", 6}, {" widest", 3}, {"low", 1}};
  CHECK(words == expected_words);
  const ablate::ByteBpe bpe = ablate::learn_byte_bpe(words, 256 + 10 + 1);
  CHECK(merge_texts(bpe) == std::vector<std::string>{"e|s", "es|t", "l|o", "lo|w", " |low", " |n",
                                                     " n|e", " ne|w", " new|est", " |w"});
  REQUIRE(bpe.tokens.size() == 267);
  CHECK(bpe.tokens[256] == "es");
  CHECK(bpe.tokens[264] == " newest");
  CHECK(bpe.tokens[266] == "<|endoftext|>");
  CHECK(bpe.first_special() == 266);
  // Ids 0-255 are the bytes in GPT-2's order: '!' is 0, 'A' is 32, the space is 220.
  CHECK(bpe.tokens[0] == "!");
  CHECK(bpe.tokens[32] == "A");
  CHECK(bpe.tokens[220] == " ");
  // min_frequency stops early: only pairs seen at least 6 times.
  CHECK(ablate::learn_byte_bpe(words, 300, {"<|endoftext|>"}, 6).merges.size() == 9);
  // <|endoftext|> in the text separates, it is never learned.
  CHECK(ablate::count_words("ab<|endoftext|>ab") == ablate::WordCounts{{"ab", 2}});
  CHECK_THROWS_WITH_AS(ablate::learn_byte_bpe(words, 200), doctest::Contains("at least 257"),
                       ablate::Error);
}

TEST_CASE(
    "bpe_train: tokenizer.json has Hugging Face's structure and loads in the gpt2 tokenizer with "
    "exact round trips") {
  ablate::test::TempDir dir;
  const std::string text = shakespeare();
  const ablate::ByteBpe bpe = ablate::learn_byte_bpe(ablate::count_words(text), 1000);
  REQUIRE(bpe.tokens.size() == 1000);
  const std::string path = dir.write("tokenizer.json", ablate::hf_tokenizer_json(bpe));
  // python3's json: the fields Hugging Face's loader reads.
  const char* check = R"PY(
import json, sys
j = json.load(open(sys.argv[1], encoding='utf-8'))
m = j['model']
assert m['type'] == 'BPE', m['type']
assert m['continuing_subword_prefix'] == '' and m['end_of_word_suffix'] == '' and not m['byte_fallback']
v = m['vocab']
assert len(v) == 1000 and sorted(v.values()) == list(range(1000)), 'ids 0..999'
assert j['normalizer'] is None
assert j['pre_tokenizer'] == {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True, 'use_regex': True}, j['pre_tokenizer']
assert j['decoder']['type'] == 'ByteLevel'
assert j['post_processor']['type'] == 'ByteLevel'
assert [(a['id'], a['content'], a['special']) for a in j['added_tokens']] == [(999, '<|endoftext|>', True)]
assert v['<|endoftext|>'] == 999
merges = m['merges']
assert len(merges) == 1000 - 257
for k, s in enumerate(merges):
    a, b = s.split(' ')
    assert a in v and b in v and v[a + b] == 256 + k, s
bs = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
assert all(v[chr(b)] == i for i, b in enumerate(bs)), 'the printable bytes first, as GPT-2'
assert v['\u0120'] == 220, 'the space byte is U+0120 with id 220'
print('ok', len(merges))
)PY";
  dir.write("check.py", check);
  const auto r = ablate::test::run_command("/usr/bin/python3 " + dir / "check.py" + " " + path);
  CHECK_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "ok 743"));

  auto t = gpt2_from(path);
  CHECK(t->vocab_size() == 1000);
  CHECK(t->eot_id() == 999);
  const std::vector<std::string> texts = {
      text,
      "First Citizen:\nWe are accounted poor citizens, the patricians good.",
      "Caf\xC3\xA9 na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80  two  spaces\t\n\n 12345 "
      "don't",
      "a<|endoftext|>b",
      std::string("bytes \xFF\xFE not UTF-8"),
      ""};
  for (const std::string& s : texts) {
    const auto ids = t->encode(s);
    std::string back;
    for (int32_t id : ids) back += t->decode({id});
    CHECK(back == s);
    CHECK(t->decode(ids) == s);
  }
  CHECK(t->encode("a<|endoftext|>b")[1] == 999);
  // The training text compresses: frequent words are single tokens.
  CHECK(t->encode(text).size() < text.size() / 2);
  CHECK(t->encode(" the").size() == 1);
}

TEST_CASE(
    "bpe_train: a trained tokenizer.json gives Hugging Face's ids (@huggingface/tokenizers) in "
    "ablate's gpt2 tokenizer") {
  std::string problem;
  bool npm_missing = false;
  const std::string hf = hf_tokenizers(problem, npm_missing);
  if (hf.empty()) {
    if (npm_missing) FAIL(problem);
    MESSAGE("skipped: " << problem);
    return;
  }
  ablate::test::TempDir dir;
  const std::string text = shakespeare();
  const std::string path =
      dir.write("tokenizer.json",
                ablate::hf_tokenizer_json(ablate::learn_byte_bpe(ablate::count_words(text), 2000)));
  // Text unlike the training text too: other scripts, digits, whitespace runs, contractions,
  // a seeded random mix of the characters of all of them.
  std::vector<std::string> texts = {
      text.substr(0, 4000),
      "Caf\xC3\xA9 na\xC3\xAFve \xC3\xBC"
      "ber \xCE\xB1\xCE\xB2\xCE\xB3 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80",
      "   leading, trailing   \n\n\n\ttabs\r\n and    runs",
      "digits 0123456789 3.14159 2024-01-31 1,000,000",
      "I'm you're we've they'll she'd it's DON'T",
      "a<|endoftext|>b<|endoftext|>"};
  const std::vector<std::string> alphabet = {"a",
                                             "e",
                                             "t",
                                             "h",
                                             " ",
                                             "  ",
                                             "\n",
                                             "\t",
                                             "'",
                                             "s",
                                             "ll",
                                             "1",
                                             "9",
                                             ".",
                                             ",",
                                             "!",
                                             "\xC3\xA9",
                                             "\xCE\xB1",
                                             "\xE4\xB8\xAD",
                                             "\xF0\x9F\x98\x80",
                                             "T",
                                             "the",
                                             " the",
                                             "ing"};
  uint64_t x = 12345;
  for (int k = 0; k < 20; ++k) {
    std::string s;
    for (int i = 0; i < 200; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      s += alphabet[(x >> 33) % alphabet.size()];
    }
    texts.push_back(s);
  }
  dir.write("texts.json", Json(texts).dump());
  dir.write("hf.js", R"JS(
const fs = require('fs');
const { Tokenizer } = require(process.argv[2] + '/node_modules/@huggingface/tokenizers');
const tok = new Tokenizer(JSON.parse(fs.readFileSync(process.argv[3], 'utf8')), {});
const texts = JSON.parse(fs.readFileSync(process.argv[4], 'utf8'));
fs.writeFileSync(process.argv[5], JSON.stringify(texts.map(t => tok.encode(t, { add_special_tokens: false }).ids)));
)JS");
  const auto r = ablate::test::run_command("node " + dir / "hf.js" + " " + hf + " " + path + " " +
                                           dir / "texts.json" + " " + dir / "ids.json");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const Json ids = Json::parse(ablate::test::read_file(dir / "ids.json"));
  REQUIRE(ids.size() == texts.size());
  auto t = gpt2_from(path);
  for (size_t i = 0; i < texts.size(); ++i) {
    CAPTURE(texts[i]);
    CHECK(t->encode(texts[i]) == ids[i].get<std::vector<int32_t>>());
  }
}

TEST_CASE(
    "bpe_train: gpt2's train option learns in fit() the vocabulary that the trained tokenizer.json "
    "holds") {
  ablate::test::TempDir dir;
  const std::string text = shakespeare();
  auto t = ptest::build<ablate::Tokenizer>("{type: gpt2, train: {vocab_size: 500}}", ptest::dims(),
                                           7, "tokenizer");
  CHECK_FALSE(t->pretrained());
  CHECK_THROWS_WITH_AS(t->encode("x"), doctest::Contains("before fit()"), ablate::Error);
  t->fit(text);
  CHECK(t->vocab_size() == 500);
  CHECK(t->eot_id() == 499);
  auto f = gpt2_from(dir.write("tokenizer.json", ablate::hf_tokenizer_json(ablate::learn_byte_bpe(
                                                     ablate::count_words(text), 500))));
  CHECK(t->save() == f->save());  // the same tokens and merge ranks
  CHECK(t->encode(text) == f->encode(text));
  CHECK(t->decode(t->encode(text)) == text);
  auto loaded = ptest::build<ablate::Tokenizer>("{type: gpt2, train: {vocab_size: 500}}",
                                                ptest::dims(), 7, "tokenizer");
  loaded->load(t->save());
  CHECK(loaded->encode(text) == t->encode(text));
  CHECK_THROWS_WITH_AS(ptest::build<ablate::Tokenizer>(
                           "{type: gpt2, train: {vocab_size: 500}, tokenizer_json: x.json}",
                           ptest::dims(), 7, "tokenizer"),
                       doctest::Contains("not both"), ablate::ConfigError);
  CHECK_THROWS_WITH_AS(ptest::build<ablate::Tokenizer>("{type: gpt2, train: {vocab_size: 100}}",
                                                       ptest::dims(), 7, "tokenizer"),
                       doctest::Contains("tokenizer.train.vocab_size"), ablate::ConfigError);
}
