// Checkpoints: bitwise round trip, atomic write, and clear errors (never a crash) for
// truncated, corrupted and foreign input.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include "ablate/checkpoint.hpp"
#include "ablate/error.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

using ablate::test::contains;
using ablate::test::error_of;
using ablate::test::TempDir;

namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

ablate::Checkpoint sample() {
  ablate::Checkpoint ck;
  ck.texts["config"] = "model:\n  d: 96\n";
  ck.texts["tokenizer"] = std::string("a\0b\xff", 4);  // arbitrary bytes
  ck.texts["empty"] = "";
  std::vector<float> w(10000);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(float(i)) * 1e-3f;
  w[1] = std::numeric_limits<float>::quiet_NaN();
  w[2] = -0.0f;
  w[3] = std::numeric_limits<float>::infinity();
  w[4] = std::numeric_limits<float>::denorm_min();
  ck.tensors["blocks.0.attn.w_q"] = w;
  ck.tensors["adam.m.blocks.0.attn.w_q"] = std::vector<float>(7, 0.25f);
  ck.tensors["empty"] = {};
  ck.ints["step"] = 1234;
  ck.ints["rng.data"] = 0xFFFFFFFFFFFFFFFFull;
  ck.ints["zero"] = 0;
  return ck;
}

}  // namespace

TEST_CASE("io/checkpoint: crc32 matches the standard check value") {
  const std::string s = "123456789";
  CHECK(ablate::crc32(reinterpret_cast<const uint8_t*>(s.data()), s.size()) == 0xCBF43926u);
  CHECK(ablate::crc32(nullptr, 0) == 0u);
}

TEST_CASE("io/checkpoint: round trip is bitwise, the write is atomic") {
  TempDir dir;
  const std::string path = dir / "ck.bin";
  const ablate::Checkpoint ck = sample();
  ablate::write_checkpoint(path, ck);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  ablate::Checkpoint back = ablate::read_checkpoint(path);
  CHECK(back.texts == ck.texts);
  CHECK(back.ints == ck.ints);
  REQUIRE(back.tensors.size() == ck.tensors.size());
  for (const auto& t : ck.tensors)
    CHECK_MESSAGE(same_bits(back.tensors.at(t.first), t.second), t.first);
  CHECK(read_bytes(path) == ablate::serialize_checkpoint(ck));

  // Overwriting replaces the file whole; an empty checkpoint is valid.
  ablate::write_checkpoint(path, {});
  ablate::Checkpoint empty = ablate::read_checkpoint(path);
  CHECK(empty.texts.empty());
  CHECK(empty.tensors.empty());
  CHECK(empty.ints.empty());
  CHECK(fs::file_size(path) == 28);
  for (const auto& e : fs::directory_iterator(dir.path)) CHECK(e.path().filename() == "ck.bin");

  // A write that cannot happen names the path and leaves nothing behind.
  CHECK(contains(error_of([&] { ablate::write_checkpoint(dir / "no/such/dir/ck.bin", ck); }),
                 "no/such/dir/ck.bin.tmp: cannot create checkpoint"));
}

TEST_CASE(
    "io/checkpoint: tensors written from views are the same bytes as owned ones and read back as "
    "tensors") {
  const ablate::Checkpoint owned = sample();
  ablate::Checkpoint viewed = owned;
  viewed.tensors.clear();
  // Views interleave with owned tensors in name order: "adam..." owned, the rest viewed.
  viewed.tensors["adam.m.blocks.0.attn.w_q"] = owned.tensors.at("adam.m.blocks.0.attn.w_q");
  for (const auto& [k, v] : owned.tensors)
    if (!viewed.tensors.count(k)) viewed.tensor_views[k] = {v.data(), v.size()};
  viewed.shapes["blocks.0.attn.w_q"] = {100, 100};
  ablate::Checkpoint with_shape = owned;
  with_shape.shapes["blocks.0.attn.w_q"] = {100, 100};
  CHECK(ablate::serialize_checkpoint(viewed) == ablate::serialize_checkpoint(with_shape));
  TempDir dir;
  ablate::write_checkpoint(dir / "ck.bin", viewed);
  const ablate::Checkpoint back = ablate::read_checkpoint(dir / "ck.bin");
  CHECK(back.tensor_views.empty());
  REQUIRE(back.tensors.size() == owned.tensors.size());
  for (const auto& t : owned.tensors)
    CHECK_MESSAGE(same_bits(back.tensors.at(t.first), t.second), t.first);
  // A view's shape is checked like a tensor's; a name in both maps is refused.
  viewed.shapes["blocks.0.attn.w_q"] = {100, 99};
  CHECK(contains(error_of([&] { ablate::serialize_checkpoint(viewed); }),
                 "tensor 'blocks.0.attn.w_q' has 10000 values, but its shape (100, 99) has 9900"));
  viewed.shapes.clear();
  viewed.tensors["empty"] = {};
  CHECK(contains(error_of([&] { ablate::write_checkpoint(dir / "ck2.bin", viewed); }),
                 "tensor 'empty' is both in tensors and in tensor_views"));
  CHECK_FALSE(fs::exists(dir / "ck2.bin"));
}

