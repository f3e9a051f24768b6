// `ablate data prepare`, the real binary on real files: a corpus as text, gzip, zstd, JSONL
// and a directory gives the same shards, token for token what the split rule says; the
// manifest records the tokenizer, the sources and the counts; shards roll over at
// --shard-tokens; repeated documents are warned about; a fitted tokenizer is saved and a run
// trains from the shards; bad input is refused with a message and leaves no shards.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ablate/data_source.hpp"
#include "ablate/runfile.hpp"
#include "ablate/shards.hpp"
#include "ablate/trainer.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

using ablate::test::contains;

namespace {

ablate::test::CommandResult prepare(const std::string& args) {
  return ablate::test::run_command(ablate::test::ablate_binary() + " data prepare " + args);
}

// The documents of `text` cut at `sep`, empty ones left out (as prepare cuts them).
std::vector<std::string> documents(const std::string& text, const std::string& sep) {
  std::vector<std::string> out;
  for (size_t i = 0;;) {
    const size_t f = text.find(sep, i);
    const std::string d = text.substr(i, f == std::string::npos ? std::string::npos : f - i);
    if (!d.empty()) out.push_back(d);
    if (f == std::string::npos) return out;
    i = f + sep.size();
  }
}

// Every token of the shards of one split in a directory, in name order.
std::vector<uint32_t> split_tokens(const std::string& dir, const std::string& split) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.find("_" + split + "_") != std::string::npos && e.path().extension() == ".bin")
      files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<uint32_t> out;
  for (const auto& f : files) {
    const ablate::Shard s = ablate::Shard::open(f);
    for (int64_t i = 0; i < s.size(); ++i) out.push_back(s[i]);
  }
  return out;
}

nlohmann::json manifest(const std::string& dir) {
  return nlohmann::json::parse(ablate::test::read_file(dir + "/manifest.json"));
}

bool have_zstd() { return ablate::test::run_command("command -v zstd").status == 0; }

std::string shakespeare() {
  return ablate::test::read_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt");
}

// The corpus as JSONL, one {"id": k, "text": document} a line (Python's json, as a dataset
// dump writes it).
void write_jsonl(const ablate::test::TempDir& dir, const std::vector<std::string>& docs,
                 const std::string& name) {
  nlohmann::json list = docs;
  dir.write("docs.json", list.dump());
  auto r = ablate::test::run_command(
      "/usr/bin/python3 -c \"import json; d = json.load(open('" + (dir / "docs.json") +
      "')); f = open('" + (dir / name) +
      "', 'w'); [f.write(json.dumps({'id': k, 'text': t}) + '\\n') for k, t in enumerate(d)]\"");
  REQUIRE_MESSAGE(r.status == 0, r.output);
}

}  // namespace

