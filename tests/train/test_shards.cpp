// Token shards (ablate/shards.hpp): files written by numpy as llm.c's write_datafile and
// nanoGPT's np.memmap write them, read back by ablate token for token; ablate's shards read
// back by numpy; every damaged file refused with a message that says what is wrong.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ablate/shards.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

using ablate::test::contains;
using ablate::test::error_of;

namespace {

// The ids the Python writers and the checks below agree on: token i of a test file.
uint32_t id16(int64_t i) { return static_cast<uint32_t>((i * 7919 + 13) % 50257); }
uint32_t id32(int64_t i) { return static_cast<uint32_t>((i * 48271 + 5) % 200003); }

bool have_numpy() { return ablate::test::run_command("/usr/bin/python3 -c 'import numpy'").status == 0; }

// Runs a Python script (with numpy) and returns its output; a failure fails the test.
std::string python(const ablate::test::TempDir& dir, const std::string& script, const std::string& args) {
  const std::string path = dir.write("script.py", script);
  auto r = ablate::test::run_command("/usr/bin/python3 " + path + " " + args);
  INFO(r.output);
  REQUIRE(r.status == 0);
  return r.output;
}

// llm.c's dev/data/data_common.py write_datafile, and its uint32 variant; nanoGPT's
// prepare.py (np.memmap of uint16, no header).
const char* kNumpyWriters = R"(import sys
import numpy as np
kind, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
i = np.arange(n, dtype=np.int64)
if kind == 'u16':
    toks = ((i * 7919 + 13) % 50257).astype(np.uint16)
    header = np.zeros(256, dtype=np.int32)
    header[0] = 20240520; header[1] = 1; header[2] = len(toks)
    with open(path, 'wb') as f:
        f.write(header.tobytes())
        f.write(toks.tobytes())
elif kind == 'u32':
    toks = ((i * 48271 + 5) % 200003).astype(np.uint32)
    header = np.zeros(256, dtype=np.int32)
    header[0] = 20240801; header[1] = 7; header[2] = len(toks)
    with open(path, 'wb') as f:
        f.write(header.tobytes())
        f.write(toks.tobytes())
else:
    toks = ((i * 7919 + 13) % 50257).astype(np.uint16)
    arr = np.memmap(path, dtype=np.uint16, mode='w+', shape=(n,))
    arr[:] = toks
    arr.flush()
)";

// Reads a shard as llm.c's and modded-nanogpt's loaders do and checks every token.
const char* kNumpyReader = R"(import sys
import numpy as np
path, kind, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
header = np.fromfile(path, dtype=np.int32, count=256)
magic, version, count = int(header[0]), int(header[1]), int(header[2])
want = (20240520, 1) if kind == 'u16' else (20240801, 7)
assert (magic, version) == want, (magic, version)
assert count == n, (count, n)
dtype = np.uint16 if kind == 'u16' else np.uint32
with open(path, 'rb') as f:
    f.seek(256 * 4)
    toks = np.frombuffer(f.read(), dtype=dtype)
assert len(toks) == count, (len(toks), count)
i = np.arange(n, dtype=np.int64)
ref = (i * 7919 + 13) % 50257 if kind == 'u16' else (i * 48271 + 5) % 200003
bad = np.nonzero(toks.astype(np.int64) != ref)[0]
assert len(bad) == 0, ('first differing token', int(bad[0]))
print('ok', count)
)";

std::string bytes_of(const std::vector<int32_t>& header, const std::vector<uint16_t>& tokens) {
  std::string s(header.size() * 4 + tokens.size() * 2, '\0');
  std::memcpy(s.data(), header.data(), header.size() * 4);
  std::memcpy(s.data() + header.size() * 4, tokens.data(), tokens.size() * 2);
  return s;
}

std::vector<int32_t> header(int32_t magic, int32_t version, int32_t count) {
  std::vector<int32_t> h(256, 0);
  h[0] = magic, h[1] = version, h[2] = count;
  return h;
}

}  // namespace

