// Bits per byte (docs/RESULTS.md "Bits per byte"): val_bpb and train_bpb of the eval table
// and text_loss's bpb are loss / ln 2 for byte and character tokens of ASCII text; for bpe,
// gpt2 and shards with end-of-text ids they are the hand computation from the trained model's
// per-token losses (recomputed here in double from its logits) and each token's bytes, with
// end-of-text targets in neither sum. The metric compares (lower is better) and a run file
// begun without the columns resumes without them.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ablate/compare.hpp"
#include "ablate/data_source.hpp"
#include "ablate/evaluator.hpp"
#include "ablate/experiment.hpp"
#include "ablate/runfile.hpp"
#include "ablate/shards.hpp"
#include "ablate/trainer.hpp"
#include "gpt2_reference.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

using ablate::test::contains;

namespace {

// A tiny model; no dropout, so the reloaded model scores exactly as the trainer's evaluation.
const char* kBase = R"(name: bpb
seed: 3
data: {path: shakespeare_16k.txt}
tokenizer: char
model: {d_model: 32, n_heads: 4, n_layers: 1, context: 32}
train: {steps: 30, batch_size: 8, eval_every: 15, eval_batches: 3, checkpoint_every: 30, log_every: 10, threads: 1}
optimizer: {type: adamw, lr: 1.0e-2}
sample: {tokens: 0}
eval: [{type: text_loss}]
)";

ablate::RunData train(const ablate::test::TempDir& dir, const std::string& out,
                      const std::vector<std::string>& overrides,
                      const std::string& data_path = ABLATE_TEST_DATA_DIR) {
  ablate::test::registry();
  setenv("ABLATE_DATA_PATH", data_path.c_str(), 1);
  const std::string file = dir.write("bpb.yaml", kBase);
  ablate::RunOptions ro;
  ro.out_dir = dir / out;
  ro.quiet = true;
  ablate::run_experiment(ablate::Experiment::load(file, overrides), ro);
  return ablate::read_run_file(ablate::run_file_path(dir / out));
}

const std::vector<double>& column(const ablate::RunData& d, const std::string& table,
                                  const std::string& col) {
  REQUIRE(d.tables.count(table));
  REQUIRE_MESSAGE(d.tables.at(table).count(col), table << " has no column " << col);
  return d.tables.at(table).at(col);
}

// Every row: bpb == loss / ln 2 (relative 1e-9: the sums are in double, the losses float).
void check_bits_of_loss(const ablate::RunData& d) {
  const auto &vl = column(d, "eval", "val_loss"), &vb = column(d, "eval", "val_bpb");
  const auto &tl = column(d, "eval", "train_loss"), &tb = column(d, "eval", "train_bpb");
  REQUIRE(vl.size() == 3);
  for (size_t i = 0; i < vl.size(); ++i) {
    CHECK(vb[i] == doctest::Approx(vl[i] / std::log(2.0)).epsilon(1e-9));
    CHECK(tb[i] == doctest::Approx(tl[i] / std::log(2.0)).epsilon(1e-9));
  }
  const auto &el = column(d, "eval/text_loss", "loss"), &eb = column(d, "eval/text_loss", "bpb");
  for (size_t i = 0; i < el.size(); ++i)
    CHECK(eb[i] == doctest::Approx(el[i] / std::log(2.0)).epsilon(1e-9));
  CHECK(vb.back() < vb.front());  // it learns
}

// The sums of a hand computation of bits per byte over consecutive windows of T tokens of
// each stream, as train.eval_full scores them: every token but a stream's first is a target.
struct Hand {
  double nats = 0, bytes = 0;  // over the targets with bytes
  double all_nats = 0;         // over every target
  int64_t targets = 0;
  double bpb() const { return nats / std::log(2.0) / bytes; }
  double loss() const { return all_nats / static_cast<double>(targets); }
};

Hand score(ablate::Model& model, const std::vector<std::vector<int32_t>>& streams, int64_t T,
           const std::function<int64_t(int32_t)>& bytes_of) {
  Hand h;
  for (const auto& t : streams) {
    for (int64_t i = 0; i + 1 < static_cast<int64_t>(t.size()); i += T) {
      const int64_t m = std::min<int64_t>(T, static_cast<int64_t>(t.size()) - 1 - i);
      ablate::Graph g;
      ablate::NoGrad no_grad(g);
      ablate::Batch a;
      a.ids = t.data() + i;
      a.batch = 1;
      a.time = m;
      const ablate::Tensor logits = g.value(model.forward(g, a));
      for (int64_t p = 0; p < m; ++p) {
        const float* row = logits.row(p);
        double top = row[0], sum = 0;
        for (int64_t v = 1; v < logits.cols; ++v) top = std::max<double>(top, row[v]);
        for (int64_t v = 0; v < logits.cols; ++v) sum += std::exp(row[v] - top);
        const int32_t y = t[static_cast<size_t>(i + p + 1)];
        const double ce = top + std::log(sum) - row[y];
        h.all_nats += ce;
        ++h.targets;
        const int64_t b = bytes_of(y);
        if (b > 0) h.nats += ce, h.bytes += static_cast<double>(b);
      }
    }
  }
  return h;
}

