// Token shards: reading (mmap) and writing (see shards.hpp).
#include "ablate/shards.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "ablate/error.hpp"
#include "ablate/ops.hpp"

namespace ablate {

namespace {

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
constexpr bool kBigEndian = true;
#else
constexpr bool kBigEndian = false;
#endif

constexpr int64_t kScanChunk = int64_t{1} << 20;  // tokens per task of a parallel scan

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

const char* kKnownFormats =
    "known: 20240520 (llm.c shard, uint16 tokens, version 1) and 20240801 (llm.c uint32 variant, "
    "version 7); a headerless "
    "nanoGPT file (train.bin / val.bin, uint16 tokens from np.memmap) is read with format raw "
    "(data.format: raw)";

// The file mapped read-only (null when it is empty), its size in `bytes`.
void* map_shard_file(const std::string& path, int64_t& bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open token shard: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string why = S_ISDIR(st.st_mode) ? "it is a directory" : std::strerror(errno);
    ::close(fd);
    throw Error(path + ": cannot read token shard: " + why);
  }
  bytes = static_cast<int64_t>(st.st_size);
  void* addr = nullptr;
  if (bytes > 0) {
    addr = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw Error(message(path, ": cannot map token shard (", bytes, " bytes): ", why));
    }
  }
  ::close(fd);  // the mapping keeps the file
  return addr;
}

// A raw uint16 token file (nanoGPT's): an even length, and not an llm.c shard.
void check_raw_shard(const std::string& path, int64_t bytes, const unsigned char* base) {
  ABLATE_CHECK(bytes % 2 == 0, path, ": ", bytes,
               " bytes, an odd length: a raw uint16 token file (nanoGPT) "
               "holds 2 bytes a token, and this one ends in half a token at byte offset ",
               bytes - 1,
               ". The file is cut short, or it is not raw uint16 tokens (an llm.c shard, with a "
               "header, reads with "
               "data.format: header)");
  if (bytes >= 8) {
    int32_t magic;
    std::memcpy(&magic, base, 4);
    ABLATE_CHECK(magic != kShardMagic16 && magic != kShardMagic32, path,
                 ": read as raw uint16 tokens, but it starts with llm.c's shard magic ", magic,
                 ": it is an llm.c shard, whose 1,024-byte header would be read as tokens. Read "
                 "it with format header (data.format: header, the default)");
  }
}

// An llm.c shard's header: its format, and its token count in `n`, checked against the file's
// size.
ShardFormat check_shard_header(const std::string& path, int64_t bytes, const unsigned char* base,
                               int64_t& n) {
  ABLATE_CHECK(bytes >= kShardHeaderBytes, path, ": ", bytes, " bytes, shorter than the ",
               kShardHeaderBytes,
               "-byte header of an llm.c token shard (256 int32: magic, version, token count); ",
               kKnownFormats);
  int32_t header[3];
  std::memcpy(header, base, sizeof header);
  const int32_t magic = header[0], version = header[1], count = header[2];
  ShardFormat format;
  if (magic == kShardMagic16) {
    format = ShardFormat::kUint16;
  } else if (magic == kShardMagic32) {
    format = ShardFormat::kUint32;
  } else {
    throw Error(message(path, ": not an llm.c token shard: its first int32 (the magic) is ", magic,
                        " (", hex32(static_cast<uint32_t>(magic)), "); ", kKnownFormats));
  }
  const int32_t want_version = format == ShardFormat::kUint16 ? kShardVersion16 : kShardVersion32;
  ABLATE_CHECK(version == want_version, path, ": llm.c shard with magic ", magic, " but version ",
               version, "; magic ", magic, " goes with version ", want_version, " (",
               shard_format_name(format),
               "). The file was written by another tool version or is damaged; "
               "write it again in a known format (ablate data prepare)");
  ABLATE_CHECK(count >= 0, path, ": the header's token count (int32 at byte offset 8) is ", count,
               ", negative: the header is damaged; write the shard again");
  const int width = shard_token_bytes(format);
  const int64_t want = kShardHeaderBytes + static_cast<int64_t>(count) * width;
  if (bytes != want) {
    const std::string expect =
        message("the header counts ", count, " tokens, so the file should be ", want, " bytes (",
                kShardHeaderBytes, " + ", count, " x ", width, ")");
    ABLATE_CHECK(bytes > want, path, ": truncated: ", expect, ", but it has ", bytes,
                 " bytes; the tokens stop at byte offset ", bytes, " (after token ",
                 (bytes - kShardHeaderBytes) / width, " of ", count,
                 "). Copy or write the shard again (was its writer stopped before it finished?)");
    throw Error(message(path, ": ", expect, ", but it has ", bytes, " bytes: ", bytes - want,
                        " bytes after the last token (byte offset ", want,
                        "). The count or the file is wrong; write the shard again"));
  }
  n = count;
  return format;
}

}  // namespace

