// Token shards, the files small-LM projects exchange tokenized corpora in (docs/DATA.md):
//   llm.c / modded-nanogpt: a header of 256 little-endian int32 ([0] = 20240520 magic,
//   [1] = 1 version, [2] = token count; 1,024 bytes), then the tokens as uint16;
//   the uint32 variant (vocabularies over 65,535): magic 20240801, version 7, uint32 tokens;
//   nanoGPT's train.bin / val.bin: raw uint16 tokens, no header (np.memmap).
// Read memory-mapped: a token is read where it lies, nothing is converted or copied whole.
// Written streaming under a temporary name that close() renames to the final one.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace ablate {

constexpr int32_t kShardMagic16 = 20240520, kShardVersion16 = 1;  // llm.c, uint16 tokens
constexpr int32_t kShardMagic32 = 20240801, kShardVersion32 = 7;  // the uint32 variant
constexpr int64_t kShardHeaderInts = 256, kShardHeaderBytes = 1024;
constexpr int64_t kShardMaxTokens = 2147483647;  // the header's count is an int32

enum class ShardFormat {
  kUint16,  // llm.c header, magic 20240520, uint16 tokens
  kUint32,  // llm.c header, magic 20240801, uint32 tokens
  kRaw16,   // no header, uint16 tokens (nanoGPT)
};

// How a file is read. `header`: an llm.c header, either magic (the header says which token
// width). `raw`: headerless uint16 (nanoGPT). A file is never guessed to be raw because its
// magic is unknown: a damaged llm.c shard would be read as tokens.
enum class ShardLayout { kHeader, kRaw };

// "llm.c shard (uint16 tokens, magic 20240520)" and the like, for messages and manifests.
std::string shard_format_name(ShardFormat f);
// Bytes per token: 2 or 4.
int shard_token_bytes(ShardFormat f);
// The llm.c format that holds ids below vocab_size: uint16 up to 65,536 ids, else uint32.
ShardFormat shard_format_for_vocab(int64_t vocab_size);

// A shard mapped read-only. Copies share the mapping; it is unmapped with the last copy.
class Shard {
 public:
  // Maps `path` and checks it: with kHeader the magic, the version and the file's size against
  // the header's count; with kRaw an even length. Every error names the file, what was found,
  // what is expected and what to do.
  static Shard open(const std::string& path, ShardLayout layout = ShardLayout::kHeader);

  const std::string& path() const { return path_; }
  ShardFormat format() const { return format_; }
  int64_t size() const { return n_; }  // tokens
  int64_t file_bytes() const { return bytes_; }
  int64_t header_bytes() const { return format_ == ShardFormat::kRaw16 ? 0 : kShardHeaderBytes; }
  // Token i (0 <= i < size()).
  uint32_t operator[](int64_t i) const { return u16_ ? u16_[i] : u32_[i]; }
  // Tokens [begin, begin + n) as int32 (ids checked below the vocabulary fit).
  void copy(int64_t begin, int64_t n, int32_t* out) const;
  // The offset of the first token >= limit, or -1 (a parallel scan of the whole file).
  int64_t first_at_least(uint64_t limit) const;
  // The offsets of every token equal to id, in order (a parallel scan).
  std::vector<int64_t> positions_of(uint32_t id) const;
  // The largest token id (0 for an empty shard).
  uint32_t max_id() const;
  // Hands the pages read so far back to the page cache, so that a scan of a large file does
  // not stay in this process's resident memory (the mapping stays valid).
  void release() const;

 private:
  struct Mapping;
  std::shared_ptr<const Mapping> map_;
  std::string path_;
  ShardFormat format_ = ShardFormat::kUint16;
  int64_t n_ = 0, bytes_ = 0;
  const uint16_t* u16_ = nullptr;
  const uint32_t* u32_ = nullptr;
};

// Throws unless every token of `s` is below vocab_size: the error names the file, the first
// token that is not (its index and byte offset) and its id, the vocabulary size and `fix`.
void check_shard_ids(const Shard& s, int64_t vocab_size, const std::string& fix);

// Writes one shard: tokens are appended as they come (buffered), the count goes into the
// header at close(). The file is written as `path + ".tmp"` and renamed to `path` by close(),
// so a writer killed before it finished leaves no shard under the final name (and a "*.bin"
// glob does not pick the temporary up). Destroyed without close(): the temporary is removed.
class ShardWriter {
 public:
  ShardWriter(std::string path, ShardFormat format);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Ids must fit the format (uint16: below 65,536): else an error naming the file, the id and
  // the uint32 format; at most kShardMaxTokens in a header shard.
  void append(const int32_t* ids, size_t n);
  void close();
  int64_t tokens() const { return n_; }
  const std::string& path() const { return path_; }

 private:
  void flush();
  std::string path_, tmp_;
  ShardFormat format_;
  std::FILE* f_ = nullptr;
  int64_t n_ = 0;
  std::vector<unsigned char> buf_;
};

}  // namespace ablate