TEST_CASE("io/checkpoint: truncated, corrupt and foreign files give clear errors") {
  TempDir dir;
  const std::string path = dir / "ck.bin";
  const std::vector<uint8_t> good = ablate::serialize_checkpoint(sample());
  const size_t n = good.size();

  // Every truncation length: an Error naming the path, never a crash.
  for (size_t len = 0; len < n; ++len) {
    std::string msg = error_of([&] { ablate::parse_checkpoint(good.data(), len, path); });
    CHECK_MESSAGE(msg.rfind(path + ": ", 0) == 0, msg);
  }
  for (size_t len : {size_t{24}, size_t{25}, n / 2, n - 4, n - 1}) {
    write_bytes(path, std::vector<uint8_t>(good.begin(), good.begin() + len));
    CHECK(contains(error_of([&] { ablate::read_checkpoint(path); }),
                   path + ": checkpoint truncated at byte " + std::to_string(len) +
                       " (header says " + std::to_string(n) + " bytes)"));
  }
  write_bytes(path, std::vector<uint8_t>(good.begin(), good.begin() + 5));
  CHECK(error_of([&] { ablate::read_checkpoint(path); }) ==
        path + ": checkpoint truncated at byte 5 (the header alone is 24 bytes)");

  // Flipped bytes: in the header, in the body, in the trailing CRC.
  for (size_t at : {size_t{9}, size_t{14}, size_t{21}, size_t{30}, n / 2, n - 5, n - 1}) {
    std::vector<uint8_t> bad = good;
    bad[at] ^= 0x10;
    write_bytes(path, bad);
    std::string msg = error_of([&] { ablate::read_checkpoint(path); });
    INFO("byte " << at << ": " << msg);
    CHECK(contains(msg, path + ": corrupt checkpoint"));
    CHECK(contains(msg, "CRC mismatch"));
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  CHECK(contains(error_of([&] { ablate::parse_checkpoint(longer.data(), longer.size(), "x"); }),
                 "x: corrupt checkpoint (1 unexpected bytes after byte"));

  std::vector<uint8_t> wrong = good;
  wrong[0] = 'X';
  write_bytes(path, wrong);
  CHECK(error_of([&] { ablate::read_checkpoint(path); }) ==
        path + ": not an ablate checkpoint (it does not start with \"ABLATECK\")");
  write_bytes(path, {});
  CHECK(error_of([&] { ablate::read_checkpoint(path); }) ==
        path + ": not an ablate checkpoint (the file is empty)");
  CHECK(contains(error_of([&] { ablate::read_checkpoint(dir / "missing.bin"); }),
                 "missing.bin: cannot open checkpoint: No such file or directory"));
  CHECK(contains(error_of([&] { ablate::read_checkpoint(dir.path.string()); }),
                 "not a regular file"));
}

TEST_CASE("io/checkpoint: crafted input with valid CRCs is still checked") {
  // Build files whose CRCs are right but whose entries lie, as a fuzzer would.
  auto craft = [](const std::vector<uint8_t>& body, uint32_t version = 1) {
    std::vector<uint8_t> b = {'A', 'B', 'L', 'A', 'T', 'E', 'C', 'K'};
    auto put = [&](uint64_t v, int bytes) {
      for (int i = 0; i < bytes; ++i) b.push_back(uint8_t(v >> (8 * i)));
    };
    put(version, 4);
    put(24 + body.size() + 4, 8);
    put(ablate::crc32(b.data(), b.size()), 4);
    b.insert(b.end(), body.begin(), body.end());
    put(ablate::crc32(b.data(), b.size()), 4);
    return b;
  };
  auto parse_error = [](const std::vector<uint8_t>& b) {
    return error_of([&] { ablate::parse_checkpoint(b.data(), b.size(), "fuzz"); });
  };
  // A tensor claiming 2^62 floats must not allocate.
  CHECK(contains(parse_error(craft({2, 1, 0, 0, 0, 'w', 0, 0, 0, 0, 0, 0, 0, 0x40})),
                 "tensor 'w' at byte 24 claims 4611686018427387904 floats, only 0 bytes remain"));
  CHECK(contains(
      parse_error(craft({1, 1, 0, 0, 0, 't', 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})),
      "text at byte 38 needs 18446744073709551615 bytes"));
  CHECK(contains(parse_error(craft({3, 0xFF, 0xFF, 0xFF, 0xFF})),
                 "entry name at byte 29 needs 4294967295 bytes"));
  CHECK(contains(parse_error(craft({7, 0, 0, 0, 0})), "unknown entry kind 7 at byte 24"));
  CHECK(contains(parse_error(craft({3, 1, 0, 0, 0, 's', 1, 0, 0, 0, 0, 0, 0, 0,
                                    3, 1, 0, 0, 0, 's', 2, 0, 0, 0, 0, 0, 0, 0})),
                 "entry 's' appears twice"));
  CHECK(contains(parse_error(craft({}, 3)), "checkpoint version 3 is not supported"));
  std::vector<uint8_t> ok = craft({3, 1, 0, 0, 0, 's', 5, 0, 0, 0, 0, 0, 0, 0});
  CHECK(ablate::parse_checkpoint(ok.data(), ok.size(), "ok").ints.at("s") == 5);

  // Every single-byte change of a small valid file: an Error or a successful parse, never a crash.
  ablate::Checkpoint small;
  small.texts["c"] = "xy";
  small.tensors["w"] = {1.f, 2.f};
  small.ints["step"] = 3;
  const std::vector<uint8_t> base = ablate::serialize_checkpoint(small);
  for (size_t i = 0; i < base.size(); ++i)
    for (uint8_t v : {uint8_t(0), uint8_t(0xFF), uint8_t(base[i] + 1)}) {
      std::vector<uint8_t> b = base;
      b[i] = v;
      try {
        ablate::parse_checkpoint(b.data(), b.size(), "m");
      } catch (const ablate::Error&) {
      }
    }
}
