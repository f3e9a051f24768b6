// Family "tokenizer": its descriptor (see ablate/family.hpp) and conformance checks (the
// skeleton of `ablate plugin new tokenizer NAME` is tools/plugin_skeletons/tokenizer.cpp).
#include <thread>

#include "ablate/tokenizer.hpp"
#include "kit.hpp"

namespace ablate::conformance {
namespace {

// ---- tokenizer -----------------------------------------------------------------------------

// A ready-made (pretrained) variant is checked like the others, with its options as given
// ({type: NAME} plus Settings::options_yaml; `ablate plugin check --options`): its defaults name
// its files, which must then be on the data search path (ablate/data_source.hpp; the test
// suite puts GPT-2's on ABLATE_DATA_PATH for gpt2).
void check_tokenizer(Checker& ck, const Subject& s) {
  const std::string& text =
      s.settings.sample_text.empty() ? builtin_sample_text() : s.settings.sample_text;
  size_t cut = text.size() * 9 / 10;
  while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) ++cut;
  const std::string train = text.substr(0, cut), held = text.substr(cut);
  const ModelDims d = small_dims();
  auto fitted = [&]() {
    auto t = build<Tokenizer>(s.options, "tokenizer", d);
    t->fit(train);
    return t;
  };
  auto in_range = [](const std::vector<int32_t>& ids, int64_t V, const std::string& what) {
    for (size_t i = 0; i < ids.size(); ++i)
      expect(ids[i] >= 0 && ids[i] < V, what + ": id " + std::to_string(ids[i]) + " at " +
                                            std::to_string(i) + " is outside [0, " +
                                            std::to_string(V) + ")");
  };
  ck.run("fit; ids in [0, V); decode(encode(text)) == text; at most one token per byte",
         [&](std::string& note) {
           auto t = fitted();
           const int64_t V = t->vocab_size();
           expect(V > 0, "vocab_size() is " + std::to_string(V));
           const auto ids = t->encode(train);
           expect(!ids.empty(), "the training text encodes to no ids");
           in_range(ids, V, "the training text");
           expect(ids.size() <= train.size(), std::to_string(ids.size()) + " tokens for " +
                                                  std::to_string(train.size()) + " bytes");
           const std::string back = t->decode(ids);
           if (back != train) {
             size_t i = 0;
             while (i < back.size() && i < train.size() && back[i] == train[i]) ++i;
             expect(false, "the round trip differs from byte " + std::to_string(i) + ": '" +
                               train.substr(i, 20) + "' became '" + back.substr(i, 20) + "'");
           }
           in_range(t->encode(held), V, "held-out text");
           expect(t->pad_id() < V, "pad_id() " + std::to_string(t->pad_id()) +
                                       " is not below vocab_size() " + std::to_string(V));
           note = "V = " + std::to_string(V) + ", " + std::to_string(ids.size()) + " tokens for " +
                  std::to_string(train.size()) + " bytes";
         });
  ck.run("deterministic fit; save() then load() restores it exactly", [&](std::string&) {
    auto t = fitted(), again = fitted();
    expect(again->save() == t->save(), "fitting the same text twice gives different states");
    auto loaded = build<Tokenizer>(s.options, "tokenizer", d);
    loaded->load(t->save());
    expect(loaded->vocab_size() == t->vocab_size(),
           "vocab_size() after load is " + std::to_string(loaded->vocab_size()) + ", before " +
               std::to_string(t->vocab_size()));
    expect(loaded->encode(held) == t->encode(held), "the loaded tokenizer encodes differently");
    expect(loaded->save() == t->save(), "saving the loaded tokenizer gives a different state");
  });
  ck.run("unseen characters and out-of-range ids do not throw; empty text <-> no ids",
         [&](std::string&) {
           auto t = fitted();
           const int64_t V = t->vocab_size();
           in_range(t->encode("\x01 caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xFF"), V,
                    "unseen text");
           t->decode({-1, static_cast<int32_t>(V), 1 << 30});
           expect(t->encode("").empty(), "empty text encodes to ids");
           expect(t->decode({}).empty(), "no ids decode to text");
         });
  ck.run("encode and decode from several threads at once give what one thread gets",
         [&](std::string& note) {
           auto t = fitted();
           const std::vector<int32_t> ids = t->encode(held);
           const std::string back = t->decode(ids);
           std::vector<std::vector<int32_t>> got(4);
           std::vector<std::string> text(4);
           std::vector<std::thread> threads;
           for (size_t k = 0; k < got.size(); ++k)
             threads.emplace_back([&, k] {
               for (int rep = 0; rep < 3; ++rep)
                 got[k] = t->encode(held), text[k] = t->decode(got[k]);
             });
           for (auto& th : threads) th.join();
           for (size_t k = 0; k < got.size(); ++k) {
             expect(got[k] == ids, "thread " + std::to_string(k) + " encodes differently");
             expect(text[k] == back, "thread " + std::to_string(k) + " decodes differently");
           }
           note = std::to_string(got.size()) + " threads";
         });
  ck.run(
      "eot_id() is -1 or an id of the vocabulary other than pad_id(); pretrained(): fit() changes "
      "nothing",
      [&](std::string& note) {
        auto t = fitted();
        const int64_t V = t->vocab_size();
        const int32_t eot = t->eot_id();
        expect(eot == -1 || (eot >= 0 && eot < V),
               "eot_id() " + std::to_string(eot) + " is outside [0, " + std::to_string(V) + ")");
        expect(eot == -1 || eot != t->pad_id(),
               "eot_id() and pad_id() are the same id " + std::to_string(eot));
        note = eot == -1 ? "no end-of-text id" : "eot_id() " + std::to_string(eot);
        if (!t->pretrained()) return;
        auto other = build<Tokenizer>(s.options, "tokenizer", d);
        other->fit("a quite different text: 0123456789 \xC3\xA9\xE2\x82\xAC\n");
        expect(other->save() == t->save(),
               "pretrained() is true, but fitting on another text gives another state");
        expect(other->encode(held) == t->encode(held),
               "pretrained() is true, but fitting on another text changes the ids");
        note += "; pretrained";
      });
  ck.run("load() rejects a state that is not its own with an ablate::Error", [&](std::string&) {
    auto t = build<Tokenizer>(s.options, "tokenizer", d);
    bool threw = false;
    try {
      t->load("garbage");
    } catch (const Error&) {
      threw = true;
    }
    expect(threw, "load(\"garbage\") did not throw");
  });
  check_options<Tokenizer>(ck, s, d);
}

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Tokenizer::kFamily;
  d.key = "tokenizer";
  d.list = false;
  d.default_variant = "char";
  d.summary = "text to token ids and back, fitted on the training text";
  d.checks = &check_tokenizer;
  return d;
}());

}  // namespace
}  // namespace ablate::conformance