TEST_CASE(
    "data prepare: text, .gz, .zst, JSONL and a directory give the same shards, token for token "
    "the split rule's") {
  ablate::test::TempDir dir;
  const std::string text = shakespeare();
  const std::vector<std::string> docs = documents(text, "\n\n");
  REQUIRE(docs.size() > 50);
  dir.write("corpus.txt", text);
  auto r = ablate::test::run_command(
      "/usr/bin/python3 -c \"import gzip; open('" + (dir / "corpus.txt.gz") +
      "', 'wb').write(gzip.compress(open('" + (dir / "corpus.txt") + "', 'rb').read()))\"");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  write_jsonl(dir, docs, "corpus.jsonl");
  // A directory of three files that cut the corpus at document boundaries.
  fs::create_directories(dir.path / "parts");
  std::string part;
  int k = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    part += docs[i] + "\n\n";
    if (i == docs.size() / 3 || i == 2 * docs.size() / 3 || i + 1 == docs.size()) {
      dir.write("parts/p" + std::to_string(k++) + ".txt", part);
      part.clear();
    }
  }
  std::vector<std::pair<std::string, std::string>> inputs{
      {"corpus.txt", "txt"}, {"corpus.txt.gz", "gz"}, {"corpus.jsonl", "jsonl"}, {"parts", "dir"}};
  if (have_zstd()) {
    r = ablate::test::run_command("zstd -q -19 " + (dir / "corpus.txt") + " -o " +
                                  (dir / "corpus.txt.zst"));
    REQUIRE_MESSAGE(r.status == 0, r.output);
    inputs.push_back({"corpus.txt.zst", "zst"});
  } else {
    MESSAGE("the .zst input is left out: no zstd command (apt install zstd)");
  }
  for (const auto& input : inputs) {
    const std::string &in = input.first, &out = input.second;
    r = prepare(
        dir / in + " --out " + (dir / out) +
        " --name c --tokenizer byte --option eot=true --split '\\n\\n' --val-fraction 0.1 -q");
    INFO(in << ": " << r.output);
    REQUIRE(r.status == 0);
    CHECK(contains(r.output, "validation documents"));
  }
  // What the rule says: document k is validation when ceil((k+1) f) > ceil(k f), each after
  // the end-of-text id 256.
  std::vector<uint32_t> want[2];
  int64_t val_docs = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const bool val = std::ceil((i + 1) * 0.1) > std::ceil(i * 0.1);
    val_docs += val;
    want[val].push_back(256);
    for (unsigned char c : docs[i]) want[val].push_back(c);
  }
  CHECK(val_docs == static_cast<int64_t>(std::ceil(docs.size() * 0.1)));
  for (const auto& input : inputs) {
    const std::string &in = input.first, &out = input.second;
    INFO(in);
    CHECK(split_tokens(dir / out, "train") == want[0]);
    CHECK(split_tokens(dir / out, "val") == want[1]);
    CHECK(fs::exists(dir / out + "/c_train_000001.bin"));
    CHECK(fs::exists(dir / out + "/c_val_000000.bin"));
    const auto m = manifest(dir / out);
    CHECK(m["documents"]["train"] == static_cast<int64_t>(docs.size()) - val_docs);
    CHECK(m["documents"]["val"] == val_docs);
    CHECK(m["tokens"]["train"] == want[0].size());
  }
  // The first shard of every input is byte for byte the same file.
  const std::string first = ablate::test::read_file(dir / "txt/c_train_000001.bin");
  for (const auto& [in, out] : inputs)
    CHECK(ablate::test::read_file(dir / out + "/c_train_000001.bin") == first);
  // Shards roll over at --shard-tokens: the same tokens in more files, named in order.
  r = prepare(dir / "corpus.txt --out " + (dir / "small") +
              " --tokenizer byte --option eot=true --split '\\n\\n' --val-fraction 0.1 "
              "--shard-tokens 4000 -q");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(fs::exists(dir / "small/small_train_000004.bin"));
  CHECK(ablate::Shard::open(dir / "small/small_train_000001.bin").size() == 4000);
  CHECK(split_tokens(dir / "small", "train") == want[0]);
  CHECK(split_tokens(dir / "small", "val") == want[1]);
}

