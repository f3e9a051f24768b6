// The sentencepiece tokenizer against python3-sentencepiece (Debian, the same library's Python
// binding): models trained in Python load with `model:` and give Python's ids and decodes on
// varied text; a model trained by fit() is byte for byte the model Python trains from the same
// sentences and flags, and encodes as Python does; the state needs no file; files that are not
// SentencePiece models and bad training options are errors that name them.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ablate/tokenizer.hpp"
#include "gpt2_reference.hpp"
#include "plugin_test_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using ablate::Tokenizer;
using ablate::test::contains;
using Json = nlohmann::json;

namespace {

// Python's side: `train` writes a model trained as spm_train would from a text file; `ablate`
// trains from the sentences and flags the plugin uses (see sentencepiece.cpp); `encode` writes
// each text's ids and the decode of those ids.
const char* kScript = R"PY(
import io, json, sys
import sentencepiece as spm

def sentences(text, max_bytes):
    b = text.encode('utf-8')
    pos, n = 0, len(b)
    while pos < n:
        end = pos
        while end < n:
            nl = b.find(b'\n', end)
            nl = n if nl < 0 else nl + 1
            if nl - pos > max_bytes:
                break
            end = nl
        if end == pos:
            end = pos + max_bytes
            while end > pos + 1 and (b[end] & 0xC0) == 0x80:
                end -= 1
        yield b[pos:end].decode('utf-8')
        pos = end

mode = sys.argv[1]
if mode == 'train':
    out, text_file, model_type, vocab = sys.argv[2:6]
    extra = dict(a.split('=', 1) for a in sys.argv[6:])
    spm.SentencePieceTrainer.train(input=text_file, model_prefix=out, model_type=model_type, vocab_size=int(vocab),
                                   minloglevel=2, **extra)
elif mode == 'ablate':
    out, text_file, model_type, vocab = sys.argv[2:6]
    text = open(text_file, encoding='utf-8').read()
    spm.set_random_generator_seed(0)
    m = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=sentences(text, 4192), model_writer=m, vocab_size=vocab, model_type=model_type,
        character_coverage='0.999500', num_threads='16', max_sentence_length='4192', minloglevel='1',
        byte_fallback='true', add_dummy_prefix='false', remove_extra_whitespaces='false',
        allow_whitespace_only_pieces='true', hard_vocab_limit='false', split_digits='false',
        normalization_rule_name='identity')
    open(out, 'wb').write(m.getvalue())
elif mode == 'encode':
    model, texts_file, out = sys.argv[2:5]
    sp = spm.SentencePieceProcessor(model_file=model)
    texts = json.load(open(texts_file, encoding='utf-8'))
    ids = [sp.encode(t) for t in texts]
    json.dump({'ids': ids, 'decoded': [sp.decode(i) for i in ids], 'vocab': sp.get_piece_size(),
               'eos': sp.eos_id(), 'pad': sp.pad_id()}, open(out, 'w', encoding='utf-8'))
)PY";

bool have_python_sentencepiece() {
  return ablate::test::run_command("/usr/bin/python3 -c 'import sentencepiece'").status == 0;
}

std::string shakespeare() {
  return ablate::test::read_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt");
}

// Training text: Shakespeare plus lines of other scripts, digits and whitespace.
std::string training_text() {
  std::string t = shakespeare();
  for (int i = 0; i < 20; ++i)
    t += "Caf\xC3\xA9 na\xC3\xAFve \xC3\xBC"
         "ber 2024 3.14159 \xCE\xB1\xCE\xB2\xCE\xB3 \xE4\xB8\xAD\xE6\x96\x87 "
         "tab\there  two  spaces\n";
  return t;
}

// Texts to compare on: Unicode, whitespace runs, newlines, digits, characters never seen.
std::vector<std::string> probe_texts() {
  return {"First Citizen:\nBefore we proceed any further, hear me speak.\n",
          "Caf\xC3\xA9 na\xC3\xAFve \xC3\xBC"
          "ber \xCE\xB1\xCE\xB2\xCE\xB3\xCE\xB4 \xE4\xB8\xAD\xE6\x96\x87\xE5\xAD\x97",
          "emoji \xF0\x9F\x98\x80\xF0\x9F\x8E\x89 and \xE2\x82\xAC"
          "5",
          "   leading spaces and trailing   ",
          "many     spaces\t\ttabs\n\n\nthree newlines\r\nCRLF",
          "digits 0123456789 3.14159 2024-01-31 1,000,000",
          "\n",
          " ",
          "x",
          "MENENIUS: What work's, my countrymen, in hand? where go you\nWith bats and clubs? The "
          "matter? speak, I pray you.",
          "\xEF\xBC\xA1\xEF\xBC\xA2 fullwidth \xEF\xAC\x81 ligature \xE2\x84\xA2 \xC2\xBD"};
}

struct PyEncoding {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> decoded;
  int64_t vocab = 0, eos = 0, pad = 0;
};

