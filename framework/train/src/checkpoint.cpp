// Checkpoint container: serialisation, atomic write, and a parser that treats every
// length in the input as hostile (it is a libFuzzer target). Layout in checkpoint.hpp.
#include "ablate/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ablate/error.hpp"
#include "ablate/fault.hpp"

namespace ablate {
namespace {

constexpr char kMagic[8] = {'A', 'B', 'L', 'A', 'T', 'E', 'C', 'K'};
constexpr size_t kHeaderSize = 8 + 4 + 8 + 4;
constexpr size_t kTrailerSize = 4;
enum Kind : uint8_t { kText = 1, kTensor = 2, kInt = 3, kShape = 4 };
constexpr uint32_t kMaxDims = 8;

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t load_u64(const uint8_t* p) {
  return uint64_t(load_u32(p)) | uint64_t(load_u32(p + 4)) << 32;
}

// Appends little-endian values to a byte sink, keeping a running CRC of everything written.
template <class Sink>
class Writer {
 public:
  explicit Writer(Sink& sink) : sink_(sink) {}
  void bytes(const void* p, size_t n) {
    crc_ = crc32(static_cast<const uint8_t*>(p), n, crc_);
    sink_(static_cast<const uint8_t*>(p), n);
  }
  void u8(uint8_t v) { bytes(&v, 1); }
  void u32(uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; ++i) b[i] = uint8_t(v >> (8 * i));
    bytes(b, 4);
  }
  void u64(uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = uint8_t(v >> (8 * i));
    bytes(b, 8);
  }
  void floats(const float* v, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    bytes(v, n * sizeof(float));
#else
    for (size_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, v + i, 4);
      u32(u);
    }
#endif
  }
  uint32_t crc() const { return crc_; }

 private:
  Sink& sink_;
  uint32_t crc_ = 0;
};

// f(name, data, count) for every tensor of ck, owned or viewed, in name order.
template <class F>
void for_each_tensor(const Checkpoint& ck, F&& f) {
  auto a = ck.tensors.begin();
  auto b = ck.tensor_views.begin();
  while (a != ck.tensors.end() || b != ck.tensor_views.end()) {
    if (b == ck.tensor_views.end() || (a != ck.tensors.end() && a->first < b->first)) {
      f(a->first, a->second.data(), a->second.size());
      ++a;
    } else {
      f(b->first, b->second.data, b->second.size);
      ++b;
    }
  }
}

uint64_t serialized_size(const Checkpoint& ck) {
  uint64_t n = kHeaderSize + kTrailerSize;
  for (const auto& [k, v] : ck.texts) n += 1 + 4 + k.size() + 8 + v.size();
  for_each_tensor(ck, [&](const std::string& k, const float*, size_t count) {
    n += 1 + 4 + k.size() + 8 + 4 * uint64_t(count);
  });
  for (const auto& [k, v] : ck.ints) n += 1 + 4 + k.size() + 8;
  for (const auto& [k, v] : ck.shapes) n += 1 + 4 + k.size() + 4 + 8 * uint64_t(v.size());
  return n;
}

template <class Sink>
void serialize_to(const Checkpoint& ck, Sink& sink) {
  Writer<Sink> w(sink);
  w.bytes(kMagic, sizeof kMagic);
  w.u32(kCheckpointVersion);
  w.u64(serialized_size(ck));
  w.u32(w.crc());  // header CRC: lets a damaged total_size be told from a short file
  auto name = [&](Kind kind, const std::string& k) {
    if (k.size() > 0xFFFFFFFFu) throw Error("checkpoint entry name longer than 4 GiB");
    w.u8(kind);
    w.u32(static_cast<uint32_t>(k.size()));
    w.bytes(k.data(), k.size());
  };
  for (const auto& [k, v] : ck.texts) {
    name(kText, k);
    w.u64(v.size());
    w.bytes(v.data(), v.size());
  }
  for_each_tensor(ck, [&](const std::string& k, const float* data, size_t count) {
    name(kTensor, k);
    w.u64(count);
    w.floats(data, count);
  });
  for (const auto& [k, v] : ck.ints) {
    name(kInt, k);
    w.u64(v);
  }
  for (const auto& [k, v] : ck.shapes) {
    name(kShape, k);
    w.u32(static_cast<uint32_t>(v.size()));
    for (int64_t d : v) w.u64(static_cast<uint64_t>(d));
  }
  w.u32(w.crc());
}

