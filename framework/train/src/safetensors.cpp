// safetensors reader and writer (see safetensors.hpp). The reader treats every number in the
// input as hostile: the header length, the shapes and the offsets are checked against the
// file's size, with overflow-safe arithmetic, before anything is read.
#include "ablate/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "ablate/error.hpp"

namespace ablate {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// The header is JSON text; more than this is not a weight file (the format's own limit).
constexpr uint64_t kMaxHeader = 100u << 20;

// Bytes per element of every dtype the format defines (0: not a safetensors dtype).
size_t dtype_size(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

uint64_t load_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE half to single, subnormals, infinities and NaN included.
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  if (exp == 0x1F) return bits_to_float(sign | 0x7F800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    // Subnormal: normalise the mantissa.
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400) == 0);
    return bits_to_float(sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3FF) << 13);
  }
  return bits_to_float(sign | (exp + 127 - 15) << 23 | mant << 13);
}

std::string range(uint64_t b, uint64_t e) {
  return "[" + std::to_string(b) + ", " + std::to_string(e) + ")";
}

std::string in_quotes(const std::string& s) {
  return "'" + (s.size() > 80 ? s.substr(0, 80) + "..." : s) + "'";
}

// The JSON header of a file of `size` bytes at p; its length in `n`.
Json parse_header(const uint8_t* p, size_t size, const std::string& f, uint64_t& n) {
  ABLATE_CHECK(size >= 8, f, ": not a safetensors file: ", size,
               " bytes, fewer than the 8 of the header length (truncated or empty)");
  n = load_u64(p);
  ABLATE_CHECK(n <= size - 8, f, ": truncated or not a safetensors file: the header length says ",
               n, " bytes, only ", size - 8, " follow");
  ABLATE_CHECK(n <= kMaxHeader, f, ": not a safetensors file: a header of ", n, " bytes (at most ",
               kMaxHeader, ")");
  ABLATE_CHECK(n >= 2 && p[8] == '{', f,
               ": not a safetensors file: the header does not start with '{' (a JSON object)");
  const std::string text(reinterpret_cast<const char*>(p + 8), static_cast<size_t>(n));
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    std::string why = e.what();
    const size_t at = why.find("] ");
    if (at != std::string::npos) why = why.substr(at + 2);
    throw Error(f + ": the safetensors header is not valid JSON (" + why +
                "): a damaged or truncated file");
  }
  ABLATE_CHECK(j.is_object(), f, ": the safetensors header is not a JSON object");
  return j;
}

// The header's __metadata__: texts by key.
void read_metadata(const Json& v, const std::string& f, std::map<std::string, std::string>& out) {
  ABLATE_CHECK(v.is_object(), f, ": __metadata__ is not a JSON object of texts");
  for (auto m = v.begin(); m != v.end(); ++m) {
    ABLATE_CHECK(m.value().is_string(), f, ": __metadata__ entry ", in_quotes(m.key()),
                 " is not a text");
    out[m.key()] = m.value().get<std::string>();
  }
}

// The header's entry of tensor `name`, checked: a known dtype, a shape, and data offsets that
// hold exactly its bytes within the data_size bytes after the header.
SafetensorsEntry header_entry(const std::string& name, const Json& v, uint64_t data_size,
                              const std::string& f) {
  const std::string t = "tensor " + in_quotes(name);
  ABLATE_CHECK(
      v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), f,
      ": ", t, " lacks dtype, shape or data_offsets in the header");
  SafetensorsEntry e;
  e.name = name;
  ABLATE_CHECK(v["dtype"].is_string(), f, ": ", t, ": dtype is not a text");
  e.dtype = v["dtype"].get<std::string>();
  const size_t esize = dtype_size(e.dtype);
  ABLATE_CHECK(esize != 0, f, ": ", t, " has dtype ", in_quotes(e.dtype),
               ", which is no safetensors dtype (BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, "
               "BF16, I32, U32, F32, F64, I64, U64)");
  ABLATE_CHECK(v["shape"].is_array(), f, ": ", t, ": shape is not a list");
  uint64_t numel = 1;
  for (const Json& d : v["shape"]) {
    ABLATE_CHECK(d.is_number_unsigned(), f, ": ", t, ": shape ", v["shape"].dump(),
                 " has an entry that is not a size >= 0");
    const uint64_t k = d.get<uint64_t>();
    ABLATE_CHECK(k <= (uint64_t{1} << 40) && (k == 0 || numel <= (uint64_t{1} << 50) / k), f, ": ",
                 t, ": shape ", v["shape"].dump(), " is impossibly large");
    numel *= k;
    e.shape.push_back(static_cast<int64_t>(k));
  }
  const Json& o = v["data_offsets"];
  ABLATE_CHECK(
      o.is_array() && o.size() == 2 && o[0].is_number_unsigned() && o[1].is_number_unsigned(), f,
      ": ", t, ": data_offsets is not a pair [begin, end] of byte offsets");
  e.begin = o[0].get<uint64_t>();
  e.end = o[1].get<uint64_t>();
  ABLATE_CHECK(e.end >= e.begin, f, ": ", t, ": data_offsets ", range(e.begin, e.end),
               " end before they begin");
  ABLATE_CHECK(e.end - e.begin == numel * esize, f, ": ", t, ": data_offsets ",
               range(e.begin, e.end), " hold ", e.end - e.begin, " bytes, but shape ",
               v["shape"].dump(), " of ", e.dtype, " needs ", numel * esize);
  ABLATE_CHECK(e.end <= data_size, f, ": ", t, ": data_offsets ", range(e.begin, e.end),
               " reach past the end of the data (", data_size,
               " bytes after the header): a truncated file or wrong offsets");
  return e;
}

