// Text data loading and window sampling (see data.hpp).
#include "ablate/data.hpp"

#include "ablate/data_source.hpp"
#include "ablate/error.hpp"

namespace ablate {

TextData load_text_data(const Options& o, const std::string& yaml_dir, Tokenizer& tok, int64_t context) {
  TextData d;
  std::string name = o.require<std::string>("path", "text file: a path, or a file name found in the data directories");
  double frac = o.get_in<double>("train_fraction", 0.9, 0.01, 0.999, "leading fraction of the file used for training");
  o.check_unused();
  try {
    d.path = resolve_data_file(name, yaml_dir);
    std::string text = read_text_file(d.path);
    // Split on a UTF-8 character boundary so neither part starts mid-character.
    size_t cut = static_cast<size_t>(static_cast<double>(text.size()) * frac);
    while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) ++cut;
    d.train_text = text.substr(0, cut);
    d.val_text = text.substr(cut);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    o.fail("path", e.what());
  }
  tok.fit(d.train_text);
  d.train = tok.encode(d.train_text);
  d.val = tok.encode(d.val_text);
  auto check = [&](const std::vector<int32_t>& t, const char* part) {
    if (static_cast<int64_t>(t.size()) < context + 1)
      o.fail("path", d.path + ": the " + std::string(part) + " part has " + std::to_string(t.size()) +
                         " tokens, fewer than one window (context + 1 = " + std::to_string(context + 1) +
                         "); use a longer file, a smaller model.context, or change data.train_fraction");
  };
  check(d.train, "training");
  check(d.val, "validation");
  return d;
}

void sample_batch(const TextData& data, bool train, int64_t B, int64_t T, Rng& rng, int32_t* x, int32_t* y) {
  const std::vector<int32_t>& tokens = train ? data.train : data.val;
  const uint64_t range = tokens.size() - static_cast<size_t>(T);  // offsets 0..size-T-1
  for (int64_t b = 0; b < B; ++b) {
    size_t i = static_cast<size_t>(rng.below(range));
    for (int64_t t = 0; t < T; ++t) {
      x[b * T + t] = tokens[i + static_cast<size_t>(t)];
      y[b * T + t] = tokens[i + static_cast<size_t>(t) + 1];
    }
  }
}

}  // namespace ablate