PyEncoding python_encode(const ablate::test::TempDir& dir, const std::string& model,
                         const std::vector<std::string>& texts) {
  dir.write("texts.json", Json(texts).dump());
  const auto r =
      ablate::test::run_command("/usr/bin/python3 " + dir / "spm_ref.py" + " encode " + model +
                                " " + dir / "texts.json" + " " + dir / "encoded.json");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const Json j = Json::parse(ablate::test::read_file(dir / "encoded.json"));
  PyEncoding e;
  for (const Json& ids : j["ids"]) e.ids.push_back(ids.get<std::vector<int32_t>>());
  e.decoded = j["decoded"].get<std::vector<std::string>>();
  e.vocab = j["vocab"].get<int64_t>();
  e.eos = j["eos"].get<int64_t>();
  e.pad = j["pad"].get<int64_t>();
  return e;
}

ptest::Built<Tokenizer> build(const std::string& yaml) {
  return ptest::build<Tokenizer>(yaml, ptest::dims(), 7, "tokenizer");
}

// The serialized model inside a saved state.
std::string model_of_state(const std::string& state) {
  const size_t nl = state.find('\n', state.find("\nmodel ") + 1);
  REQUIRE(nl != std::string::npos);
  return state.substr(nl + 1);
}

}  // namespace

TEST_CASE(
    "tokenizer/sentencepiece: models trained by python3-sentencepiece give Python's ids and "
    "decodes") {
  if (!have_python_sentencepiece())
    FAIL("python3-sentencepiece is not installed: tools/bootstrap.sh --tests installs it");
  ablate::test::TempDir dir;
  dir.write("spm_ref.py", kScript);
  const std::string text = dir.write("train.txt", training_text());
  const std::vector<std::string> texts = probe_texts();
  // spm_train's defaults (NFKC normalization, a dummy prefix, extra whitespace removed), and
  // a BPE model with byte fallback, split digits and a padding id.
  const std::vector<std::pair<std::string, std::string>> models = {
      {"uni", "train " + dir / "uni" + " " + text + " unigram 400"},
      {"bpe", "train " + dir / "bpe" + " " + text +
                  " bpe 500 byte_fallback=true split_digits=true pad_id=3"}};
  for (const auto& model : models) {
    const std::string &name = model.first, &args = model.second;
    CAPTURE(name);
    const auto r = ablate::test::run_command("/usr/bin/python3 " + dir / "spm_ref.py" + " " + args);
    REQUIRE_MESSAGE(r.status == 0, r.output);
    const PyEncoding py = python_encode(dir, dir / (name + ".model"), texts);
    // Found on the data search path by name, as other data files are.
    ablate::test::ScopedEnv path("ABLATE_DATA_PATH", dir.path.string());
    auto t = build("{type: sentencepiece, model: " + name + ".model}");
    CHECK(t->pretrained());
    t->fit("any text: a ready-made model ignores it");
    CHECK(t->vocab_size() == py.vocab);
    CHECK(t->eot_id() == py.eos);
    CHECK(t->pad_id() == py.pad);
    for (size_t i = 0; i < texts.size(); ++i) {
      CAPTURE(texts[i]);
      CHECK(t->encode(texts[i]) == py.ids[i]);
      CHECK(t->decode(py.ids[i]) == py.decoded[i]);
    }
    if (name == "bpe") {
      CHECK(t->pad_id() == 3);
      // Byte fallback: an unseen character is its UTF-8 bytes (after the dummy prefix's piece), and
      // decodes back.
      const std::string rare = "\xF0\x9F\xA6\x84";  // U+1F984
      CHECK(t->encode(rare).size() == 5);
      CHECK(t->decode(t->encode(rare)) == rare);
    }
    // The state is the model: no file needed once saved.
    const std::string state = t->save();
    auto loaded = build("{type: sentencepiece, model: gone.model}");
    loaded->load(state);
    for (size_t i = 0; i < texts.size(); ++i) CHECK(loaded->encode(texts[i]) == py.ids[i]);
    CHECK(loaded->save() == state);
  }
}