TEST_CASE("shards/llm.c, its uint32 variant and nanoGPT's raw files written by numpy read back token for token") {
  if (!have_numpy()) {
    MESSAGE("skipped: /usr/bin/python3 cannot import numpy (apt install python3-numpy)");
    return;
  }
  ablate::test::TempDir dir;
  const int64_t n = 300007;  // more than one chunk of a parallel scan is not needed; odd on purpose
  python(dir, kNumpyWriters, "u16 " + (dir / "fineweb_train_000001.bin") + " " + std::to_string(n));
  python(dir, kNumpyWriters, "u32 " + (dir / "big_train_000001.bin") + " " + std::to_string(n));
  python(dir, kNumpyWriters, "raw " + (dir / "train.bin") + " " + std::to_string(n));

  const ablate::Shard a = ablate::Shard::open(dir / "fineweb_train_000001.bin");
  CHECK(a.format() == ablate::ShardFormat::kUint16);
  CHECK(a.size() == n);
  CHECK(a.file_bytes() == 1024 + 2 * n);
  const ablate::Shard b = ablate::Shard::open(dir / "big_train_000001.bin");
  CHECK(b.format() == ablate::ShardFormat::kUint32);
  CHECK(b.size() == n);
  const ablate::Shard c = ablate::Shard::open(dir / "train.bin", ablate::ShardLayout::kRaw);
  CHECK(c.format() == ablate::ShardFormat::kRaw16);
  CHECK(c.size() == n);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += (a[i] != id16(i)) + (b[i] != id32(i)) + (c[i] != id16(i));
  CHECK(wrong == 0);
  std::vector<int32_t> window(100);
  a.copy(n - 100, 100, window.data());
  for (int64_t k = 0; k < 100; ++k) CHECK(window[static_cast<size_t>(k)] == static_cast<int32_t>(id16(n - 100 + k)));
  b.copy(5, 100, window.data());
  for (int64_t k = 0; k < 100; ++k) CHECK(window[static_cast<size_t>(k)] == static_cast<int32_t>(id32(5 + k)));

  CHECK(a.max_id() == 50256);
  CHECK(b.max_id() == 200002);
  CHECK(a.first_at_least(50257) == -1);
  int64_t first_big = 0;
  while (id32(first_big) < 100000) ++first_big;
  CHECK(b.first_at_least(100000) == first_big);
  const std::vector<int64_t> where = a.positions_of(id16(777));
  REQUIRE(!where.empty());
  CHECK(where.front() == 777 % 50257);
  for (int64_t p : where) CHECK(a[p] == id16(777));
  a.release();  // the mapping stays valid after its pages are handed back
  CHECK(a[12345] == id16(12345));
}

TEST_CASE("shards/ablate's shards (uint16 and uint32) read by numpy as llm.c reads them; nothing under the final name before close") {
  if (!have_numpy()) {
    MESSAGE("skipped: /usr/bin/python3 cannot import numpy (apt install python3-numpy)");
    return;
  }
  ablate::test::TempDir dir;
  const int64_t n = 2500000;  // more than the writer's buffer
  for (auto format : {ablate::ShardFormat::kUint16, ablate::ShardFormat::kUint32}) {
    const bool u16 = format == ablate::ShardFormat::kUint16;
    const std::string path = dir / (u16 ? "a_train_000001.bin" : "b_train_000001.bin");
    {
      ablate::ShardWriter w(path, format);
      std::vector<int32_t> ids;
      for (int64_t i = 0; i < n; ++i) {
        ids.push_back(static_cast<int32_t>(u16 ? id16(i) : id32(i)));
        if (ids.size() == 99991 || i + 1 == n) {
          w.append(ids.data(), ids.size());
          ids.clear();
        }
      }
      CHECK(w.tokens() == n);
      CHECK(!fs::exists(path));  // written under path.tmp until close
      CHECK(fs::exists(path + ".tmp"));
      w.close();
    }
    CHECK(!fs::exists(path + ".tmp"));
    CHECK(fs::file_size(path) == static_cast<uintmax_t>(1024 + (u16 ? 2 : 4) * n));
    CHECK(contains(python(dir, kNumpyReader, path + (u16 ? " u16 " : " u32 ") + std::to_string(n)), "ok " + std::to_string(n)));
    const ablate::Shard s = ablate::Shard::open(path);
    CHECK(s.size() == n);
    CHECK(s[n - 1] == (u16 ? id16(n - 1) : id32(n - 1)));
  }
  // A writer destroyed before close (an error half-way) leaves nothing behind.
  {
    ablate::ShardWriter w(dir / "c_val_000000.bin", ablate::ShardFormat::kUint16);
    const int32_t ids[3] = {1, 2, 3};
    w.append(ids, 3);
  }
  CHECK(!fs::exists(dir / "c_val_000000.bin"));
  CHECK(!fs::exists(dir / "c_val_000000.bin.tmp"));
  // uint16 cannot hold 65,536: the error names the id and the uint32 format.
  ablate::ShardWriter w(dir / "d.bin", ablate::ShardFormat::kUint16);
  const int32_t big[2] = {7, 70000};
  const std::string e = error_of([&] { w.append(big, 2); });
  CHECK(contains(e, "d.bin: token 1 is id 70000"));
  CHECK(contains(e, "uint32 tokens, magic 20240801"));
  CHECK(ablate::shard_format_for_vocab(50257) == ablate::ShardFormat::kUint16);
  CHECK(ablate::shard_format_for_vocab(65536) == ablate::ShardFormat::kUint16);
  CHECK(ablate::shard_format_for_vocab(65537) == ablate::ShardFormat::kUint32);
}

