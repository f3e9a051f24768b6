// Finding and reading the text files an experiment names: a fixed search order, a
// download (curl or wget, checked by SHA-256) for known public datasets, UTF-8 checks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ablate {

// SHA-256 (FIPS 180-4) of bytes, as 64 lowercase hex digits.
std::string sha256_hex(const std::string& bytes);

// SHA-256 of bytes given in pieces (a file read as a stream).
class Sha256 {
 public:
  void update(const void* data, size_t n);
  // The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex();

 private:
  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  unsigned char buf_[64] = {};
  size_t used_ = 0;
  uint64_t total_ = 0;
};

// Knobs of resolve_data_file; the defaults are what the CLI uses.
struct DataSearchOptions {
  std::string cache_dir;               // "" = ~/.cache/ablate/data
  bool search_source_tree = true;      // <source>/data and <source>/../shared/data
  int download_timeout_seconds = 300;  // whole download, enforced by killing the downloader
};

// The cache directory: opt.cache_dir, else ~/.cache/ablate/data ("" when there is no home).
std::string data_cache_dir(const DataSearchOptions& opt = {});

// The places resolve_data_file looks for `name`, in order (absolute names: only themselves):
// <yaml_dir>/name, <cwd>/name, <each dir of ABLATE_DATA_PATH>/name, <source>/data/name,
// <source>/../shared/data/name, ~/.cache/ablate/data/name.
std::vector<std::string> data_search_paths(const std::string& name, const std::string& yaml_dir,
                                           const DataSearchOptions& opt = {});

// Returns the absolute path of the first regular file among data_search_paths. If there is
// none and the file name is a known public dataset ("tinyshakespeare.txt", "enwik8.zip", ...),
// downloads it into the cache directory and verifies its SHA-256 (or, where none is
// published, its size). Otherwise (or if the download fails) throws an Error listing every
// place searched and how to fix it (offline: the curl command that downloads it).
std::string resolve_data_file(const std::string& name, const std::string& yaml_dir,
                              const DataSearchOptions& opt = {});

// Reads a whole text file. Error if it is missing, empty, or not valid UTF-8 (the message
// gives the byte offset, line and column of the first bad byte).
std::string read_text_file(const std::string& path);

}  // namespace ablate
