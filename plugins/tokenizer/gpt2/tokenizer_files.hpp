// Reading the files of GPT-2's tokenizer (gpt2.cpp): GPT-2's encoder.json and vocab.bpe
// (Hugging Face: vocab.json and merges.txt), or a Hugging Face tokenizer.json of a byte-level
// BPE, as token specs; every file is checked, and an error names the file, the entry and the
// fix. Private to the plugin.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ablate::gpt2 {

// A token as the files describe it: its bytes, and its rank (the index of the first merge
// that makes it), kSpecial (matched in the text as a whole, never merged into) or kPlain.
struct TokenSpec {
  std::string bytes;
  int32_t rank;
};
constexpr int32_t kPlain = -1, kSpecial = -2;

// GPT-2's two files (or Hugging Face's vocab.json and merges.txt).
std::vector<TokenSpec> read_gpt2_files(const std::string& encoder_path,
                                       const std::string& merges_path);

// A Hugging Face tokenizer.json: only a byte-level BPE as GPT-2's is accepted.
std::vector<TokenSpec> read_tokenizer_json(const std::string& path);

// s in single quotes, cut after `max` characters, for messages.
std::string in_quotes(const std::string& s, size_t max = 40);

}  // namespace ablate::gpt2