TEST_CASE("shards/a damaged or foreign file is refused naming the file, what was found and what is expected") {
  ablate::test::TempDir dir;
  const std::vector<uint16_t> toks{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto open = [&](const std::string& name, const std::string& bytes, ablate::ShardLayout layout = ablate::ShardLayout::kHeader) {
    const std::string path = dir.write(name, bytes);
    return error_of([&] { ablate::Shard::open(path, layout); });
  };
  // Wrong magic: the value found, the formats that exist, the raw format for nanoGPT files.
  std::string e = open("m.bin", bytes_of(header(12345, 1, 10), toks));
  CHECK(contains(e, "m.bin: not an llm.c token shard: its first int32 (the magic) is 12345 (0x00003039)"));
  CHECK(contains(e, "20240520 (llm.c shard, uint16 tokens, version 1)"));
  CHECK(contains(e, "20240801 (llm.c uint32 variant, version 7)"));
  CHECK(contains(e, "data.format: raw"));
  // A nanoGPT file read as a header shard: the same message.
  e = open("train.bin", std::string(reinterpret_cast<const char*>(toks.data()), 20));
  CHECK(contains(e, "train.bin: 20 bytes, shorter than the 1024-byte header"));
  CHECK(contains(e, "data.format: raw"));
  // Wrong version.
  e = open("v.bin", bytes_of(header(20240520, 3, 10), toks));
  CHECK(contains(e, "v.bin: llm.c shard with magic 20240520 but version 3; magic 20240520 goes with version 1"));
  e = open("v32.bin", bytes_of(header(20240801, 1, 5), toks));
  CHECK(contains(e, "magic 20240801 goes with version 7"));
  // Truncated body: the offset, the size the count implies, the size found.
  e = open("t.bin", bytes_of(header(20240520, 1, 1000), toks));
  CHECK(contains(e, "t.bin: truncated: the header counts 1000 tokens, so the file should be 3024 bytes (1024 + 1000 x 2), "
                    "but it has 1044 bytes; the tokens stop at byte offset 1044 (after token 10 of 1000)"));
  e = open("long.bin", bytes_of(header(20240520, 1, 4), toks));
  CHECK(contains(e, "long.bin: the header counts 4 tokens, so the file should be 1032 bytes"));
  CHECK(contains(e, "12 bytes after the last token (byte offset 1032)"));
  e = open("neg.bin", bytes_of(header(20240520, 1, -4), toks));
  CHECK(contains(e, "token count (int32 at byte offset 8) is -4"));
  // A raw file of odd length; a raw read of an llm.c shard.
  e = open("odd.bin", std::string(21, 'x'), ablate::ShardLayout::kRaw);
  CHECK(contains(e, "odd.bin: 21 bytes, an odd length"));
  CHECK(contains(e, "half a token at byte offset 20"));
  e = open("hdr.bin", bytes_of(header(20240520, 1, 10), toks), ablate::ShardLayout::kRaw);
  CHECK(contains(e, "starts with llm.c's shard magic 20240520"));
  e = error_of([&] { ablate::Shard::open(dir / "absent.bin"); });
  CHECK(contains(e, "absent.bin: cannot open token shard: No such file or directory"));
  // An empty shard is a shard.
  CHECK(ablate::Shard::open(dir.write("empty.bin", bytes_of(header(20240520, 1, 0), {}))).size() == 0);
  // Ids at or above the vocabulary: the first offset and id, the vocabulary size and the fix.
  const std::vector<uint16_t> ids{5, 250, 255, 256, 300, 7};
  const ablate::Shard s = ablate::Shard::open(dir.write("ids.bin", bytes_of(header(20240520, 1, 6), ids)));
  CHECK_NOTHROW(ablate::check_shard_ids(s, 301, "FIX"));
  e = error_of([&] { ablate::check_shard_ids(s, 256, "Use the tokenizer the shards were made with."); });
  CHECK(contains(e, "ids.bin: token 3 (byte offset 1030) is id 256, but the vocabulary has 256 ids (0 to 255)"));
  CHECK(contains(e, "Use the tokenizer the shards were made with."));
}
