// Shared helpers for the test suite: temporary directories, running the real `ablate`
// binary, loading the real plugin directory.
#pragma once
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>

#include "ablate/error.hpp"
#include "ablate/registry.hpp"

namespace ablate::test {

// A fresh directory removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("ablate_test_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

// Whether `part` occurs in `s`.
inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The message of the ablate::Error f throws; "" (and a failed check) if it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ablate::Error& e) {
    return e.what();
  }
  FAIL_CHECK("expected an ablate::Error");
  return "";
}

// How often `what` occurs in `text` (overlapping occurrences count).
inline size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// A model small enough that a run of 60 steps takes about a second on one core
// (data: shakespeare_16k.txt, found through ABLATE_DATA_PATH or next to the YAML).
inline const char* const kTinyBase = R"(name: tiny
seed: 7
data: {path: shakespeare_16k.txt, train_fraction: 0.9}
tokenizer: char
model:
  d_model: 32
  n_heads: 4
  n_layers: 2
  context: 32
  positional: learned
  attention: causal
  ffn: relu
  block: prenorm
  norm: layernorm
train: {steps: 60, batch_size: 16, eval_every: 20, eval_batches: 4, checkpoint_every: 20, log_every: 10}
optimizer: {type: adamw, lr: 1.0e-2}
sample: {tokens: 20, prompt: "ROMEO:", temperature: 0.8}
)";

struct CommandResult {
  int status = -1;     // exit code
  std::string output;  // stdout and stderr together
};

// Runs a shell command, capturing its output and exit code.
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

inline std::string ablate_binary() { return std::string(ABLATE_BINARY_DIR) + "/ablate"; }

// Runs `ablate run` on a one-step experiment written to d/bad.yaml whose model section's last
// line, line 10 of the file, is `  <key>: <value>` (e.g. "head", "{type: softcap, cap: -3}"),
// which must fail; returns the output, for checking that the error names the file and line.
// `flags` go to the command line (e.g. --plugin-dir).
inline std::string run_with_bad_model_option(const TempDir& d, const std::string& key,
                                             const std::string& value,
                                             const std::string& flags = "") {
  const std::string exp =
      d.write("bad.yaml",
              std::string("name: bad\nseed: 3\ndata: {path: ") + ABLATE_TEST_DATA_DIR +
                  "/shakespeare_16k.txt}\ntokenizer: byte\n"
                  "model:\n  d_model: 16\n  n_heads: 2\n  n_layers: 1\n  context: 16\n  " +
                  key + ": " + value + "\ntrain: {steps: 1, batch_size: 2}\nsample: {tokens: 0}\n");
  const CommandResult r =
      run_command(ablate_binary() + " run " + exp + " -o " + (d / "run") + " -q " + flags);
  CHECK_MESSAGE(r.status != 0, r.output);
  return r.output;
}

// The registry with the build's plugin directory loaded.
inline PluginRegistry& registry() {
  auto& r = PluginRegistry::instance();
  r.add_directory(ABLATE_PLUGIN_DIR);
  r.load_all();
  return r;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Headless Chromium for rendering checks (test_report, test_inspect).
inline bool have_chromium() { return run_command("command -v chromium").status == 0; }

// Chromium screenshot statistics: width height non_white blue orange yellow (Tableau blue
// #4e79a7 and orange #f28e2b are the first two series' colours; yellow is the top of viridis). A
// PNG decoder in Python's standard library (zlib + the five PNG row filters), so nothing is
// installed.
inline constexpr const char* kPngStats = R"(import sys, zlib, struct
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
pos, idat = 8, b''
while pos < len(data):
    n, typ = struct.unpack('>I4s', data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    pos += 12 + n
    if typ == b'IHDR':
        w, h, depth, ctype = struct.unpack('>IIBB', body[:10])
    elif typ == b'IDAT':
        idat += body
assert depth == 8 and ctype in (2, 6), 'unexpected PNG type'
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
prev, i = bytearray(stride), 0
nonwhite = blue = orange = yellow = 0
for y in range(h):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
    i += 1 + stride
    if f == 2:
        line = bytearray((a + b) & 255 for a, b in zip(line, prev))
    elif f != 0:
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 3: line[x] = (line[x] + ((a + b) >> 1)) & 255
            else:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else (b if pb <= pc else c))) & 255
    for x in range(0, stride, bpp):
        r, g, b = line[x], line[x + 1], line[x + 2]
        if r < 240 or g < 240 or b < 240: nonwhite += 1
        if abs(r - 78) < 16 and abs(g - 121) < 16 and abs(b - 167) < 16: blue += 1
        if abs(r - 242) < 16 and abs(g - 142) < 16 and abs(b - 43) < 24: orange += 1
        if r > 200 and g > 200 and b < 90: yellow += 1
    prev = line
print(w, h, nonwhite, blue, orange, yellow)
)";

inline std::string chromium_flags(const TempDir& d) {
  return "chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
         "--disable-background-networking "
         "--disable-component-update --disable-sync --user-data-dir=" +
         (d / "chromium-profile") + " ";
}

}  // namespace ablate::test
