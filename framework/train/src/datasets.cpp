// Named public datasets (see datasets.hpp and docs/DATA.md "Named datasets"): the table, the
// zip member reader (zlib, which the train layer links for .gz corpora already: no unzip
// subprocess to find and parse, no other library), the split files in the cache directory and
// the token shards made from them.
#include "ablate/datasets.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ablate/error.hpp"
#include "ablate/prepare.hpp"

namespace ablate {

namespace fs = std::filesystem;

namespace {

// The URLs, SHA-256 digests and sizes of the files are data_source.cpp's known files.
const NamedDataset kDatasets[] = {
    {"tinyshakespeare",
     "Karpathy's tiny Shakespeare (1.1 MB): first 90% training, last 10% validation, by bytes",
     "tinyshakespeare.txt", "", "", 9, 1, 0, 1115394, 0,
     "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed", ""},
    {"enwik8",
     "the first 10^8 bytes of an English Wikipedia XML dump (Hutter Prize): 90M training, 5M "
     "validation, 5M test bytes",
     "enwik8.zip", "enwik8", "", 90, 5, 5, 100000000, 0,
     "2b49720ec4d78c3c9fabaee6e4179a5e997302b3a70029f30f2d582218c024a8", ""},
    {"text8",
     "enwik8's text cleaned to the letters a-z and spaces (10^8 bytes): 90M training, 5M "
     "validation, 5M test bytes",
     "text8.zip", "text8", "", 90, 5, 5, 100000000, 0,
     "6e890197040d37d85beb962ae1f041ff1d9a9ca8d20c7d99c85027eebf51dca7", ""},
    // No SHA-256 of the TinyStories files is published that we could find: their sizes are
    // compared.
    {"tinystories",
     "TinyStories V2 (GPT-4 stories, 2.2 GB), its published training and validation files, "
     "stories separated by <|endoftext|>",
     "TinyStoriesV2-GPT4-train.txt", "", "TinyStoriesV2-GPT4-valid.txt", 0, 0, 0, 2227753162,
     22502601, "", "<|endoftext|>"},
};

constexpr int kSplitsVersion = 1;
constexpr int kDownloadSeconds = 4 * 3600;  // the largest file is 2.2 GB

// ---- zip ----------------------------------------------------------------------------------

uint32_t le16(const unsigned char* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8; }
uint32_t le32(const unsigned char* p) { return le16(p) | le16(p + 2) << 16; }

struct ZipEntry {
  std::string name;
  uint32_t method = 0, flags = 0, crc = 0;
  uint64_t compressed = 0, size = 0, local_offset = 0;
};

class ZipFile {
 public:
  explicit ZipFile(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) throw Error(path + ": cannot open the zip archive: " + std::strerror(errno));
    in_.seekg(0, std::ios::end);
    const int64_t size = static_cast<int64_t>(in_.tellg());
    // The end-of-central-directory record: the last 22 bytes, or further back past a comment.
    const int64_t tail = std::min<int64_t>(size, 22 + 65535);
    std::vector<unsigned char> t(static_cast<size_t>(tail));
    read_at(size - tail, t.data(), t.size());
    int64_t eocd = -1;
    for (int64_t i = tail - 22; i >= 0; --i)
      if (le32(&t[static_cast<size_t>(i)]) == 0x06054b50) {
        eocd = i;
        break;
      }
    if (eocd < 0)
      throw Error(path + ": not a zip archive (no end-of-central-directory record in its last " +
                  std::to_string(tail) + " bytes); download it again");
    const unsigned char* e = &t[static_cast<size_t>(eocd)];
    const uint32_t entries = le16(e + 10), cd_size = le32(e + 12), cd_offset = le32(e + 16);
    if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF)
      throw Error(path +
                  ": a zip64 archive, which ablate does not read; unpack it (unzip) and put the "
                  "text file in the "
                  "data directories");
    if (int64_t(cd_offset) + cd_size > size)
      throw Error(path +
                  ": the zip archive is cut short (its central directory lies "
                  "past its end); download it again");
    std::vector<unsigned char> cd(cd_size);
    read_at(cd_offset, cd.data(), cd.size());
    size_t p = 0;
    for (uint32_t k = 0; k < entries; ++k) {
      if (p + 46 > cd.size() || le32(&cd[p]) != 0x02014b50)
        throw Error(path + ": damaged zip central directory at entry " + std::to_string(k) +
                    "; download it again");
      ZipEntry z;
      z.flags = le16(&cd[p + 8]);
      z.method = le16(&cd[p + 10]);
      z.crc = le32(&cd[p + 16]);
      z.compressed = le32(&cd[p + 20]);
      z.size = le32(&cd[p + 24]);
      const size_t n = le16(&cd[p + 28]), extra = le16(&cd[p + 30]), comment = le16(&cd[p + 32]);
      z.local_offset = le32(&cd[p + 42]);
      if (p + 46 + n > cd.size())
        throw Error(path + ": damaged zip central directory; download it again");
      z.name.assign(reinterpret_cast<const char*>(&cd[p + 46]), n);
      entries_.push_back(z);
      p += 46 + n + extra + comment;
    }
  }

