// safetensors files (Hugging Face's weight format): an 8-byte little-endian header length N,
// N bytes of JSON {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "text", ...}} (padded with spaces), then the tensors' raw
// little-endian bytes, offsets relative to the end of the header. The reader checks the whole
// header before any value is read: every tensor inside the data, no two overlapping, no byte
// belonging to none, sizes that agree with dtype and shape; any input gives an Error naming
// the file and the tensor, never a crash. Values are read as float32: F32 as is, F16 and BF16
// converted; other dtypes are refused when read, naming the supported ones.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ablate {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;            // as written: F32, F16, BF16, I64, ...
  std::vector<int64_t> shape;   // [] for a scalar
  uint64_t begin = 0, end = 0;  // byte range within the data section
  int64_t numel() const;
};

// The dtypes read() converts to float32, for messages: "F32, F16 and BF16".
const char* safetensors_readable_dtypes();

class SafetensorsFile {
 public:
  // Maps the file and checks its header (Error naming the file and what is wrong).
  static SafetensorsFile open(const std::string& path);
  // The same checks on bytes in memory (`name` in messages).
  static SafetensorsFile parse(std::vector<uint8_t> bytes, const std::string& name);
  // Whether the file starts like a safetensors file (a plausible header length, then '{').
  static bool looks_like(const std::string& path);

  const std::string& path() const { return path_; }
  // Tensors in the order of their data.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Whether read() accepts this dtype.
  static bool readable(const std::string& dtype);
  // The tensor's values as float32 into out[0 .. numel); Error for a dtype read() does not take.
  void read(const SafetensorsEntry& e, float* out) const;

 private:
  struct Bytes;
  std::shared_ptr<const Bytes> bytes_;
  const uint8_t* data_ = nullptr;  // start of the data section
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  void check(size_t size);
};

struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // product(shape) floats, written as F32
};

// Writes the tensors (in this order) and the metadata, atomically (path.tmp, then renamed).
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace ablate