TEST_CASE(
    "tokenizer/sentencepiece: fit() trains the model Python trains from the same sentences and "
    "flags") {
  if (!have_python_sentencepiece())
    FAIL("python3-sentencepiece is not installed: tools/bootstrap.sh --tests installs it");
  ablate::test::TempDir dir;
  dir.write("spm_ref.py", kScript);
  const std::string text = training_text();
  const std::string text_file = dir.write("train.txt", text);
  const std::vector<std::string> texts = probe_texts();
  for (const std::string& type : {std::string("unigram"), std::string("bpe")}) {
    CAPTURE(type);
    auto t = build("{type: sentencepiece, train: {vocab_size: 600, model_type: " + type + "}}");
    CHECK_FALSE(t->pretrained());
    t->fit(text);
    CHECK(t->vocab_size() <= 600);
    const std::string model = model_of_state(t->save());
    const auto r =
        ablate::test::run_command("/usr/bin/python3 " + dir / "spm_ref.py" + " ablate " +
                                  dir / "py.model" + " " + text_file + " " + type + " 600");
    REQUIRE_MESSAGE(r.status == 0, r.output);
    CHECK_MESSAGE(ablate::test::read_file(dir / "py.model") == model,
                  "the model differs from Python's trained from the same sentences");
    // Python loads ablate's model and encodes as ablate does.
    std::ofstream(dir / "ablate.model", std::ios::binary) << model;
    const PyEncoding py = python_encode(dir, dir / "ablate.model", texts);
    CHECK(t->eot_id() == 2);  // SentencePiece's </s>
    CHECK(t->pad_id() == -1);
    for (size_t i = 0; i < texts.size(); ++i) {
      CAPTURE(texts[i]);
      CHECK(t->encode(texts[i]) == py.ids[i]);
      // The defaults keep the text: whitespace runs, newlines, unseen characters (byte fallback).
      CHECK(t->decode(t->encode(texts[i])) == texts[i]);
    }
    // Training again gives the same model (fixed seed and threads).
    auto again = build("{type: sentencepiece, train: {vocab_size: 600, model_type: " + type + "}}");
    again->fit(text);
    CHECK(again->save() == t->save());
  }
}

TEST_CASE("tokenizer/sentencepiece: text that is not UTF-8 decodes with U+FFFD for the bad bytes") {
  auto t = build("{type: sentencepiece, train: {vocab_size: 400}}");
  t->fit(shakespeare());
  const std::string bad =
      "ab\xFF"
      "c \xC3 d";
  const auto ids = t->encode(bad);
  CHECK(t->decode(ids) ==
        "ab\xEF\xBF\xBD"
        "c \xEF\xBF\xBD d");
  // Ids outside the vocabulary decode as the unknown piece.
  CHECK(contains(t->decode({-1, static_cast<int32_t>(t->vocab_size())}), "\xE2\x81\x87"));
}

TEST_CASE(
    "tokenizer/sentencepiece: files that are not SentencePiece models and bad options are errors "
    "that name them") {
  ablate::test::TempDir dir;
  auto error_for = [&](const std::string& file, const std::string& contents) {
    const std::string path = dir.write(file, contents);
    return ablate::test::error_of(
        [&] { build("{type: sentencepiece, model: " + path + "}")->fit(""); });
  };
  std::string e = error_for("empty.model", "");
  CHECK(contains(e, "empty.model"));
  CHECK(contains(e, "empty"));
  e = error_for("tokenizer.json", "{\"model\": {\"type\": \"BPE\"}}");
  CHECK(contains(e, "tokenizer.json: not a SentencePiece model"));
  CHECK(contains(e, "tokenizer_json"));
  e = error_for("m.vocab", "<unk>\t0\n<s>\t0\n\xE2\x96\x81the\t-3.1\n");
  CHECK(contains(e, "m.vocab: not a SentencePiece model"));
  CHECK(contains(e, ".model file"));
  e = error_for("random.model", std::string("\x08\x96\x01garbage\xFF\xFF\xFF\xFF", 14));
  CHECK(contains(e, "random.model: not a SentencePiece model"));
  // A missing file: the places searched.
  e = ablate::test::error_of(
      [&] { build("{type: sentencepiece, model: no_such_file.model}")->encode("x"); });
  CHECK(contains(e, "tokenizer.model"));
  CHECK(contains(e, "no_such_file.model"));
  // Training options: spm_train's flags pass through, and an unknown one is named.
  e = ablate::test::error_of([&] {
    build("{type: sentencepiece, train: {vocab_size: 400, no_such_flag: 3}}")->fit(shakespeare());
  });
  CHECK(contains(e, "no_such_flag"));
  CHECK(contains(e, "tokenizer.train"));
  CHECK_THROWS_WITH_AS(build("{type: sentencepiece, train: {input: x.txt}}"),
                       doctest::Contains("tokenizer.train.input"), ablate::ConfigError);
  CHECK_THROWS_WITH_AS(build("{type: sentencepiece, model: a.model, train: {vocab_size: 100}}"),
                       doctest::Contains("not both"), ablate::ConfigError);
  CHECK_THROWS_WITH_AS(build("{type: sentencepiece, train: {model_type: wordpiece}}"),
                       doctest::Contains("tokenizer.train.model_type"), ablate::ConfigError);
  // A passed-through flag takes effect: user_defined_symbols are pieces of their own.
  auto t = build(
      "{type: sentencepiece, train: {vocab_size: 400, user_defined_symbols: ['<sep>', '<cls>']}}");
  t->fit(shakespeare());
  CHECK(t->encode("<sep>").size() == 1);
  // A state that is not the plugin's.
  CHECK(contains(
      ablate::test::error_of([&] {
        build("{type: sentencepiece}")->load("ablate-sentencepiece-tokenizer 1\nmodel 99\nxx");
      }),
      "truncated"));
}