struct Shard::Mapping {
  void* addr = nullptr;
  size_t length = 0;
  ~Mapping() {
    if (addr) ::munmap(addr, length);
  }
};

std::string shard_format_name(ShardFormat f) {
  switch (f) {
    case ShardFormat::kUint16: return "llm.c shard (uint16 tokens, magic 20240520, version 1)";
    case ShardFormat::kUint32: return "llm.c shard (uint32 tokens, magic 20240801, version 7)";
    case ShardFormat::kRaw16: return "raw uint16 tokens (nanoGPT, no header)";
  }
  return "?";
}

int shard_token_bytes(ShardFormat f) { return f == ShardFormat::kUint32 ? 4 : 2; }

ShardFormat shard_format_for_vocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? ShardFormat::kUint16 : ShardFormat::kUint32;
}

Shard Shard::open(const std::string& path, ShardLayout layout) {
  if (kBigEndian)
    throw Error(path +
                ": token shards are little-endian; this machine is big-endian, which ablate does "
                "not read them on");
  Shard s;
  s.path_ = path;
  auto map = std::make_shared<Mapping>();
  map->addr = map_shard_file(path, s.bytes_);
  map->length = static_cast<size_t>(s.bytes_);
  s.map_ = map;
  const auto* base = static_cast<const unsigned char*>(map->addr);
  if (layout == ShardLayout::kRaw) {
    check_raw_shard(path, s.bytes_, base);
    s.format_ = ShardFormat::kRaw16;
    s.n_ = s.bytes_ / 2;
    s.u16_ = reinterpret_cast<const uint16_t*>(base);
    return s;
  }
  s.format_ = check_shard_header(path, s.bytes_, base, s.n_);
  if (s.format_ == ShardFormat::kUint16)
    s.u16_ = reinterpret_cast<const uint16_t*>(base + kShardHeaderBytes);
  else s.u32_ = reinterpret_cast<const uint32_t*>(base + kShardHeaderBytes);
  return s;
}

void Shard::copy(int64_t begin, int64_t n, int32_t* out) const {
  if (u16_) {
    const uint16_t* p = u16_ + begin;
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  } else {
    const uint32_t* p = u32_ + begin;
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(p[i]);
  }
}

int64_t Shard::first_at_least(uint64_t limit) const {
  std::atomic<int64_t> first{n_};
  const int64_t chunks = (n_ + kScanChunk - 1) / kScanChunk;
  parallel_for(chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t b = c * kScanChunk, e = std::min(n_, b + kScanChunk);
      if (b >= first.load(std::memory_order_relaxed)) return;
      for (int64_t i = b; i < e; ++i)
        if ((*this)[i] >= limit) {
          int64_t cur = first.load();
          while (i < cur && !first.compare_exchange_weak(cur, i)) {
          }
          break;
        }
    }
  });
  return first.load() == n_ ? -1 : first.load();
}

std::vector<int64_t> Shard::positions_of(uint32_t id) const {
  const int64_t chunks = (n_ + kScanChunk - 1) / kScanChunk;
  std::vector<std::vector<int64_t>> found(static_cast<size_t>(chunks));
  parallel_for(chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t b = c * kScanChunk, e = std::min(n_, b + kScanChunk);
      auto& f = found[static_cast<size_t>(c)];
      for (int64_t i = b; i < e; ++i)
        if ((*this)[i] == id) f.push_back(i);
    }
  });
  std::vector<int64_t> out;
  for (auto& f : found) out.insert(out.end(), f.begin(), f.end());
  return out;
}

uint32_t Shard::max_id() const {
  const int64_t chunks = (n_ + kScanChunk - 1) / kScanChunk;
  std::vector<uint32_t> m(static_cast<size_t>(chunks), 0);
  parallel_for(chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t b = c * kScanChunk, e = std::min(n_, b + kScanChunk);
      uint32_t v = 0;
      for (int64_t i = b; i < e; ++i) v = std::max(v, (*this)[i]);
      m[static_cast<size_t>(c)] = v;
    }
  });
  return m.empty() ? 0 : *std::max_element(m.begin(), m.end());
}

