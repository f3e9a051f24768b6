// Family "tokenizer": text <-> token ids. Fitted on the training text (or loaded ready-made
// from files, e.g. GPT-2's), saved with the run (checkpoint) so that generation encodes prompts
// exactly as training did. encode and decode are const and may be called from several threads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ablate {

class Tokenizer {
 public:
  static constexpr const char* kFamily = "tokenizer";
  virtual ~Tokenizer() = default;
  // Builds the vocabulary from training text.
  virtual void fit(const std::string& text) = 0;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // Out-of-range ids decode to the unknown symbol.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // Serialised state (vocabulary, merges) and its inverse.
  virtual std::string save() const = 0;
  virtual void load(const std::string& state) = 0;
  // Padding id for batches of variable length, or -1 if the tokenizer has none.
  virtual int32_t pad_id() const { return -1; }
  // The end-of-text id that separates documents (GPT-2's <|endoftext|>), or -1 if none.
  virtual int32_t eot_id() const { return -1; }
  // True when the tokenizer comes ready-made (loaded from files named in its options): fit()
  // does nothing and the same ids come out whatever the training text.
  virtual bool pretrained() const { return false; }
};

// Each id's text, the decode of the id alone (the Model's vocab, BuildContext::vocab).
inline std::vector<std::string> token_texts(const Tokenizer& t) {
  std::vector<std::string> v(static_cast<size_t>(t.vocab_size()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = t.decode({static_cast<int32_t>(i)});
  return v;
}

// Each id's bytes of raw text, for bits per byte (docs/RESULTS.md): what the id adds to a
// decoded text after an id like itself, |decode(id id)| - |decode(id)|. For tokenizers that
// decode id by id (byte, char, gpt2) that is the id's own decode, exact; a bpe token that
// ends a word also counts the space that its word end stands for (one byte too many before a
// newline). The end-of-text and padding ids count 0: they are no text.
inline std::vector<int32_t> token_byte_counts(const Tokenizer& t) {
  std::vector<int32_t> v(static_cast<size_t>(t.vocab_size()));
  for (size_t i = 0; i < v.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    if (id == t.eot_id() || id == t.pad_id()) continue;
    const size_t one = t.decode({id}).size(), two = t.decode({id, id}).size();
    v[i] = static_cast<int32_t>(two > one ? two - one : 0);
  }
  return v;
}

// A token's bytes as one whitespace-free field of a tokenizer's saved state: lower-case hex,
// "-" for no bytes. hex_field_bytes reads one back into `bytes`; false if it is not such a field.
inline std::string bytes_hex_field(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string h;
  h.reserve(2 * bytes.size());
  for (unsigned char c : bytes) h += digits[c >> 4], h += digits[c & 15];
  return h.empty() ? "-" : h;
}
inline bool hex_field_bytes(const std::string& field, std::string& bytes) {
  bytes.clear();
  if (field == "-") return true;
  if (field.empty() || field.size() % 2) return false;
  auto nibble = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  for (size_t i = 0; i < field.size(); i += 2) {
    const int hi = nibble(field[i]), lo = nibble(field[i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes += static_cast<char>(hi * 16 + lo);
  }
  return true;
}

}  // namespace ablate