  const ZipEntry& entry(const std::string& member) const {
    for (const auto& e : entries_)
      if (e.name == member) return e;
    std::string names;
    for (const auto& e : entries_) names += (names.empty() ? "" : ", ") + e.name;
    throw Error(path_ + ": the zip archive holds no '" + member + "' (it holds: " +
                (names.empty() ? "nothing" : names) + "); download the published archive again");
  }

  void extract(const std::string& member, const std::function<void(const char*, size_t)>& out) {
    const ZipEntry& e = entry(member);
    const std::string what = path_ + ": member '" + member + "'";
    if (e.size == 0xFFFFFFFF || e.compressed == 0xFFFFFFFF || e.local_offset == 0xFFFFFFFF)
      throw Error(what +
                  " needs zip64, which ablate does not read; unpack it (unzip) and put the file in "
                  "the data directories");
    if (e.flags & 1) throw Error(what + " is encrypted; give the published, unencrypted archive");
    if (e.method != 0 && e.method != 8)
      throw Error(what + " is compressed with method " + std::to_string(e.method) +
                  "; ablate reads stored (0) and deflated (8) members");
    unsigned char lh[30];
    read_at(static_cast<int64_t>(e.local_offset), lh, sizeof lh);
    if (le32(lh) != 0x04034b50)
      throw Error(what + ": no local header where the central directory says; download it again");
    in_.seekg(static_cast<std::streamoff>(e.local_offset + 30 + le16(lh + 26) + le16(lh + 28)));
    uLong crc = crc32(0L, Z_NULL, 0);
    uint64_t produced = 0, left = e.compressed;
    std::vector<char> in(size_t{1} << 20), buf(size_t{1} << 20);
    auto emit = [&](const char* p, size_t n) {
      crc = crc32(crc, reinterpret_cast<const Bytef*>(p), static_cast<uInt>(n));
      produced += n;
      out(p, n);
    };
    auto next_block = [&]() -> size_t {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, in.size()));
      if (n == 0) return 0;
      in_.read(in.data(), static_cast<std::streamsize>(n));
      if (static_cast<size_t>(in_.gcount()) != n)
        throw Error(what + ": the archive ends before the member's " +
                    std::to_string(e.compressed) + " bytes; download it again");
      left -= n;
      return n;
    };
    if (e.method == 0) {
      while (const size_t n = next_block()) emit(in.data(), n);
    } else {
      z_stream z{};
      if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw Error(what + ": zlib cannot start inflating");
      int rc = Z_OK;
      try {
        while (rc != Z_STREAM_END) {
          if (z.avail_in == 0) {
            z.avail_in = static_cast<uInt>(next_block());
            z.next_in = reinterpret_cast<Bytef*>(in.data());
            if (z.avail_in == 0)
              throw Error(what + ": the deflated data ends early; download it again");
          }
          z.next_out = reinterpret_cast<Bytef*>(buf.data());
          z.avail_out = static_cast<uInt>(buf.size());
          rc = inflate(&z, Z_NO_FLUSH);
          if (rc != Z_OK && rc != Z_STREAM_END)
            throw Error(what + ": damaged deflated data (zlib: " +
                        std::string(z.msg ? z.msg : "error " + std::to_string(rc)) +
                        "); download it again");
          emit(buf.data(), buf.size() - z.avail_out);
        }
      } catch (...) {
        inflateEnd(&z);
        throw;
      }
      inflateEnd(&z);
    }
    if (produced != e.size)
      throw Error(what + ": unpacked to " + std::to_string(produced) + " bytes, the archive says " +
                  std::to_string(e.size) + "; download it again");
    if (crc != e.crc) {
      char b[64];
      std::snprintf(b, sizeof b, "CRC-32 %08lx, the archive says %08x",
                    static_cast<unsigned long>(crc), e.crc);
      throw Error(what + ": " + b + ": the archive is damaged; download it again");
    }
  }

 private:
  void read_at(int64_t offset, void* p, size_t n) {
    in_.clear();
    in_.seekg(offset);
    in_.read(static_cast<char*>(p), static_cast<std::streamsize>(n));
    if (static_cast<size_t>(in_.gcount()) != n)
      throw Error(path_ + ": cannot read the zip archive (cut short?); download it again");
  }
  std::string path_;
  std::ifstream in_;
  std::vector<ZipEntry> entries_;
};

