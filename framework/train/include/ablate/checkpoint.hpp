// Checkpoints: a small little-endian binary container of named texts, float tensors and
// integers, written atomically and checked by CRC32. The reader validates every length
// against the bytes that remain, so arbitrary input yields an Error, never a crash.
//
// Layout (version 2):
//   "ABLATECK"  u32 version  u64 total_size  u32 header_crc      (24 bytes; crc of the 20 before)
//   entries, each: u8 kind  u32 name_len  name
//                  kind 1 text:   u64 len    bytes
//                  kind 2 tensor: u64 count  count x f32
//                  kind 3 int:    u64 value
//                  kind 4 shape:  u32 ndim   ndim x u64     (of the tensor of the same name)
//   u32 crc32 of every byte before it (IEEE polynomial, as zlib)
// total_size lets a short file be told apart from a corrupt one ("truncated at byte N").
// Version 1 is version 2 without shapes (kind 4); both are read, version 2 is written.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ablate {

// Floats written from where they live; their owner keeps them unchanged until the write returns.
struct TensorView {
  const float* data = nullptr;
  size_t size = 0;
};

struct Checkpoint {
  std::map<std::string, std::string> texts;           // config, tokenizer state, ...
  std::map<std::string, std::vector<float>> tensors;  // parameters, optimizer state
  // Tensors written without a copy (a run's parameters and optimizer state), entries like
  // `tensors`' and read back into it; a name is in one of the two maps, not both.
  std::map<std::string, TensorView> tensor_views;
  std::map<std::string, uint64_t> ints;  // step, rng states, data position
  // Shapes of tensors (rows, cols of a parameter), by tensor name; a tensor may have none
  // (optimizer state, version-1 files). The product of a shape is its tensor's length.
  std::map<std::string, std::vector<int64_t>> shapes;
};

constexpr uint32_t kCheckpointVersion = 2;

// Writes path.tmp, fsyncs it, renames it over path and fsyncs the directory.
void write_checkpoint(const std::string& path, const Checkpoint& ck);
// Error naming the path and what is wrong (missing, truncated, corrupt, not a checkpoint).
Checkpoint read_checkpoint(const std::string& path);
// Parses bytes in memory; `name` is used in error messages. Safe on any input (fuzz target).
Checkpoint parse_checkpoint(const uint8_t* data, size_t size, const std::string& name);
// The serialised bytes of ck (what write_checkpoint writes).
std::vector<uint8_t> serialize_checkpoint(const Checkpoint& ck);

// CRC-32 (IEEE 802.3, reflected, as zlib's crc32); pass the previous value to continue.
uint32_t crc32(const uint8_t* data, size_t size, uint32_t crc = 0);

}  // namespace ablate