TEST_CASE(
    "data prepare: the manifest records the tokenizer, every source with its sha256, the counts "
    "and the shards") {
  ablate::test::TempDir dir;
  const std::string text = shakespeare();
  dir.write("a.txt", text.substr(0, 9000));
  dir.write("b.txt", text.substr(9000));
  auto r = prepare(dir / "a.txt " + (dir / "b.txt") + " --out " + (dir / "out") +
                   " --tokenizer byte --option eot=true --split '\\n\\n' --val-fraction 0.05");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "prepare: "));
  CHECK(contains(r.output, "KB/s") == false);
  CHECK(contains(r.output, " MB/s"));
  const auto m = manifest(dir / "out");
  CHECK(m["format"] == "llm.c shard (uint16 tokens, magic 20240520, version 1)");
  CHECK(m["magic"] == 20240520);
  CHECK(m["tokenizer"]["name"] == "byte");
  CHECK(m["tokenizer"]["options"] == nlohmann::json{{"eot", true}});
  CHECK(m["tokenizer"]["vocab_size"] == 257);
  CHECK(m["tokenizer"]["eot_id"] == 256);
  CHECK(m["tokenizer"]["pretrained"] == true);
  CHECK(m["tokenizer"]["state_sha256"] ==
        ablate::sha256_hex(ablate::test::read_file(dir / "out/tokenizer.state")));
  REQUIRE(m["sources"].size() == 2);
  for (int i = 0; i < 2; ++i) {
    const std::string f = dir / (i ? "b.txt" : "a.txt");
    CHECK(m["sources"][i]["path"] == f);
    CHECK(m["sources"][i]["sha256"] == ablate::sha256_hex(ablate::test::read_file(f)));
    CHECK(m["sources"][i]["bytes"] == fs::file_size(f));
  }
  CHECK(m["sources"][0]["documents"]["val"].get<int64_t>() +
            m["sources"][1]["documents"]["val"].get<int64_t>() ==
        m["documents"]["val"].get<int64_t>());
  int64_t tokens = 0;
  for (const auto& s : m["shards"]) {
    tokens += s["tokens"].get<int64_t>();
    CHECK(ablate::Shard::open(dir / "out/" + s["file"].get<std::string>()).size() ==
          s["tokens"].get<int64_t>());
  }
  CHECK(tokens == m["tokens"]["train"].get<int64_t>() + m["tokens"]["val"].get<int64_t>());
  // Bytes: the documents' text, without the separators.
  int64_t bytes = 0;
  for (const auto& d : documents(text.substr(0, 9000), "\n\n"))
    bytes += static_cast<int64_t>(d.size());
  for (const auto& d : documents(text.substr(9000), "\n\n"))
    bytes += static_cast<int64_t>(d.size());
  CHECK(m["bytes"]["train"].get<int64_t>() + m["bytes"]["val"].get<int64_t>() == bytes);
  CHECK(m["val_documents_in_train"] == 0);
}

TEST_CASE(
    "data prepare: a corpus repeated is warned about, a fitted tokenizer is saved and a run trains "
    "from the shards") {
  ablate::test::TempDir dir;
  const std::string text = shakespeare();
  dir.write("three.txt", text + "\n\n" + text + "\n\n" + text);
  auto r = prepare(dir / "three.txt --out " + (dir / "rep") +
                   " --tokenizer byte --split '\\n\\n' --val-fraction 0.05");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output,
                 "prepare: tokenizer 'byte' has no end-of-text id: documents follow one another "
                 "with nothing between them"));
  CHECK(contains(r.output,
                 "validation documents also occur in the training documents (the same text)"));
  CHECK(manifest(dir / "rep")["val_documents_in_train"].get<int64_t>() > 0);
  CHECK(manifest(dir / "rep")["tokenizer"]["eot_id"].is_null());

  // char is fitted on text: on the training documents' first --fit-bytes, saved beside the
  // shards; --val gives the validation documents.
  dir.write("train.txt", text.substr(0, 14000));
  dir.write("val.txt", text.substr(14000));
  r = prepare(dir / "train.txt --val " + (dir / "val.txt") + " --out " + (dir / "chars") +
              " --tokenizer char --fit-bytes 100000");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "prepare: tokenizer 'char' is fitted on text: fitting it on the first"));
  const auto m = manifest(dir / "chars");
  CHECK(m["tokenizer"]["pretrained"] == false);
  CHECK(m["tokenizer"]["fitted_on_bytes"] == 14000);
  CHECK(m["documents"]["train"] == 1);
  CHECK(m["documents"]["val"] == 1);
  CHECK(m["split"]["val_file"] == dir / "val.txt");
  // A run with tokenizer char loads the saved state: the ids mean what they meant.
  const std::string cfg = dir.write("run.yaml", R"(name: chars
data: {shards: chars}
tokenizer: char
model: {d_model: 32, n_heads: 4, n_layers: 2, context: 32}
train: {steps: 30, batch_size: 8, eval_every: 15, eval_batches: 2, threads: 1}
optimizer: {type: adamw, lr: 1.0e-2}
sample: {tokens: 30, prompt: "ROMEO:"}
)");
  r = ablate::test::run_command(ablate::test::ablate_binary() + " run " + cfg + " -q -o " +
                                (dir / "run"));
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto run = ablate::read_run_file(ablate::run_file_path(dir / "run"));
  CHECK(run.str_attrs.at("data_file") == dir / "chars");
  CHECK(run.num_attrs.at("vocab_size") == m["tokenizer"]["vocab_size"].get<double>());
  CHECK(run.tables.at("eval").at("val_loss").back() < run.tables.at("eval").at("val_loss").front());
  CHECK(run.texts.at("samples/final").rfind("ROMEO:", 0) == 0);
}