// ---- the cache directory ------------------------------------------------------------------

// An flock on a file while it lives; says so when another process holds it.
class DirLock {
 public:
  DirLock(const std::string& path, const std::string& what) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(path + ": cannot create the lock file: " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    std::fprintf(stderr, "%s: another process is preparing it; waiting (lock %s)\n", what.c_str(),
                 path.c_str());
    while (::flock(fd_, LOCK_EX) < 0 && errno == EINTR) {
    }
  }
  ~DirLock() { ::close(fd_); }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

// What tells a source file apart: its path, size and modification time.
nlohmann::json file_stamp(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  const auto time = fs::last_write_time(path, ec).time_since_epoch().count();
  return {
      {"path", path}, {"bytes", static_cast<int64_t>(size)}, {"mtime", static_cast<int64_t>(time)}};
}

// The first regular file named `name` in the search order, or "".
std::string find_file(const std::string& name, const std::string& yaml_dir,
                      const DataSearchOptions& opt) {
  for (const auto& p : data_search_paths(name, yaml_dir, opt)) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p;
  }
  return "";
}

void write_json(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    if (!out.flush()) throw Error(tmp + ": cannot write: " + std::strerror(errno));
  }
  fs::rename(tmp, path);
}

// Streams a text file's bytes to `out`.
void read_file(const std::string& path, const std::function<void(const char*, size_t)>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
  std::vector<char> buf(size_t{1} << 20);
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0)
    out(buf.data(), static_cast<size_t>(in.gcount()));
  if (in.bad()) throw Error(path + ": read error");
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

// Removes what an earlier split left in the dataset's directory: split files, shards.
void clear_dataset_dir(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n == ".lock") continue;
    std::error_code ec;
    fs::remove_all(e.path(), ec);
  }
}

}  // namespace

const std::vector<NamedDataset>& named_datasets() {
  static const std::vector<NamedDataset> v(std::begin(kDatasets), std::end(kDatasets));
  return v;
}

const NamedDataset* find_named_dataset(const std::string& name) {
  for (const auto& d : named_datasets())
    if (name == d.name) return &d;
  return nullptr;
}

void unzip_member(const std::string& zip_path, const std::string& member,
                  const std::function<void(const char*, size_t)>& out) {
  ZipFile(zip_path).extract(member, out);
}

int64_t zip_member_size(const std::string& zip_path, const std::string& member) {
  return static_cast<int64_t>(ZipFile(zip_path).entry(member).size);
}