// The tensors (sorted by offset) fill the data exactly: no overlap, no gap, nothing after.
void check_tensors_fill_data(const std::vector<SafetensorsEntry>& entries, uint64_t data_size,
                             const std::string& f) {
  uint64_t at = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : entries) {
    ABLATE_CHECK(e.begin >= at, f, ": tensors ", in_quotes(prev->name), " ",
                 range(prev->begin, prev->end), " and ", in_quotes(e.name), " ",
                 range(e.begin, e.end), " overlap in the data: a damaged header");
    ABLATE_CHECK(e.begin <= at, f, ": bytes ", range(at, e.begin),
                 " of the data belong to no tensor (safetensors leaves no gaps): a damaged header");
    at = e.end;
    prev = &e;
  }
  ABLATE_CHECK(at == data_size, f, ": bytes ", range(at, data_size),
               " of the data, after the last tensor, belong to no tensor: a damaged file");
}

}  // namespace

// The file's bytes: a read-only mapping, or a buffer (parse()).
struct SafetensorsFile::Bytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
  void* map = nullptr;
  std::vector<uint8_t> buffer;
  ~Bytes() {
    if (map) ::munmap(map, size);
  }
};

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const char* safetensors_readable_dtypes() {
  return "F32, F16 and BF16 (F16 and BF16 are converted to F32 on load)";
}

bool SafetensorsFile::readable(const std::string& d) {
  return d == "F32" || d == "F16" || d == "BF16";
}

SafetensorsFile SafetensorsFile::parse(std::vector<uint8_t> bytes, const std::string& name) {
  auto b = std::make_shared<Bytes>();
  b->buffer = std::move(bytes);
  b->data = b->buffer.data();
  b->size = b->buffer.size();
  SafetensorsFile f;
  f.bytes_ = b;
  f.path_ = name;
  f.check(b->size);
  return f;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file; give a .safetensors file");
  }
  auto b = std::make_shared<Bytes>();
  b->size = static_cast<size_t>(st.st_size);
  if (b->size > 0) {
    void* m = ::mmap(nullptr, b->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw Error(path + ": cannot map the file: " + why);
    }
    b->map = m;
    b->data = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  SafetensorsFile f;
  f.bytes_ = b;
  f.path_ = path;
  f.check(b->size);
  return f;
}

bool SafetensorsFile::looks_like(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint8_t head[9];
  if (!in.read(reinterpret_cast<char*>(head), 9)) return false;
  const uint64_t n = load_u64(head);
  return n >= 2 && n <= kMaxHeader && head[8] == '{';
}

void SafetensorsFile::check(size_t size) {
  const uint8_t* p = bytes_->data;
  const std::string& f = path_;
  uint64_t n = 0;
  const Json j = parse_header(p, size, f, n);
  const uint64_t data_size = size - 8 - n;
  data_ = p + 8 + n;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") read_metadata(it.value(), f, metadata_);
    else entries_.push_back(header_entry(it.key(), it.value(), data_size, f));
  }
  std::sort(entries_.begin(), entries_.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  check_tensors_fill_data(entries_, data_size, f);
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

void SafetensorsFile::read(const SafetensorsEntry& e, float* out) const {
  const uint8_t* p = data_ + e.begin;
  const int64_t n = e.numel();
  if (e.dtype == "F32") {
    for (int64_t i = 0; i < n; ++i) out[i] = bits_to_float(load_u32(p + 4 * i));
  } else if (e.dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) out[i] = bits_to_float(uint32_t(load_u16(p + 2 * i)) << 16);
  } else if (e.dtype == "F16") {
    for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(load_u16(p + 2 * i));
  } else {
    throw Error(path_ + ": tensor '" + e.name + "' has dtype " + e.dtype + "; ablate reads " +
                safetensors_readable_dtypes());
  }
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  OrderedJson h = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson m = OrderedJson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  uint64_t at = 0;
  for (const SafetensorsTensor& t : tensors) {
    if (t.name == "__metadata__" || h.contains(t.name))
      throw Error(path + ": two tensors named '" + t.name + "'");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) throw Error(path + ": tensor '" + t.name + "' has a negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    h[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {at, at + 4 * numel}}};
    at += 4 * numel;
  }
  std::string text;
  try {
    text = h.dump();
  } catch (const OrderedJson::exception& e) {
    throw Error(path + ": cannot write the safetensors header: " + e.what() +
                " (a metadata text that is not UTF-8?)");
  }
  // The data starts 8-byte aligned: the header is padded with spaces, as the format allows.
  while ((8 + text.size()) % 8 != 0) text += ' ';
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(tmp + ": cannot create: " + std::strerror(errno));
    uint8_t len[8];
    for (int i = 0; i < 8; ++i)
      len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const SafetensorsTensor& t : tensors) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
      out.write(reinterpret_cast<const char*>(t.data), static_cast<std::streamsize>(4 * n));
#else
      std::vector<uint8_t> buf(static_cast<size_t>(4 * n));
      for (int64_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, t.data + i, 4);
        for (int k = 0; k < 4; ++k)
          buf[static_cast<size_t>(4 * i + k)] = static_cast<uint8_t>(u >> (8 * k));
      }
      out.write(reinterpret_cast<const char*>(buf.data()),
                static_cast<std::streamsize>(buf.size()));
#endif
    }
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw Error(tmp + ": cannot write (disk full?): " + std::strerror(errno));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error(path + ": cannot rename " + tmp + " to it: " + ec.message());
}

}  // namespace ablate