// The validation text of data: {path: shakespeare_16k.txt} (train_fraction 0.9, ASCII).
std::string val_text() {
  const std::string text =
      ablate::read_text_file(std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt");
  return text.substr(static_cast<size_t>(static_cast<double>(text.size()) * 0.9));
}

}  // namespace

TEST_CASE(
    "bpb/byte and char tokens of ASCII text: val_bpb, train_bpb and text_loss's bpb are the loss / "
    "ln 2") {
  ablate::test::TempDir dir;
  SUBCASE("char, sampled batches") { check_bits_of_loss(train(dir, "char", {})); }
  SUBCASE("char, the whole validation part") {
    check_bits_of_loss(train(dir, "char_full", {"train.eval_full=true"}));
  }
  SUBCASE("byte, sampled batches") { check_bits_of_loss(train(dir, "byte", {"tokenizer=byte"})); }
  SUBCASE("byte, the whole validation part") {
    check_bits_of_loss(train(dir, "byte_full", {"tokenizer=byte", "train.eval_full=true"}));
  }
}

TEST_CASE(
    "bpb/token_byte_counts: the bytes each id adds to decoded text, end-of-text and padding 0") {
  ablate::test::registry();
  auto& reg = ablate::PluginRegistry::instance();
  auto make = [&](const std::string& yaml) {
    ablate::Options o(YAML::Load(yaml), std::make_shared<ablate::ConfigSource>(), "tokenizer");
    return reg.create<ablate::Tokenizer>(o, ablate::StandaloneContext());
  };
  auto byte = make("{type: byte, pad: true, eot: true}");
  const auto b = ablate::token_byte_counts(*byte);
  REQUIRE(b.size() == 258);
  for (int i = 0; i < 256; ++i) CHECK(b[static_cast<size_t>(i)] == 1);
  CHECK(b[256] == 0);  // padding
  CHECK(b[257] == 0);  // end of text (it decodes to <|endoftext|>: 13 bytes that are no text)
  auto chr = make("{type: char}");
  chr->fit("aé€𝄞");
  const auto c = ablate::token_byte_counts(*chr);
  CHECK(c[static_cast<size_t>(chr->encode("a")[0])] == 1);
  CHECK(c[static_cast<size_t>(chr->encode("é")[0])] == 2);
  CHECK(c[static_cast<size_t>(chr->encode("€")[0])] == 3);
  CHECK(c[static_cast<size_t>(chr->encode("𝄞")[0])] == 4);
  // bpe: a word's last token also stands for the space after the word.
  auto bpe = make("{type: bpe, merges: 20}");
  bpe->fit("the cat the hat the bat\n");
  const auto e = ablate::token_byte_counts(*bpe);
  const auto ids = bpe->encode("the the");
  REQUIRE(ids.size() == 2);
  CHECK(ids[0] == ids[1]);
  CHECK(e[static_cast<size_t>(ids[0])] == 4);  // "the" and the space its word end stands for
  CHECK(e[static_cast<size_t>(bpe->pad_id())] == 0);
}

TEST_CASE(
    "bpb/a bpe run's val_bpb is the hand computation from its per-token losses and byte counts") {
  ablate::test::TempDir dir;
  const auto d = train(dir, "bpe", {"tokenizer={type: bpe, merges: 200}", "train.eval_full=true"});
  auto run = ablate::load_run(dir / "bpe");
  const std::vector<int32_t> val = run.tokenizer->encode(val_text());
  const auto table = ablate::token_byte_counts(*run.tokenizer);
  const Hand h =
      score(*run.model, {val}, 32, [&](int32_t id) { return table[static_cast<size_t>(id)]; });
  // The hand computation scores what the trainer scored: the same loss.
  CHECK(column(d, "eval", "val_loss").back() == doctest::Approx(h.loss()).epsilon(1e-5));
  CHECK(column(d, "eval", "val_bpb").back() == doctest::Approx(h.bpb()).epsilon(1e-5));
  // The table's bytes against the text's: a word end before a newline counts a space that is
  // not there, so the table counts a little more than the text has.
  const double text_bytes =
      static_cast<double>(val_text().size() - run.tokenizer->decode({val[0]}).size());
  MESSAGE("bpe: table bytes " << h.bytes << " for " << text_bytes << " bytes of text");
  CHECK(h.bytes >= text_bytes);
  CHECK(h.bytes < 1.05 * text_bytes);
}

