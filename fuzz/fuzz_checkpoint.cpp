// libFuzzer target: the checkpoint reader (parse_checkpoint). The first byte picks a mode:
// even, the rest is a whole file; odd, the rest is an entry list that gets a valid header,
// size and CRCs, so that the fuzzer reaches the entry parser behind the CRC checks. Every
// input must parse or throw ablate::Error, and what parses must survive a round trip
// through serialize_checkpoint bitwise.
#include <cstdint>
#include <cstring>
#include <vector>

#include "ablate/checkpoint.hpp"
#include "ablate/error.hpp"

namespace {

void put32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
void put64(std::vector<uint8_t>& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(uint8_t(v >> (8 * i)));
}

// Header (magic, version, total size, header CRC) + body + trailing CRC, as checkpoint.hpp.
std::vector<uint8_t> wrap(const uint8_t* body, size_t n) {
  std::vector<uint8_t> b = {'A', 'B', 'L', 'A', 'T', 'E', 'C', 'K'};
  put32(b, ablate::kCheckpointVersion);
  put64(b, 24 + n + 4);
  put32(b, ablate::crc32(b.data(), b.size()));
  b.insert(b.end(), body, body + n);
  put32(b, ablate::crc32(b.data(), b.size()));
  return b;
}

bool same(const ablate::Checkpoint& a, const ablate::Checkpoint& b) {
  if (a.texts != b.texts || a.ints != b.ints || a.shapes != b.shapes ||
      a.tensors.size() != b.tensors.size())
    return false;
  for (const auto& [k, v] : a.tensors) {
    auto it = b.tensors.find(k);
    if (it == b.tensors.end() || it->second.size() != v.size()) return false;
    if (!v.empty() && std::memcmp(v.data(), it->second.data(), v.size() * sizeof(float)) != 0)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<uint8_t> file =
      (data[0] & 1) ? wrap(data + 1, size - 1) : std::vector<uint8_t>(data + 1, data + size);
  ablate::Checkpoint ck;
  try {
    ck = ablate::parse_checkpoint(file.data(), file.size(), "fuzz.ckpt");
  } catch (const ablate::Error&) {
    return 0;
  }
  std::vector<uint8_t> again = ablate::serialize_checkpoint(ck);
  if (!same(ck, ablate::parse_checkpoint(again.data(), again.size(), "again"))) __builtin_trap();
  return 0;
}