// Bounds-checked cursor over untrusted bytes.
class Reader {
 public:
  Reader(const uint8_t* data, size_t end, size_t pos, const std::string& name)
      : data_(data), end_(end), pos_(pos), name_(name) {}
  bool done() const { return pos_ == end_; }
  size_t pos() const { return pos_; }
  size_t remaining() const { return end_ - pos_; }
  [[noreturn]] void fail(uint64_t n, const char* what) const {
    throw Error(message(name_, ": corrupt checkpoint (", what, " at byte ", pos_, " needs ", n,
                        " bytes, only ", remaining(), " remain before the CRC)"));
  }
  const uint8_t* take(uint64_t n, const char* what) {
    if (n > remaining()) fail(n, what);
    const uint8_t* p = data_ + pos_;
    pos_ += static_cast<size_t>(n);
    return p;
  }
  uint8_t u8(const char* what) { return *take(1, what); }
  uint32_t u32(const char* what) { return load_u32(take(4, what)); }
  uint64_t u64(const char* what) { return load_u64(take(8, what)); }

 private:
  const uint8_t* data_;
  size_t end_, pos_;
  const std::string& name_;
};

std::string sys_error(const std::string& path, const std::string& what) {
  return path + ": " + what + ": " + std::strerror(errno);
}

void write_all(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(sys_error(path, "cannot write checkpoint"));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

uint32_t crc32(const uint8_t* data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

// Every shape names a tensor of the checkpoint and multiplies out to its length.
static void check_shapes(const Checkpoint& ck, const std::string& what) {
  for (const auto& [k, v] : ck.tensor_views)
    ABLATE_CHECK(!ck.tensors.count(k), what, ": tensor '", k,
                 "' is both in tensors and in tensor_views; keep one");
  for (const auto& [k, v] : ck.shapes) {
    auto t = ck.tensors.find(k);
    auto view = ck.tensor_views.find(k);
    ABLATE_CHECK(t != ck.tensors.end() || view != ck.tensor_views.end(), what, ": shape of '", k,
                 "' without a tensor of that name");
    const size_t count = t != ck.tensors.end() ? t->second.size() : view->second.size;
    ABLATE_CHECK(v.size() <= kMaxDims, what, ": shape of '", k, "' has ", v.size(), " dimensions");
    uint64_t n = 1;
    bool ok = true;
    std::string dims;
    for (int64_t d : v) {
      dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      if (d < 0 || (d > 0 && n > (uint64_t{1} << 62) / static_cast<uint64_t>(d))) ok = false;
      else n *= static_cast<uint64_t>(d);
    }
    ABLATE_CHECK(ok && n == count, what, ": tensor '", k, "' has ", count,
                 " values, but its shape (", dims, ") has ",
                 ok ? std::to_string(n) : std::string("an impossible number of"), " elements");
  }
}

std::vector<uint8_t> serialize_checkpoint(const Checkpoint& ck) {
  check_shapes(ck, "serialize_checkpoint");
  std::vector<uint8_t> out;
  out.reserve(serialized_size(ck));
  auto sink = [&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); };
  serialize_to(ck, sink);
  return out;
}

namespace {

// Checks the header (magic, version, size) and the CRC of the whole; returns the version and,
// in `body_end`, where the entries end.
uint32_t check_checkpoint_frame(const uint8_t* data, size_t size, const std::string& name,
                                size_t& body_end) {
  const size_t magic_n = std::min(size, sizeof kMagic);
  ABLATE_CHECK(size != 0, name, ": not an ablate checkpoint (the file is empty)");
  ABLATE_CHECK(std::memcmp(data, kMagic, magic_n) == 0, name,
               ": not an ablate checkpoint (it does not start with \"ABLATECK\")");
  ABLATE_CHECK(size >= kHeaderSize, name, ": checkpoint truncated at byte ", size,
               " (the header alone is ", kHeaderSize, " bytes)");
  const uint32_t version = load_u32(data + 8);
  const uint64_t total = load_u64(data + 12);
  ABLATE_CHECK(crc32(data, 20) == load_u32(data + 20), name,
               ": corrupt checkpoint (header CRC mismatch)");
  ABLATE_CHECK(version >= 1 && version <= kCheckpointVersion, name, ": checkpoint version ",
               version, " is not supported (this ablate reads versions 1 to ", kCheckpointVersion,
               "); use the ablate that wrote it");
  ABLATE_CHECK(total >= kHeaderSize + kTrailerSize, name,
               ": corrupt checkpoint (header gives an impossible size of ", total, " bytes)");
  ABLATE_CHECK(size >= total, name, ": checkpoint truncated at byte ", size, " (header says ",
               total,
               " bytes): an interrupted write or incomplete copy; use an earlier checkpoint");
  ABLATE_CHECK(size <= total, name, ": corrupt checkpoint (", size - total,
               " unexpected bytes after byte ", total, ")");
  body_end = static_cast<size_t>(total) - kTrailerSize;
  ABLATE_CHECK(crc32(data, body_end) == load_u32(data + body_end), name,
               ": corrupt checkpoint (CRC mismatch): the file was damaged after it was written");
  return version;
}

std::vector<float> read_tensor_entry(Reader& r, const std::string& key, size_t at,
                                     const std::string& name) {
  const uint64_t n = r.u64("tensor length");
  // Compare element counts, not bytes: 4 * n may overflow.
  ABLATE_CHECK(n <= r.remaining() / 4, name, ": corrupt checkpoint (tensor '", key, "' at byte ",
               at, " claims ", n, " floats, only ", r.remaining(), " bytes remain)");
  const uint8_t* p = r.take(n * 4, "tensor data");
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u = load_u32(p + 4 * i);
    std::memcpy(&v[i], &u, 4);
  }
  return v;
}

std::vector<int64_t> read_shape_entry(Reader& r, const std::string& key, size_t at,
                                      const std::string& name) {
  const uint32_t ndim = r.u32("shape rank");
  ABLATE_CHECK(ndim <= kMaxDims, name, ": corrupt checkpoint (shape of '", key, "' at byte ", at,
               " has ", ndim, " dimensions, at most ", kMaxDims, ")");
  std::vector<int64_t> dims(ndim);
  for (auto& d : dims) {
    const uint64_t v = r.u64("shape dimension");
    ABLATE_CHECK(v <= (uint64_t{1} << 62), name, ": corrupt checkpoint (shape of '", key,
                 "' has a dimension of ", v, ")");
    d = static_cast<int64_t>(v);
  }
  return dims;
}

}  // namespace