namespace {

std::string split_file(const std::string& dir, const char* part) {
  return (fs::path(dir) / (std::string(part) + ".txt")).string();
}

// Whether splits.json records splits of these sources whose files are all there; then s gets
// their digest and whether the text is the published one.
bool read_recorded_splits(const std::string& json_path, const nlohmann::json& sources,
                          DatasetSplits& s) {
  std::error_code ec;
  if (!fs::is_regular_file(json_path, ec)) return false;
  try {
    std::ifstream in(json_path);
    const nlohmann::json j = nlohmann::json::parse(in);
    bool ok = j.at("version") == kSplitsVersion && j.at("sources") == sources;
    for (const auto* f : {&s.train, &s.val, &s.test})
      ok = ok && (f->empty() || fs::is_regular_file(*f, ec));
    if (ok) {
      s.sha256 = j.at("sha256").get<std::string>();
      s.published = j.at("published").get<bool>();
      return true;
    }
  } catch (const nlohmann::json::exception&) {
  }
  return false;
}

// Cuts the source's text (an archive's member when `unpack`) by bytes into the train, val and
// (where the dataset has one) test files; returns the text's size.
int64_t split_by_bytes(const NamedDataset& ds, const DatasetSplits& s, bool unpack, Sha256& hash,
                       const std::string& what) {
  const int64_t total =
      unpack ? zip_member_size(s.source, ds.member) : static_cast<int64_t>(fs::file_size(s.source));
  const int64_t parts = ds.train_parts + ds.val_parts + ds.test_parts;
  const int64_t cut[3] = {total * ds.train_parts / parts,
                          total * (ds.train_parts + ds.val_parts) / parts, total};
  const char* names[3] = {"train", "val", "test"};
  std::ofstream out[3];
  for (int k = 0; k < 3; ++k)
    if (k < 2 || ds.test_parts > 0)
      out[k].open(split_file(s.dir, names[k]) + ".tmp", std::ios::binary);
  int64_t bytes = 0;
  auto sink = [&](const char* p, size_t n) {
    hash.update(p, n);
    while (n > 0) {
      int k = 0;
      while (k < 2 && bytes >= cut[k]) ++k;
      const size_t take =
          static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(n), cut[k] - bytes));
      if (take == 0) break;  // past the end the archive gave: unzip_member's size check says so
      out[k].write(p, static_cast<std::streamsize>(take));
      p += take, n -= take, bytes += static_cast<int64_t>(take);
    }
  };
  std::fprintf(stderr, "%s: %s %s into %s (first use)\n", what.c_str(),
               unpack ? "unpacking and splitting" : "splitting", s.source.c_str(), s.dir.c_str());
  if (unpack) unzip_member(s.source, ds.member, sink);
  else read_file(s.source, sink);
  for (int k = 0; k < 3; ++k) {
    if (!out[k].is_open()) continue;
    const std::string path = split_file(s.dir, names[k]);
    if (!out[k].flush()) throw Error(path + ".tmp: cannot write: " + std::strerror(errno));
    out[k].close();
    fs::rename(path + ".tmp", path);
  }
  return bytes;
}

// The warning for a text that is not the published one (its sizes or digest differ).
void warn_unpublished(const NamedDataset& ds, const DatasetSplits& s, bool val_file, int64_t bytes,
                      int64_t val_bytes, const std::string& what) {
  std::string have = with_commas(bytes) + " bytes" +
                     (val_file ? " and " + with_commas(val_bytes) : ""),
              want = with_commas(ds.text_bytes) + " bytes" +
                     (val_file ? " and " + with_commas(ds.val_bytes) : "");
  if (*ds.text_sha256)
    have += ", sha256 " + s.sha256.substr(0, 16) + "...",
        want += ", sha256 " + std::string(ds.text_sha256).substr(0, 16) + "...";
  std::fprintf(stderr,
               "%s: warning: %s holds %s, not the published text (%s): it is split all the same "
               "(%lld/%lld/%lld parts), "
               "but results on it do not compare with published ones\n",
               what.c_str(), s.source.c_str(), have.c_str(), want.c_str(),
               static_cast<long long>(ds.train_parts), static_cast<long long>(ds.val_parts),
               static_cast<long long>(ds.test_parts));
}

// splits.json: what the split files were made from and how.
nlohmann::json splits_json(const NamedDataset& ds, const DatasetSplits& s,
                           const nlohmann::json& sources, bool by_bytes, int64_t bytes) {
  nlohmann::json j;
  j["version"] = kSplitsVersion;
  j["dataset"] = ds.name;
  j["sources"] = sources;
  j["sha256"] = s.sha256;
  j["published"] = s.published;
  j["text_bytes"] = bytes;
  if (by_bytes) {
    const int64_t parts = ds.train_parts + ds.val_parts + ds.test_parts;
    j["split"] = {
        {"rule", "bytes [0, n*" + std::to_string(ds.train_parts) + "/" + std::to_string(parts) +
                     "): train; then " + std::to_string(ds.val_parts) + "/" +
                     std::to_string(parts) + " val" + (ds.test_parts ? "; the rest test" : "")},
        {"train", s.train},
        {"val", s.val},
        {"test", s.test}};
  } else {
    j["split"] = {{"rule", "the published files"}, {"train", s.train}, {"val", s.val}};
  }
  return j;
}

}  // namespace

