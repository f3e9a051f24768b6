// Training a byte-level BPE vocabulary as GPT-2's (`ablate data train-tokenizer`, docs/DATA.md):
// the corpus is cut into pieces by GPT-2's pre-tokenizer (ablate/byte_bpe.hpp) and the pieces
// counted (word -> count, in parallel over chunks of the corpus); then, starting from the 256
// bytes, the most frequent adjacent pair of tokens inside a word is merged into a new token,
// again and again, until the vocabulary has its size. Ties between pairs of equal count go to
// the pair whose first token's bytes sort first, then whose second token's bytes sort first
// (bytewise), so the result depends on the corpus only, not on threads or hash order.
// Pair counts are kept incrementally (a pair index: each pair's count and the words it occurs
// in, a priority queue of pairs by count): a merge revisits only the words that contain its pair.
// The result is written as a Hugging Face tokenizer.json (model BPE, ByteLevel pre-tokenizer and
// decoder) that Hugging Face tokenizers and ablate's gpt2 tokenizer (`tokenizer_json:`) load.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ablate {

// Pre-tokenized words (their bytes) and how often each occurs, sorted by bytes.
using WordCounts = std::vector<std::pair<std::string, uint64_t>>;

// The words of `text`: the parts between occurrences of the special tokens, each cut into
// pieces as GPT-2's pre-tokenizer cuts it. Single-threaded; see count_corpus_words for files.
WordCounts count_words(std::string_view text,
                       const std::vector<std::string>& specials = {"<|endoftext|>"});

struct BpeCorpusOptions {
  std::vector<std::string>
      inputs;                  // files, directories (their files, recursively) or globs; .gz, .zst
  std::string field = "text";  // JSONL (.jsonl, .ndjson): the field that holds a document's text
  std::vector<std::string> specials = {"<|endoftext|>"};
  bool quiet = false;  // no progress on stderr
};

struct CorpusCount {
  WordCounts words;
  uint64_t bytes = 0;   // text bytes read (decompressed)
  uint64_t pieces = 0;  // pre-tokens counted
  int64_t files = 0;
  double seconds = 0;
};

// Streams the inputs (as `ablate data prepare` reads them) and counts their words in parallel
// with TBB: one reader cuts the text into chunks of about 1 MiB at places no pre-token spans,
// the cores count the chunks into maps of their own, merged at the end.
CorpusCount count_corpus_words(const BpeCorpusOptions& opt);

// A byte-level BPE vocabulary: ids 0-255 are the bytes in GPT-2's order (its encoder.json's
// first 256 ids), then one token per merge (merge k makes id 256 + k), then the specials.
struct ByteBpe {
  std::vector<std::string> tokens;                  // id -> bytes (a special token: its text)
  std::vector<std::pair<int32_t, int32_t>> merges;  // rank -> the two ids it joins
  std::vector<std::string> specials;
  int32_t first_special() const { return static_cast<int32_t>(tokens.size() - specials.size()); }
};

// Learns merges from `words` until the vocabulary (256 bytes, the merges and the specials) has
// vocab_size tokens, or no pair occurs min_frequency times. `progress` (optional) is called
// now and then with the merges made so far.
ByteBpe learn_byte_bpe(const WordCounts& words, int64_t vocab_size,
                       const std::vector<std::string>& specials = {"<|endoftext|>"},
                       uint64_t min_frequency = 2,
                       const std::function<void(size_t)>& progress = {});

// The vocabulary as a Hugging Face tokenizer.json (GPT-2's layout: no normalizer, ByteLevel
// pre-tokenizer, post-processor and decoder, model BPE with vocab and merges "a b" in GPT-2's
// character form, the specials as added tokens).
std::string hf_tokenizer_json(const ByteBpe& bpe);

}  // namespace ablate