void Shard::release() const {
  if (map_ && map_->addr) ::madvise(map_->addr, map_->length, MADV_DONTNEED);
}

void check_shard_ids(const Shard& s, int64_t vocab_size, const std::string& fix) {
  const int64_t i = s.first_at_least(static_cast<uint64_t>(vocab_size));
  if (i < 0) return;
  throw Error(message(s.path(), ": token ", i, " (byte offset ",
                      s.header_bytes() + i * shard_token_bytes(s.format()), ") is id ", s[i],
                      ", but the vocabulary has ", vocab_size, " ids (0 to ", vocab_size - 1,
                      "): the shard was made with another tokenizer. ", fix));
}

ShardWriter::ShardWriter(std::string path, ShardFormat format)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), format_(format) {
  if (kBigEndian)
    throw Error(
        path_ +
        ": token shards are little-endian; ablate does not write them on a big-endian machine");
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) throw Error(tmp_ + ": cannot create token shard: " + std::strerror(errno));
  if (format_ != ShardFormat::kRaw16) {
    int32_t header[kShardHeaderInts] = {};
    header[0] = format_ == ShardFormat::kUint16 ? kShardMagic16 : kShardMagic32;
    header[1] = format_ == ShardFormat::kUint16 ? kShardVersion16 : kShardVersion32;
    if (std::fwrite(header, sizeof header, 1, f_) != 1) {
      const std::string why = std::strerror(errno);
      std::fclose(f_);
      f_ = nullptr;
      std::remove(tmp_.c_str());
      throw Error(tmp_ + ": cannot write token shard: " + why);
    }
  }
  buf_.reserve(size_t{1} << 20);
}

ShardWriter::~ShardWriter() {
  if (!f_) return;
  std::fclose(f_);
  std::remove(tmp_.c_str());
}

void ShardWriter::append(const int32_t* ids, size_t n) {
  if (!f_) throw Error(path_ + ": internal: append after close");
  ABLATE_CHECK(format_ == ShardFormat::kRaw16 || n_ + static_cast<int64_t>(n) <= kShardMaxTokens,
               path_, ": more than ", kShardMaxTokens,
               " tokens, which the header's int32 count cannot hold; write smaller shards "
               "(--shard-tokens)");
  const int width = shard_token_bytes(format_);
  const uint32_t limit = width == 2 ? 65536u : 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    ABLATE_CHECK(id >= 0 && static_cast<uint32_t>(id) < limit, path_, ": token ",
                 n_ + static_cast<int64_t>(i), " is id ", id, ", which ",
                 shard_format_name(format_), " cannot hold (ids 0 to ", limit - 1,
                 "); write vocabularies over 65,536 ids as ",
                 shard_format_name(ShardFormat::kUint32));
    const uint32_t v = static_cast<uint32_t>(id);
    unsigned char b[4];
    std::memcpy(b, &v, 4);  // little-endian host
    buf_.insert(buf_.end(), b, b + width);
    if (buf_.size() >= (size_t{1} << 20)) flush();
  }
  n_ += static_cast<int64_t>(n);
}

void ShardWriter::flush() {
  if (!buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size())
    throw Error(tmp_ + ": cannot write token shard: " + std::strerror(errno) + " (disk full?)");
  buf_.clear();
}

void ShardWriter::close() {
  if (!f_) return;
  flush();
  if (format_ != ShardFormat::kRaw16) {
    const int32_t count = static_cast<int32_t>(n_);
    if (std::fseek(f_, 8, SEEK_SET) != 0 || std::fwrite(&count, 4, 1, f_) != 1)
      throw Error(tmp_ + ": cannot write the token count into the header: " + std::strerror(errno));
  }
  const bool ok = std::fflush(f_) == 0;
  const int err = errno;
  std::fclose(f_);
  f_ = nullptr;
  if (!ok) {
    std::remove(tmp_.c_str());
    throw Error(tmp_ + ": cannot write token shard: " + std::strerror(err) + " (disk full?)");
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp_.c_str());
    throw Error(path_ + ": cannot rename " + tmp_ + " to it: " + why);
  }
}

}  // namespace ablate