DatasetSplits dataset_splits(const NamedDataset& ds, const std::string& yaml_dir,
                             const DataSearchOptions& opt_in) {
  DataSearchOptions opt = opt_in;
  opt.download_timeout_seconds = std::max(opt.download_timeout_seconds, kDownloadSeconds);
  const std::string cache = data_cache_dir(opt);
  if (cache.empty())
    throw Error("no cache directory for the dataset's files: HOME is not set; set it");
  const std::string what = std::string("dataset '") + ds.name + "'";
  DatasetSplits s;
  s.dir = (fs::path(cache) / ds.name).string();
  std::error_code ec;
  fs::create_directories(s.dir, ec);
  if (!fs::is_directory(s.dir, ec))
    throw Error(s.dir + ": cannot create the dataset's directory: " + ec.message());
  DirLock lock((fs::path(s.dir) / ".lock").string(), what);

  // The source: an archive's member unpacked already, else the published file (downloaded
  // when it is nowhere).
  const bool zip = *ds.member != '\0';
  std::string text_file = zip ? find_file(ds.member, yaml_dir, opt) : "";
  if (text_file.empty()) s.source = resolve_data_file(ds.file, yaml_dir, opt);
  else s.source = text_file;
  const bool unpack = zip && text_file.empty();
  std::string val_source;
  if (*ds.val_file) val_source = resolve_data_file(ds.val_file, yaml_dir, opt);

  nlohmann::json sources = nlohmann::json::array({file_stamp(s.source)});
  if (!val_source.empty()) sources.push_back(file_stamp(val_source));
  const std::string json_path = (fs::path(s.dir) / "splits.json").string();
  const bool by_bytes = val_source.empty();
  if (by_bytes) {
    s.train = split_file(s.dir, "train");
    s.val = split_file(s.dir, "val");
    if (ds.test_parts > 0) s.test = split_file(s.dir, "test");
  } else {
    s.train = s.source;
    s.val = val_source;
  }
  if (read_recorded_splits(json_path, sources, s)) return s;

  clear_dataset_dir(s.dir);
  Sha256 hash;
  int64_t bytes = 0, val_bytes = 0;
  if (by_bytes) {
    bytes = split_by_bytes(ds, s, unpack, hash, what);
    s.published = bytes == ds.text_bytes;
  } else {
    read_file(s.source, [&](const char* p, size_t n) {
      hash.update(p, n), bytes += static_cast<int64_t>(n);
    });
    read_file(val_source, [&](const char* p, size_t n) {
      hash.update(p, n), val_bytes += static_cast<int64_t>(n);
    });
    s.published = bytes == ds.text_bytes && val_bytes == ds.val_bytes;
  }
  s.sha256 = hash.hex();
  if (*ds.text_sha256 && by_bytes) s.published = s.sha256 == ds.text_sha256;
  if (!s.published) warn_unpublished(ds, s, !val_source.empty(), bytes, val_bytes, what);
  write_json(json_path, splits_json(ds, s, sources, by_bytes, bytes));
  return s;
}

std::string dataset_shards(
    const NamedDataset& ds, const DatasetSplits& splits, Tokenizer& tok,
    const std::string& tokenizer_name,
    const std::vector<std::pair<std::string, std::string>>& tokenizer_options, bool test) {
  const std::string what = std::string("dataset '") + ds.name + "'";
  if (test && splits.test.empty()) throw Error(what + " has no test split");
  const std::string dir =
      (fs::path(splits.dir) /
       ("shards-" + sha256_hex(tok.save()).substr(0, 12) + (test ? "-test" : "")))
          .string();
  DirLock lock((fs::path(splits.dir) / ".lock").string(), what);
  std::error_code ec;
  if (fs::is_regular_file(fs::path(dir) / "manifest.json", ec)) return dir;
  // A preparation that was killed leaves its temporary directory: nobody else works here now.
  for (const auto& e : fs::directory_iterator(splits.dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos)
      fs::remove_all(e.path(), ec);
  PrepareOptions o;
  o.inputs = {splits.train};
  o.val_file = test ? splits.test : splits.val;
  o.separator = ds.separator;
  o.out_dir = dir + ".tmp-" + std::to_string(::getpid());
  o.name = ds.name;
  std::fprintf(stderr,
               "%s: tokenizing it into token shards in %s (first use with this tokenizer)\n",
               what.c_str(), dir.c_str());
  try {
    prepare_shards(o, tok, tokenizer_name, tokenizer_options);
  } catch (...) {
    fs::remove_all(o.out_dir, ec);
    throw;
  }
  fs::rename(o.out_dir, dir, ec);
  if (ec) throw Error(o.out_dir + ": cannot rename it to " + dir + ": " + ec.message());
  return dir;
}

}  // namespace ablate