Checkpoint parse_checkpoint(const uint8_t* data, size_t size, const std::string& name) {
  size_t body_end = 0;
  const uint32_t version = check_checkpoint_frame(data, size, name, body_end);
  Checkpoint ck;
  Reader r(data, body_end, kHeaderSize, name);
  while (!r.done()) {
    const size_t at = r.pos();
    const uint8_t kind = r.u8("entry kind");
    const uint32_t name_len = r.u32("entry name length");
    const uint8_t* key_p = r.take(name_len, "entry name");
    std::string key(reinterpret_cast<const char*>(key_p), name_len);
    bool fresh = false;
    if (kind == kText) {
      const uint64_t n = r.u64("text length");
      const uint8_t* p = r.take(n, "text");
      fresh =
          ck.texts
              .emplace(key, std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n)))
              .second;
    } else if (kind == kTensor) {
      fresh = ck.tensors.emplace(key, read_tensor_entry(r, key, at, name)).second;
    } else if (kind == kInt) {
      fresh = ck.ints.emplace(key, r.u64("integer")).second;
    } else if (kind == kShape && version >= 2) {
      fresh = ck.shapes.emplace(key, read_shape_entry(r, key, at, name)).second;
    } else {
      throw Error(
          message(name, ": corrupt checkpoint (unknown entry kind ", kind, " at byte ", at, ")"));
    }
    ABLATE_CHECK(fresh, name, ": corrupt checkpoint (entry '", key,
                 "' appears twice, second at byte ", at, ")");
  }
  check_shapes(ck, name + ": corrupt checkpoint");
  return ck;
}

Checkpoint read_checkpoint(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(sys_error(path, "cannot open checkpoint"));
  std::vector<uint8_t> bytes;
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw Error(sys_error(path, "cannot stat checkpoint"));
    if (!S_ISREG(st.st_mode)) throw Error(path + ": not an ablate checkpoint (not a regular file)");
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error(sys_error(path, "cannot read checkpoint"));
      if (n == 0) break;  // shrank while reading: parse what is there
      got += static_cast<size_t>(n);
    }
    bytes.resize(got);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return parse_checkpoint(bytes.data(), bytes.size(), path);
}

void write_checkpoint(const std::string& path, const Checkpoint& ck) {
  check_shapes(ck, path);
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(sys_error(tmp, "cannot create checkpoint"));
  try {
    std::vector<uint8_t> buf;
    buf.reserve(1 << 20);
    auto sink = [&](const uint8_t* p, size_t n) {
      if (buf.size() + n > buf.capacity() && !buf.empty()) {
        write_all(fd, buf.data(), buf.size(), tmp);
        buf.clear();
      }
      if (n >= buf.capacity()) write_all(fd, p, n, tmp);
      else buf.insert(buf.end(), p, p + n);
    };
    serialize_to(ck, sink);
    // In two halves: the crash tests kill the process in between (fault.hpp).
    const size_t half = buf.size() / 2;
    write_all(fd, buf.data(), half, tmp);
    fault_point("checkpoint.partial");
    write_all(fd, buf.data() + half, buf.size() - half, tmp);
    if (::fsync(fd) != 0) throw Error(sys_error(tmp, "cannot fsync checkpoint"));
    if (::close(fd) != 0) {
      fd = -1;
      throw Error(sys_error(tmp, "cannot close checkpoint"));
    }
    fd = -1;
    fault_point("checkpoint.rename");
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error(sys_error(path, "cannot rename " + tmp + " to it"));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable; failure here leaves a complete file, so it is not an error.
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace ablate