TEST_CASE(
    "bpb/a gpt2 run's val_bpb is the hand computation, and its targets' bytes are the text's") {
  const ablate::test::Gpt2Reference& ref = ablate::test::gpt2_reference();
  if (!ref.ok()) {
    if (ref.npm_missing) FAIL(ref.problem);
    MESSAGE("skipped: " << ref.problem);
    return;
  }
  ablate::test::TempDir dir;
  const auto d = train(dir, "gpt2",
                       {"tokenizer=gpt2", "model.context=16", "train.steps=10",
                        "train.eval_every=5", "train.batch_size=4", "train.eval_full=true"},
                       std::string(ABLATE_TEST_DATA_DIR) + ":" + ref.files());
  auto run = ablate::load_run(dir / "gpt2");
  const std::string text = val_text();
  const std::vector<int32_t> val = run.tokenizer->encode(text);
  const Hand h = score(*run.model, {val}, 16, [&](int32_t id) {
    return static_cast<int64_t>(run.tokenizer->decode({id}).size());
  });
  CHECK(h.bytes ==
        static_cast<double>(text.size() - run.tokenizer->decode({val[0]}).size()));  // exact
  CHECK(column(d, "eval", "val_loss").back() == doctest::Approx(h.loss()).epsilon(1e-5));
  CHECK(column(d, "eval", "val_bpb").back() == doctest::Approx(h.bpb()).epsilon(1e-5));
  CHECK(column(d, "eval", "val_bpb").back() !=
        doctest::Approx(column(d, "eval", "val_loss").back() / std::log(2.0)));
}

TEST_CASE(
    "bpb/shards with end-of-text ids: the separators are in neither sum, the bytes are the "
    "manifest's") {
  ablate::test::TempDir dir;
  const std::string shards = dir / "shards";
  const auto prep = ablate::test::run_command(
      ablate::test::ablate_binary() + " data prepare " + ABLATE_TEST_DATA_DIR +
      "/shakespeare_16k.txt --out " + shards +
      " --tokenizer byte --option eot=true --split '\\n\\n' --val-fraction 0.1 -q");
  INFO(prep.output);
  REQUIRE(prep.status == 0);
  const auto d = train(dir, "shards",
                       {"data={shards: " + shards + "}", "tokenizer={type: byte, eot: true}",
                        "train.eval_full=true"});
  auto run = ablate::load_run(dir / "shards");
  std::vector<std::vector<int32_t>> streams;
  for (const auto& e : fs::directory_iterator(shards)) {
    if (e.path().filename().string().find("_val_") == std::string::npos) continue;
    const ablate::Shard s = ablate::Shard::open(e.path().string(), ablate::ShardLayout::kHeader);
    streams.emplace_back(static_cast<size_t>(s.size()));
    s.copy(0, s.size(), streams.back().data());
  }
  REQUIRE(streams.size() == 1);
  const int32_t eot = run.tokenizer->eot_id();
  REQUIRE(eot == 256);
  REQUIRE(streams[0][0] == eot);
  const Hand h = score(*run.model, streams, 32, [&](int32_t id) { return id == eot ? 0 : 1; });
  const auto manifest = nlohmann::json::parse(ablate::test::read_file(shards + "/manifest.json"));
  CHECK(h.bytes == manifest["bytes"]["val"].get<double>());
  CHECK(h.targets > static_cast<int64_t>(h.bytes));  // end-of-text targets, left out
  CHECK(column(d, "eval", "val_loss").back() == doctest::Approx(h.loss()).epsilon(1e-5));
  CHECK(column(d, "eval", "val_bpb").back() == doctest::Approx(h.bpb()).epsilon(1e-5));
}

TEST_CASE("bpb/val_bpb compares and reports as any metric, lower is better") {
  CHECK(ablate::metric_higher_is_better("val_bpb") == 0);
  CHECK(ablate::metric_higher_is_better("train_bpb") == 0);
  ablate::test::TempDir dir;
  train(dir, "char", {});
  train(dir, "byte", {"tokenizer=byte"});
  const auto c =
      ablate::test::run_command(ablate::test::ablate_binary() + " compare " + (dir / "char") + " " +
                                (dir / "byte") + " --metric val_bpb --by tokenizer.type");
  INFO(c.output);
  CHECK(c.status == 0);
  CHECK(contains(c.output, "val_bpb"));
  CHECK(contains(c.output, "lower is better"));
}

TEST_CASE("bpb/a run file begun without the bits-per-byte columns resumes without them") {
  ablate::test::TempDir dir;
  train(dir, "old", {"train.steps=15"});
  const std::string h5 = ablate::run_file_path(dir / "old");
  // The eval table as an ablate without bits per byte wrote it.
  const auto py = ablate::test::run_command(
      "/usr/bin/python3 -c \"import h5py; f = h5py.File('" + h5 +
      "', 'r+'); del f['metrics/eval/val_bpb']; del f['metrics/eval/train_bpb']\"");
  INFO(py.output);
  REQUIRE(py.status == 0);
  ablate::RunOptions ro;
  ro.out_dir = dir / "old";
  ro.quiet = true;
  ro.resume = true;
  ro.extend_to = 30;
  ablate::run_experiment(ablate::Experiment::load(dir / "bpb.yaml", {"train.steps=15"}), ro);
  const auto d = ablate::read_run_file(h5);
  CHECK(d.tables.at("eval").at("step") == std::vector<double>{0, 15, 30});
  CHECK(d.tables.at("eval").count("val_bpb") == 0);
  CHECK(d.tables.at("eval/text_loss").at("bpb").size() == 3);
}
