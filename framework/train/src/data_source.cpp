// Data files: SHA-256, the search for a file an experiment names, the download of known
// public datasets through curl or wget (a subprocess with a deadline), UTF-8 checks.
#include "ablate/data_source.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ablate/error.hpp"
#include "ablate/process.hpp"

namespace ablate {
namespace fs = std::filesystem;
namespace {

// ---- SHA-256 (FIPS 180-4) -------------------------------------------------------------

constexpr std::array<uint32_t, 64> kSha256K = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void sha256_block(std::array<uint32_t, 8>& h, const uint8_t* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 |
           p[4 * i + 3];
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 =
        hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kSha256K[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

// ---- known public datasets --------------------------------------------------------------

struct KnownDataset {
  const char* file_name;
  const char* url;
  const char* sha256;  // "" where no published digest is known: the size is checked instead
  int64_t bytes;       // the published size (0: not known)
};

constexpr KnownDataset kKnownDatasets[] = {
    {"tinyshakespeare.txt",
     "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
     "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed", 1115394},
    // GPT-2's tokenizer files (the gpt2 tokenizer; REFERENCE.md "GPT-2's tokenizer").
    {"encoder.json", "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json",
     "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783", 1042301},
    {"vocab.bpe", "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
     "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5", 456318},
    // The named datasets' archives and files (datasets.hpp, docs/DATA.md "Named datasets").
    // Matt Mahoney's enwik8 and text8 (the Hutter Prize pages); the digests are the ones
    // published code pins for them.
    {"enwik8.zip", "http://mattmahoney.net/dc/enwik8.zip",
     "547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc", 36445475},
    {"text8.zip", "http://mattmahoney.net/dc/text8.zip",
     "a6640522afe85d1963ad56c05b0ede0a0c000dddc9671758a6cc09b7a38e5232", 31344016},
    // TinyStories (Eldan & Li 2023) as published on Hugging Face: no SHA-256 of these files
    // is published that we could find, so the download is checked by its size.
    {"TinyStoriesV2-GPT4-train.txt",
     "https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/"
     "TinyStoriesV2-GPT4-train.txt",
     "", 2227753162},
    {"TinyStoriesV2-GPT4-valid.txt",
     "https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/"
     "TinyStoriesV2-GPT4-valid.txt",
     "", 22502601},
};

const KnownDataset* find_known(const std::string& file_name) {
  for (const auto& k : kKnownDatasets)
    if (file_name == k.file_name) return &k;
  return nullptr;
}

// ---- helpers ------------------------------------------------------------------------------

std::string home_dir() {
  if (const char* h = std::getenv("HOME"); h && *h) return h;
  if (const passwd* pw = getpwuid(getuid()); pw && pw->pw_dir) return pw->pw_dir;
  return "";
}

std::string default_cache_dir() {
  std::string home = home_dir();
  return home.empty() ? "" : (fs::path(home) / ".cache" / "ablate" / "data").string();
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

std::string absolute_normal(const fs::path& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec);
  return (ec ? p : a).lexically_normal().string();
}

std::string find_executable(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    fs::path p = fs::path(dir) / name;
    if (is_file(p) && ::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

std::string last_line(const std::string& s) {
  size_t end = s.find_last_not_of("\r\n \t");
  if (end == std::string::npos) return "";
  size_t start = s.find_last_of('\n', end);
  return s.substr(start == std::string::npos ? 0 : start + 1,
                  end - (start == std::string::npos ? 0 : start + 1) + 1);
}

// Runs argv with stdin/stdout on /dev/null, kills it after timeout_s. Returns "" on exit
// status 0, otherwise why it failed (with the last line it printed on stderr).
std::string run_with_deadline(const std::vector<std::string>& argv, int timeout_s) {
  int pipe_fd[2];
  if (::pipe2(pipe_fd, O_CLOEXEC) != 0)
    return std::string("cannot create a pipe: ") + std::strerror(errno);
  pid_t pid = -1;
  int rc = spawn_process(argv, {-1, -1, pipe_fd[1]}, pid);
  ::close(pipe_fd[1]);
  if (rc != 0) {
    ::close(pipe_fd[0]);
    return "cannot start " + argv[0] + ": " + std::strerror(rc);
  }
  std::string err;
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p{pipe_fd[0], POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;  // timeout: the loop head kills it
    char buf[1024];
    ssize_t got = ::read(pipe_fd[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // EOF: the child closed stderr, i.e. exited
    if (err.size() < 16384) err.append(buf, static_cast<size_t>(got));
  }
  ::close(pipe_fd[0]);
  const int status = wait_process(pid);
  if (timed_out)
    return argv[0] + " did not finish within " + std::to_string(timeout_s) + " s (killed)";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  std::string why = WIFEXITED(status)
                        ? argv[0] + " exited with status " + std::to_string(WEXITSTATUS(status))
                        : argv[0] + " was killed by signal " + std::to_string(WTERMSIG(status));
  std::string line = last_line(err);
  return line.empty() ? why : why + ": " + line;
}

// Downloads ds to dest (via dest.<pid>.part and a rename). Returns "" or why it failed.
std::string download(const KnownDataset& ds, const fs::path& dest, int timeout_s) {
  std::error_code ec;
  fs::create_directories(dest.parent_path(), ec);
  if (ec) return "cannot create " + dest.parent_path().string() + ": " + ec.message();
  const std::string part = dest.string() + "." + std::to_string(::getpid()) + ".part";
  const std::string t = std::to_string(std::max(1, timeout_s)),
                    connect = std::to_string(std::clamp(timeout_s, 1, 30));
  std::vector<std::string> argv;
  if (std::string curl = find_executable("curl"); !curl.empty())
    argv = {curl, "-fsSL", "--connect-timeout", connect, "--max-time", t, "-o", part, ds.url};
  else if (std::string wget = find_executable("wget"); !wget.empty())
    argv = {wget, "-q", "--tries=1", "--timeout=" + connect, "-O", part, ds.url};
  else return "neither curl nor wget is installed";
  // The downloader enforces the timeout itself; our deadline is the backstop.
  std::string why = run_with_deadline(argv, std::max(1, timeout_s) + 5);
  if (why.empty()) {
    std::ifstream in(part, std::ios::binary);
    Sha256 hash;  // read in pieces: the largest files are gigabytes
    std::vector<char> buf(size_t{1} << 20);
    int64_t size = 0;
    while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
      hash.update(buf.data(), static_cast<size_t>(in.gcount()));
      size += in.gcount();
    }
    const std::string got = hash.hex();
    if (*ds.sha256 && got != ds.sha256)
      why = "the downloaded file has sha256 " + got + ", expected " + ds.sha256;
    else if (ds.bytes > 0 && size != ds.bytes)
      why = "the downloaded file has " + std::to_string(size) + " bytes, expected " +
            std::to_string(ds.bytes);
    else if (::rename(part.c_str(), dest.c_str()) != 0)
      why = "cannot rename " + part + " to " + dest.string() + ": " + std::strerror(errno);
  }
  if (!why.empty()) fs::remove(part, ec);
  return why;
}

}  // namespace

std::string sha256_hex(const std::string& bytes) {
  std::array<uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t full = n / 64 * 64;
  for (size_t i = 0; i < full; i += 64) sha256_block(h, p + i);
  // Padding: 0x80, zeros, then the bit length as a big-endian u64; one or two blocks.
  uint8_t tail[128] = {};
  size_t rest = n - full;
  std::memcpy(tail, p + full, rest);
  tail[rest] = 0x80;
  size_t tail_len = rest + 1 + 8 <= 64 ? 64 : 128;
  uint64_t bits = uint64_t(n) * 8;
  for (int i = 0; i < 8; ++i) tail[tail_len - 1 - i] = uint8_t(bits >> (8 * i));
  for (size_t i = 0; i < tail_len; i += 64) sha256_block(h, tail + i);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint32_t v : h)
    for (int s = 28; s >= 0; s -= 4) out += hex[(v >> s) & 0xF];
  return out;
}

void Sha256::update(const void* data, size_t n) {
  std::array<uint32_t, 8> h;
  std::copy(h_, h_ + 8, h.begin());
  const auto* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (used_ > 0) {
    const size_t take = std::min(n, 64 - used_);
    std::memcpy(buf_ + used_, p, take);
    used_ += take, p += take, n -= take;
    if (used_ == 64) sha256_block(h, buf_), used_ = 0;
  }
  for (; n >= 64; p += 64, n -= 64) sha256_block(h, p);
  if (n > 0) std::memcpy(buf_, p, n), used_ = n;
  std::copy(h.begin(), h.end(), h_);
}

std::string Sha256::hex() {
  // Padding: 0x80, zeros, then the bit length as a big-endian u64; one or two blocks.
  const uint64_t bits = total_ * 8;
  uint8_t tail[72] = {0x80};
  const size_t pad = (used_ < 56 ? 56 : 120) - used_;
  for (int i = 0; i < 8; ++i) tail[pad + 7 - i] = uint8_t(bits >> (8 * i));
  update(tail, pad + 8);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint32_t v : h_)
    for (int s = 28; s >= 0; s -= 4) out += hex[(v >> s) & 0xF];
  return out;
}

std::string data_cache_dir(const DataSearchOptions& opt) {
  return opt.cache_dir.empty() ? default_cache_dir() : opt.cache_dir;
}

std::vector<std::string> data_search_paths(const std::string& name, const std::string& yaml_dir,
                                           const DataSearchOptions& opt) {
  fs::path n(name);
  if (name.rfind("~/", 0) == 0 && !home_dir().empty()) n = fs::path(home_dir()) / name.substr(2);
  if (n.is_absolute()) return {n.lexically_normal().string()};
  std::vector<std::string> out;
  auto add = [&](const fs::path& dir) {
    std::string p = absolute_normal(dir / n);
    for (const auto& q : out)
      if (q == p) return;
    out.push_back(p);
  };
  if (!yaml_dir.empty()) add(yaml_dir);
  std::error_code ec;
  fs::path cwd = fs::current_path(ec);
  if (!ec) add(cwd);
  if (const char* dp = std::getenv("ABLATE_DATA_PATH")) {
    std::stringstream dirs(dp);
    std::string dir;
    while (std::getline(dirs, dir, ':'))
      if (!dir.empty()) add(dir);
  }
  if (opt.search_source_tree) {
    add(fs::path(ABLATE_SOURCE_DIR) / "data");
    add(fs::path(ABLATE_SOURCE_DIR) / ".." / "shared" / "data");
  }
  std::string cache = opt.cache_dir.empty() ? default_cache_dir() : opt.cache_dir;
  if (!cache.empty()) add(cache);
  return out;
}

std::string resolve_data_file(const std::string& name, const std::string& yaml_dir,
                              const DataSearchOptions& opt) {
  if (name.empty()) throw Error("data file: empty file name");
  std::vector<std::string> places = data_search_paths(name, yaml_dir, opt);
  for (const auto& p : places)
    if (is_file(p)) return p;

  std::string msg = "data file '" + name + "' not found. Searched:\n";
  for (const auto& p : places) {
    std::error_code ec;
    msg += "  " + p +
           (fs::is_directory(p, ec) ? "  (a directory: name the text file inside it)" : "") + "\n";
  }
  const std::string file_name = fs::path(name).filename().string();
  const std::string cache = opt.cache_dir.empty() ? default_cache_dir() : opt.cache_dir;
  const KnownDataset* known = fs::path(name).is_absolute() ? nullptr : find_known(file_name);
  if (known && !cache.empty()) {
    fs::path dest = fs::path(cache) / file_name;
    std::string why = download(*known, dest, opt.download_timeout_seconds);
    if (why.empty()) return absolute_normal(dest);
    msg += "Downloading it from " + std::string(known->url) + " failed: " + why + "\n";
    msg += "Fix: put " + file_name +
           " in one of the places above, or set ABLATE_DATA_PATH to a directory " +
           "holding it (':'-separated), or download it yourself when online:\n  curl -fL -o " +
           dest.string() + " " + known->url;
    throw Error(msg);
  }
  msg += "Fix: put " + file_name +
         " in one of these places, or set ABLATE_DATA_PATH to the directory holding " +
         "it (':'-separated). Relative names are looked up first next to the experiment file.";
  throw Error(msg);
}

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path + ": cannot read text file: no such file");
  if (fs::is_directory(path, ec)) throw Error(path + ": cannot read text file: it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open text file: " + std::strerror(errno));
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(path + ": error while reading text file");
  if (s.empty()) throw Error(path + ": text file is empty");

  // RFC 3629 UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
  const auto* b = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    uint8_t c = b[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    bool ok = len > 0 && i + len <= n && b[i + 1] >= lo && b[i + 1] <= hi;
    for (size_t k = 2; ok && k < len; ++k) ok = b[i + k] >= 0x80 && b[i + k] <= 0xBF;
    if (!ok) {
      size_t line = 1, col = 1;
      for (size_t k = 0; k < i; ++k) {
        if (b[k] == '\n') line++, col = 1;
        else if ((b[k] & 0xC0) != 0x80) col++;
      }
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", c);
      throw Error(path + ": not valid UTF-8 at byte offset " + std::to_string(i) + " (line " +
                  std::to_string(line) + ", column " + std::to_string(col) + "): byte " + hex +
                  (len > 0 && i + len > n ? " starts a sequence cut off by the end of the file"
                                          : " does not start a valid character") +
                  ". Convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8");
    }
    i += len;
  }
  return s;
}

}  // namespace ablate
