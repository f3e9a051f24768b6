// libFuzzer target: every tokenizer variant in the plugin directory (char, byte, bpe, ...).
// For input text x: fit on x (a pretrained variant, which learns nothing from it, is fitted
// once and shared), then decode(encode(x)) == x (each variant documents that any
// bytes round-trip once fitted), ids lie in [0, vocab_size), and a tokenizer loaded from
// save() encodes identically. Text the tokenizer was not fitted on (the input reversed),
// arbitrary ids (the input's bytes) and an arbitrary state string (the input itself) must
// not crash: they give ids in range, some text, or an ablate::Error. A variant may refuse to be
// made or fitted with an ablate::Error (sentencepiece has no text to train on; gpt2's files are
// not on this machine and cannot be downloaded): the input then goes to the next variant.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ablate/registry.hpp"
#include "ablate/tokenizer.hpp"

namespace {

struct Variant {
  std::string name;
  std::string yaml;      // its options; each make() reads them afresh (below)
  bool lossless = true;  // round-trips any bytes (the probe below); else: must only not crash
  // A pretrained variant (gpt2 from its files) learns nothing from the input: made, fitted and
  // checked through save()/load() once, then shared by every input, which it encodes. Reading
  // its files for each input would leave a few inputs a minute.
  std::unique_ptr<ablate::Tokenizer> fitted;
};

std::vector<Variant>& variants() {
  static std::vector<Variant> v;
  return v;
}

// New Options each time: an Options records every value read into its document's resolved
// configuration, which keeps each recorded node until the document goes, so one reused for
// every input would grow by each input's reads and make libFuzzer run its leak check after
// every input (about 40 times slower).
std::unique_ptr<ablate::Tokenizer> make(const Variant& v) {
  ablate::ParamStore none;
  ablate::BuildContext ctx{ablate::ModelDims{}, ablate::ParamScope(none, ""), 0};
  const ablate::Options options(YAML::Load(v.yaml), nullptr, "tokenizer");
  return ablate::PluginRegistry::instance().create<ablate::Tokenizer>(options, ctx);
}

// A tokenizer made afresh and loaded from tok's state encodes text as tok does (ids).
void check_state(const Variant& v, const ablate::Tokenizer& tok, const std::string& text,
                 const std::vector<int32_t>& ids) {
  auto copy = make(v);
  copy->load(tok.save());
  if (copy->vocab_size() != tok.vocab_size() || copy->encode(text) != ids) __builtin_trap();
}

void check_ids(const std::vector<int32_t>& ids, int64_t vocab) {
  for (int32_t id : ids)
    if (id < 0 || id >= vocab) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto& reg = ablate::PluginRegistry::instance();
  reg.add_directory(ABLATE_PLUGIN_DIR);
  for (const auto* e : reg.variants("tokenizer")) {
    std::string name = e->info->name;
    // A small bpe merge budget, and SentencePiece's trainer on one thread (not 16 started for
    // each input), keep an execution in the millisecond range.
    std::string yaml = name == "bpe"             ? "{type: bpe, merges: 64, min_frequency: 1}"
                       : name == "sentencepiece" ? "{type: sentencepiece, train: {num_threads: 1}}"
                                                 : "{type: " + name + "}";
    variants().push_back({name, yaml, true, {}});
  }
  // A variant that does not give back a text with spaces, a carriage return and bytes that are
  // not UTF-8 (sentencepiece decodes those as U+FFFD, as SentencePiece does) is fuzzed for
  // crashes and id ranges, not for the round trip.
  const std::string probe = "caf\xc3\xa9  tab\there\r\nend \xff\xc0\xaf the end\n";
  for (Variant& v : variants()) {
    try {
      auto tok = make(v);
      tok->fit(probe);
      v.lossless = tok->decode(tok->encode(probe)) == probe;
      if (tok->pretrained()) {
        check_state(v, *tok, probe, tok->encode(probe));
        v.fitted = std::move(tok);
      }
    } catch (const ablate::Error& e) {
      std::fprintf(stderr, "fuzz_tokenizer: %s refused the probe: %s\n", v.name.c_str(), e.what());
    }
    std::fprintf(stderr, "fuzz_tokenizer: %s%s%s\n", v.name.c_str(),
                 v.lossless ? ": round trip checked" : ": crashes and id ranges only",
                 v.fitted ? " (pretrained: made once)" : "");
  }
  if (variants().empty()) __builtin_trap();  // no plugins found: the target would test nothing
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string other(text.rbegin(), text.rend());
  for (const Variant& v : variants()) {
    std::unique_ptr<ablate::Tokenizer> own;
    ablate::Tokenizer* tok = v.fitted.get();
    if (!tok) {
      try {
        own = make(v);
        own->fit(text);
      } catch (const ablate::Error&) {
        continue;  // a clear refusal (no text to train on, a tokenizer's files not found) is an
                   // answer
      }
      tok = own.get();
    }
    const int64_t vocab = tok->vocab_size();
    std::vector<int32_t> ids = tok->encode(text);
    check_ids(ids, vocab);
    if (v.lossless && tok->decode(ids) != text) __builtin_trap();

    if (own) check_state(v, *own, text, ids);

    check_ids(tok->encode(other), vocab);
    std::vector<int32_t> raw;
    for (size_t i = 0; i + 1 < size; i += 2)
      raw.push_back(static_cast<int32_t>(int8_t(data[i])) * 256 + data[i + 1]);
    (void)tok->decode(raw);
    auto copy = make(v);
    try {
      copy->load(text);
      check_ids(copy->encode(other), copy->vocab_size());
      (void)copy->decode(raw);
    } catch (const ablate::Error&) {
    }
  }
  return 0;
}