TEST_CASE(
    "data prepare: documents longer than a piece, and separators across reads, come out whole") {
  ablate::test::TempDir dir;
  // Over 1 MiB of lines; over 1 MiB without a newline, in two-byte characters; a short one.
  std::string lines, wide, text;
  for (int i = 0; lines.size() < 2300000; ++i)
    lines += "line " + std::to_string(i) + " \xC3\xA9t\xC3\xA9\n" + (i % 7 ? "" : "  \n");
  for (int i = 0; wide.size() < 1500000; ++i) wide += i % 3 ? "\xC3\xBC" : "x";
  // The first separator spans the first two reads of 1 MiB.
  const std::vector<std::string> docs{lines.substr(0, (1 << 20) - 5), lines, wide, "short",
                                      lines + wide};
  for (const auto& d : docs) text += d + "<|endoftext|>";
  dir.write("long.txt", text);
  auto r = prepare(dir / "long.txt --out " + (dir / "o") +
                   " --tokenizer byte --split '<|endoftext|>' --val-fraction 0.5 -q");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  std::vector<uint32_t> want[2];
  for (size_t i = 0; i < docs.size(); ++i) {  // f = 0.5: documents 0, 2 and 4 are validation
    for (unsigned char c : docs[i]) want[i % 2 == 0].push_back(c);
  }
  CHECK(split_tokens(dir / "o", "train") == want[0]);
  CHECK(split_tokens(dir / "o", "val") == want[1]);
  CHECK(manifest(dir / "o")["documents"]["train"] == 2);
  CHECK(manifest(dir / "o")["documents"]["val"] == 3);
}

