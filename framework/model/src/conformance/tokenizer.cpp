// The conformance suite of family "tokenizer": fitting, round trips, saved states, threads.
// A ready-made (pretrained) variant is checked like the others, with its options as given
// ({type: NAME} plus Settings::options_yaml; `ablate plugin check --options`): its defaults name
// its files, which must then be on the data search path (ablate/data_source.hpp; the test
// suite puts GPT-2's on ABLATE_DATA_PATH for gpt2).
#include <thread>

#include "ablate/tokenizer.hpp"
#include "kit.hpp"
#include "suites.hpp"

namespace ablate::conformance {
namespace {

// What the tokenizer checks share: the variant and the sample text, cut into the 90% it is
// fitted on and the held-out rest (at a character boundary).
struct TokenizerCase {
  const Subject& s;
  const ModelDims d = small_dims();
  std::string train, held;

  explicit TokenizerCase(const Subject& subject) : s(subject) {
    const std::string& text =
        s.settings.sample_text.empty() ? builtin_sample_text() : s.settings.sample_text;
    size_t cut = text.size() * 9 / 10;
    while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) ++cut;
    train = text.substr(0, cut), held = text.substr(cut);
  }
  Built<Tokenizer> tokenizer() const { return build<Tokenizer>(s.options, "tokenizer", d); }
  Built<Tokenizer> fitted() const {
    auto t = tokenizer();
    t->fit(train);
    return t;
  }
};

void expect_in_range(const std::vector<int32_t>& ids, int64_t V, const std::string& what) {
  for (size_t i = 0; i < ids.size(); ++i)
    expect(ids[i] >= 0 && ids[i] < V, what + ": id " + std::to_string(ids[i]) + " at " +
                                          std::to_string(i) + " is outside [0, " +
                                          std::to_string(V) + ")");
}

void round_trips(TokenizerCase& c, std::string& note) {
  auto t = c.fitted();
  const int64_t V = t->vocab_size();
  expect(V > 0, "vocab_size() is " + std::to_string(V));
  const auto ids = t->encode(c.train);
  expect(!ids.empty(), "the training text encodes to no ids");
  expect_in_range(ids, V, "the training text");
  expect(ids.size() <= c.train.size(),
         std::to_string(ids.size()) + " tokens for " + std::to_string(c.train.size()) + " bytes");
  const std::string back = t->decode(ids);
  if (back != c.train) {
    size_t i = 0;
    while (i < back.size() && i < c.train.size() && back[i] == c.train[i]) ++i;
    expect(false, "the round trip differs from byte " + std::to_string(i) + ": '" +
                      c.train.substr(i, 20) + "' became '" + back.substr(i, 20) + "'");
  }
  expect_in_range(t->encode(c.held), V, "held-out text");
  expect(t->pad_id() < V, "pad_id() " + std::to_string(t->pad_id()) +
                              " is not below vocab_size() " + std::to_string(V));
  note = "V = " + std::to_string(V) + ", " + std::to_string(ids.size()) + " tokens for " +
         std::to_string(c.train.size()) + " bytes";
}

void save_then_load_restores(TokenizerCase& c, std::string&) {
  auto t = c.fitted(), again = c.fitted();
  expect(again->save() == t->save(), "fitting the same text twice gives different states");
  auto loaded = c.tokenizer();
  loaded->load(t->save());
  expect(loaded->vocab_size() == t->vocab_size(),
         "vocab_size() after load is " + std::to_string(loaded->vocab_size()) + ", before " +
             std::to_string(t->vocab_size()));
  expect(loaded->encode(c.held) == t->encode(c.held), "the loaded tokenizer encodes differently");
  expect(loaded->save() == t->save(), "saving the loaded tokenizer gives a different state");
}

void tolerates_unseen_input(TokenizerCase& c, std::string&) {
  auto t = c.fitted();
  const int64_t V = t->vocab_size();
  expect_in_range(t->encode("\x01 caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xFF"), V,
                  "unseen text");
  t->decode({-1, static_cast<int32_t>(V), 1 << 30});
  expect(t->encode("").empty(), "empty text encodes to ids");
  expect(t->decode({}).empty(), "no ids decode to text");
}

void threads_agree(TokenizerCase& c, std::string& note) {
  auto t = c.fitted();
  const std::vector<int32_t> ids = t->encode(c.held);
  const std::string back = t->decode(ids);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::string> text(4);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < got.size(); ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 3; ++rep) got[k] = t->encode(c.held), text[k] = t->decode(got[k]);
    });
  for (auto& th : threads) th.join();
  for (size_t k = 0; k < got.size(); ++k) {
    expect(got[k] == ids, "thread " + std::to_string(k) + " encodes differently");
    expect(text[k] == back, "thread " + std::to_string(k) + " decodes differently");
  }
  note = std::to_string(got.size()) + " threads";
}

void special_ids_fit(TokenizerCase& c, std::string& note) {
  auto t = c.fitted();
  const int64_t V = t->vocab_size();
  const int32_t eot = t->eot_id();
  expect(eot == -1 || (eot >= 0 && eot < V),
         "eot_id() " + std::to_string(eot) + " is outside [0, " + std::to_string(V) + ")");
  expect(eot == -1 || eot != t->pad_id(),
         "eot_id() and pad_id() are the same id " + std::to_string(eot));
  note = eot == -1 ? "no end-of-text id" : "eot_id() " + std::to_string(eot);
  if (!t->pretrained()) return;
  auto other = c.tokenizer();
  other->fit("a quite different text: 0123456789 \xC3\xA9\xE2\x82\xAC\n");
  expect(other->save() == t->save(),
         "pretrained() is true, but fitting on another text gives another state");
  expect(other->encode(c.held) == t->encode(c.held),
         "pretrained() is true, but fitting on another text changes the ids");
  note += "; pretrained";
}

void load_rejects_garbage(TokenizerCase& c, std::string&) {
  auto t = c.tokenizer();
  bool threw = false;
  try {
    t->load("garbage");
  } catch (const Error&) {
    threw = true;
  }
  expect(threw, "load(\"garbage\") did not throw");
}

}  // namespace

void check_tokenizer(Checker& ck, const Subject& s) {
  TokenizerCase c(s);
  run_properties<TokenizerCase>(
      ck, c,
      {{"fit; ids in [0, V); decode(encode(text)) == text; at most one token per byte",
        &round_trips},
       {"deterministic fit; save() then load() restores it exactly", &save_then_load_restores},
       {"unseen characters and out-of-range ids do not throw; empty text <-> no ids",
        &tolerates_unseen_input},
       {"encode and decode from several threads at once give what one thread gets", &threads_agree},
       {"eot_id() is -1 or an id of the vocabulary other than pad_id(); pretrained(): fit() "
        "changes nothing",
        &special_ids_fit},
       {"load() rejects a state that is not its own with an ablate::Error",
        &load_rejects_garbage}});
  check_options<Tokenizer>(ck, s, c.d);
}

}  // namespace ablate::conformance