TEST_CASE("data prepare: bad input is refused with a message and leaves no shards") {
  ablate::test::TempDir dir;
  dir.write("a.jsonl", "{\"content\": \"hello\"}\n{\"content\": \"world\"}\n");
  auto r = prepare(dir / "a.jsonl --out " + (dir / "o") + " --tokenizer byte -q");
  CHECK(r.status == 1);
  CHECK(contains(r.output, dir / "a.jsonl:1: no field 'text'; this object has fields content. Name "
                                 "the field that holds the text: --field NAME"));
  r = prepare(dir / "a.jsonl --out " + (dir / "o") +
              " --tokenizer byte --field content --val-fraction 0.5 -q");
  CHECK_MESSAGE(r.status == 0, r.output);
  CHECK(split_tokens(dir / "o", "train") == std::vector<uint32_t>{'w', 'o', 'r', 'l', 'd'});
  // Shards already there: refused, unless --overwrite.
  r = prepare(dir / "a.jsonl --out " + (dir / "o") +
              " --tokenizer byte --field content --val-fraction 0.5 -q");
  CHECK(r.status == 1);
  CHECK(contains(r.output,
                 "holds shards already (manifest.json, o_train_000001.bin, o_val_000000.bin, "
                 "tokenizer.state)"));
  r = prepare(dir / "a.jsonl --out " + (dir / "o") +
              " --tokenizer byte --field content --val-fraction 0.5 -q --overwrite");
  CHECK_MESSAGE(r.status == 0, r.output);

  auto no_shards = [&](const std::string& out) {
    for (const auto& e : fs::directory_iterator(dir / out))
      CHECK_MESSAGE(e.path().extension() != ".bin", e.path());
  };
  dir.write("b.jsonl", "{\"text\": \"one\"}\n{\"text\": \"two\"\n");
  r = prepare(dir / "b.jsonl --out " + (dir / "b") + " --tokenizer byte --val-fraction 0.5 -q");
  CHECK(r.status == 1);
  CHECK(contains(r.output, dir / "b.jsonl:2: not a JSON line: "));
  no_shards("b");
  dir.write("c.jsonl", "[1, 2]\n");
  r = prepare(dir / "c.jsonl --out " + (dir / "c") + " --tokenizer byte -q");
  CHECK(contains(r.output, "c.jsonl:1: a JSON array, not an object {\"text\": \"...\"}"));
  // A gzip file cut short.
  const std::string text = shakespeare();
  dir.write("full.txt", text);
  REQUIRE(ablate::test::run_command("gzip -k " + (dir / "full.txt")).status == 0);
  const std::string gz = ablate::test::read_file(dir / "full.txt.gz");
  dir.write("cut.txt.gz", gz.substr(0, gz.size() / 2));
  r = prepare(dir / "cut.txt.gz --out " + (dir / "g") + " --tokenizer byte --split '\\n\\n' -q");
  CHECK(r.status == 1);
  CHECK(contains(r.output,
                 "cut.txt.gz: gzip data cut short at byte " + std::to_string(gz.size() / 2)));
  no_shards("g");
  // One document: nothing to split.
  r = prepare(dir / "full.txt --out " + (dir / "one") + " --tokenizer byte -q");
  CHECK(r.status == 1);
  CHECK(contains(
      r.output,
      "1 documents: none left for training. Cut text files into documents with --split SEPARATOR"));
  no_shards("one");
  // Usage errors.
  r = prepare(dir / "full.txt --out " + (dir / "u"));
  CHECK(r.status == 2);
  CHECK(contains(r.output, "missing --tokenizer NAME; available: "));
  CHECK(contains(r.output, "byte"));
  r = prepare(dir / "full.txt --out " + (dir / "u") + " --tokenizer bytes");
  CHECK(contains(r.output, "unknown tokenizer 'bytes'"));
  CHECK(contains(r.output, "Did you mean 'byte'?"));
  r = prepare(dir / "missing.txt --out " + (dir / "u") + " --tokenizer byte");
  CHECK(contains(r.output, "missing.txt: no such file or directory"));
  r = prepare(dir / "full.txt --out " + (dir / "u") + " --tokenizer byte --val " +
              (dir / "full.txt"));
  CHECK(contains(r.output,
                 "full.txt: given twice, as the --val file and as an input; its "
                 "documents would be in both splits: leave it out of the inputs"));
  // An input given again, or through a link (as a glob may list it), is read once.
  REQUIRE(ablate::test::run_command("ln -s full.txt " + (dir / "alias.txt")).status == 0);
  r = prepare(dir / "full.txt " + (dir / "alias.txt") + " " + (dir / "full.txt") + " --out " +
              (dir / "twice") + " --tokenizer byte --split '\\n\\n' -q");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "alias.txt: the same file as " + (dir / "full.txt") + "; read once"));
  CHECK(contains(r.output, "full.txt: given twice; read once"));
  r = prepare(dir / "full.txt --out " + (dir / "once") + " --tokenizer byte --split '\\n\\n' -q");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(split_tokens(dir / "twice", "train") == split_tokens(dir / "once", "train"));
  CHECK(split_tokens(dir / "twice", "val") == split_tokens(dir / "once", "val"));
  r = prepare(dir / "full.txt --out " + (dir / "u") + " --tokenizer byte --option pad");
  CHECK(contains(r.output, "--option 'pad': expected KEY=VALUE"));
  r = prepare(dir / "full.txt --out " + (dir / "u") + " --tokenizer byte --option padd=true");
  CHECK(contains(r.output, "padd"));
}
