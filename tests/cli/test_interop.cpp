// Models in and out (docs/INTEROP.md) against a real peer: GPT-2 and Llama written in PyTorch
// with Hugging Face's module names (tests/hf_peer.py; Debian's python3-torch, safetensors through
// numpy). Both ways: an ablate run exported as a Hugging Face directory gives PyTorch the same
// next-token logits (1e-4) and greedy continuation; a PyTorch model saved as a Hugging Face
// directory gives ablate the same. Then the checks of bad input: a damaged safetensors file,
// another architecture, a vocabulary that is not the tokenizer's, transposed, missing and extra
// tensors, a configuration with no Hugging Face equivalent.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "ablate/checkpoint.hpp"
#include "ablate/generate.hpp"
#include "ablate/interop.hpp"
#include "ablate/runfile.hpp"
#include "ablate/safetensors.hpp"
#include "ablate/trainer.hpp"
#include "gpt2_reference.hpp"
#include "test_util.hpp"

namespace {

using ablate::test::contains;
using ablate::test::error_of;
using ablate::test::run_command;
using ablate::test::TempDir;

const std::string kPython = "/usr/bin/python3";
const std::string kPeer = std::string(ABLATE_SOURCE_DIR) + "/tests/hf_peer.py";

// The peer needs PyTorch (Debian: python3-torch, installed by tools/bootstrap.sh --tests).
void require_torch() {
  static const bool ok = run_command(kPython + " -c 'import torch, numpy'").status == 0;
  if (!ok)
    FAIL("python3-torch (with numpy) is not installed; tools/bootstrap.sh --tests installs it");
}

std::string peer(const std::string& args) {
  const auto r = run_command(kPython + " " + kPeer + " " + args);
  INFO(r.output);
  REQUIRE(r.status == 0);
  return r.output;
}

std::string ablate_cmd(const std::string& args, int want = 0) {
  const auto r = run_command(ablate::test::ablate_binary() + " " + args);
  INFO(args << "\n" << r.output);
  REQUIRE(r.status == want);
  return r.output;
}

// Two sequences of 16 byte ids (a byte tokenizer's: any id < 256).
const std::vector<std::vector<int32_t>> kIds = {
    {82, 79, 77, 69, 79, 58, 10, 66, 117, 116, 44, 32, 115, 111, 102, 116},
    {87, 104, 97, 116, 32, 108, 105, 103, 104, 116, 32, 116, 104, 114, 111, 117}};

std::string write_ids(const TempDir& d) {
  std::string text;
  for (const auto& row : kIds) {
    for (int32_t t : row) text += std::to_string(t) + " ";
    text += "\n";
  }
  return d.write("ids.txt", text);
}

std::vector<float> ablate_logits(ablate::LoadedRun& run) {
  std::vector<int32_t> flat;
  for (const auto& row : kIds) flat.insert(flat.end(), row.begin(), row.end());
  ablate::Graph g;
  ablate::NoGrad ng(g);
  g.training = false;
  ablate::Batch fa;
  fa.ids = flat.data();
  fa.batch = static_cast<int64_t>(kIds.size());
  fa.time = static_cast<int64_t>(kIds[0].size());
  const ablate::Tensor& t = g.value(run.model->forward(g, fa));
  return std::vector<float>(t.data, t.data + t.numel());
}

std::vector<float> read_floats(const std::string& path) {
  const std::string b = ablate::test::read_file(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

std::vector<int32_t> ablate_greedy(ablate::LoadedRun& run, int64_t n) {
  ablate::Sampling s;
  s.greedy = true;
  ablate::Rng rng(1);
  const std::vector<int32_t> prompt(kIds[0].begin(), kIds[0].begin() + 8);
  return ablate::generate(*run.model, prompt, n, s, rng);
}

std::string joined(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t t : ids) s += (s.empty() ? "" : ",") + std::to_string(t);
  return s;
}

// The model in `model_dir` (a run, or a Hugging Face directory) and PyTorch's reading of the
// Hugging Face directory `hf_dir` agree: logits of both sequences to 1e-4, 12 greedy tokens.
void same_as_pytorch(const std::string& model_dir, const std::string& hf_dir, const TempDir& d) {
  const std::string out =
      peer("logits " + hf_dir + " " + write_ids(d) + " " + (d / "logits.f32") + " 12");
  const std::vector<float> theirs = read_floats(d / "logits.f32");
  auto run = ablate::load_run(model_dir);
  const std::vector<float> ours = ablate_logits(run);
  REQUIRE(ours.size() == theirs.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    worst = std::max(worst, std::fabs(double(ours[i]) - theirs[i]));
    scale = std::max(scale, std::fabs(double(theirs[i])));
  }
  MESSAGE(model_dir << ": max |logit difference| " << worst << " over " << ours.size()
                    << " logits of size up to " << scale);
  CHECK(scale > 0.5);  // logits that say something
  CHECK(worst < 1e-4);
  CHECK(joined(ablate_greedy(run, 12)) == out.substr(0, out.find('\n')));
}

const char* kGpt2Model = R"(model:
  d_model: 32
  n_heads: 4
  n_layers: 2
  context: 32
  positional: learned
  block: prenorm
  norm: layernorm
  attention: {type: causal, qkv_bias: true, out_bias: true}
  ffn: {type: gelu, bias: true}
  tie_embeddings: true
  init: {type: gpt2, std: 0.1}
)";

const char* kLlamaModel = R"(model:
  d_model: 32
  n_heads: 4
  n_layers: 2
  context: 32
  positional: {type: rope, base: 500}
  block: prenorm
  norm: {type: rmsnorm, eps: 1.0e-6}
  attention: {type: causal, n_kv_heads: 2}
  ffn: {type: swiglu, hidden: 48}
  init: {type: gpt2, std: 0.1}
)";

// An experiment on the excerpt with a byte tokenizer; `model` is a model: section.
std::string experiment(const TempDir& d, const std::string& model, int64_t steps = 3,
                       const std::string& extra = "") {
  return d.write("exp.yaml",
                 "name: x\nseed: 5\ndata: {path: " + std::string(ABLATE_TEST_DATA_DIR) +
                     "/shakespeare_16k.txt}\ntokenizer: byte\n" + model +
                     "train: {steps: " + std::to_string(steps) +
                     ", batch_size: 4, eval_every: 100, eval_batches: 1, log_every: 1}\n"
                     "optimizer: {type: adamw, lr: 1.0e-2}\nsample: {tokens: 0}\n" +
                     extra);
}

}  // namespace

TEST_CASE(
    "interop/an ablate GPT-2 run exported as a Hugging Face directory gives PyTorch the same "
    "logits") {
  require_torch();
  ablate::test::registry();
  TempDir d;
  ablate_cmd("run " + experiment(d, kGpt2Model) + " -o " + (d / "run") + " -q");
  const std::string out = ablate_cmd("export " + (d / "run") + " --format hf -o " + (d / "hf"));
  CHECK(contains(
      out,
      "GPT2LMHeadModel: 28 tensors"));  // 12 per layer, wte, wpe, ln_f's 2; the tied head is wte
  CHECK(contains(out, "tokenizer 'byte': tokenizer.json"));
  const std::string cfg = ablate::test::read_file(d / "hf/config.json");
  CHECK(contains(cfg, "\"n_embd\": 32"));
  CHECK(contains(cfg, "\"activation_function\": \"gelu_new\""));
  same_as_pytorch(d / "run", d / "hf", d);
  // The byte tokenizer's tokenizer.json, read by the gpt2 tokenizer: the byte tokenizer's ids.
  const std::string ids = ablate_cmd(
      "data tokenize --tokenizer gpt2 --option tokenizer_json=" + (d / "hf/tokenizer.json") + " " +
      d.write("text.txt", "ROMEO: \xc3\xa9"));
  CHECK(ids.rfind("82 79 77 69 79 58 32 195 169", 0) == 0);
}

TEST_CASE(
    "interop/an ablate Llama run (RoPE, RMSNorm, SwiGLU, grouped-query, untied) gives PyTorch the "
    "same logits") {
  require_torch();
  ablate::test::registry();
  TempDir d;
  ablate_cmd("run " + experiment(d, kLlamaModel) + " -o " + (d / "run") + " -q");
  const std::string out = ablate_cmd("export " + (d / "run") + " --format hf -o " + (d / "hf"));
  CHECK(contains(out, "LlamaForCausalLM"));
  const std::string cfg = ablate::test::read_file(d / "hf/config.json");
  CHECK(contains(cfg, "\"num_key_value_heads\": 2"));
  CHECK(contains(cfg, "\"rope_theta\": 500.0"));
  CHECK(contains(cfg, "\"tie_word_embeddings\": false"));
  same_as_pytorch(d / "run", d / "hf", d);
}

TEST_CASE(
    "interop/a PyTorch GPT-2 saved as a Hugging Face directory gives ablate the same logits") {
  require_torch();
  ablate::test::registry();
  TempDir d;
  peer("make " + (d / "gpt2") +
       " --arch gpt2 --seed 11 --d 48 --heads 4 --layers 3 --context 40 --hidden 96");
  same_as_pytorch(d / "gpt2", d / "gpt2", d);
  // The same weights in BF16 and F16: converted to F32 on load, as PyTorch reads them here.
  for (const char* dtype : {"BF16", "F16"}) {
    peer("make " + (d / dtype) +
         " --arch gpt2 --seed 11 --d 48 --heads 4 --layers 3 --context 40 --hidden 96 --dtype " +
         dtype);
    same_as_pytorch(d / dtype, d / dtype, d);
  }
}

TEST_CASE(
    "interop/a PyTorch Llama (rotate_half RoPE, grouped-query, untied head) gives ablate the same "
    "logits") {
  require_torch();
  ablate::test::registry();
  TempDir d;
  peer("make " + (d / "llama") +
       " --arch llama --seed 12 --d 48 --heads 6 --kv-heads 2 --layers 2 --context 64 --hidden 80 "
       "--untied");
  same_as_pytorch(d / "llama", d / "llama", d);
  // generate, inspect and eval take the directory as they take a run.
  const std::string text =
      ablate_cmd("generate " + (d / "llama") + " --greedy -n 8 --prompt 'ROMEO:'");
  CHECK(text.rfind("ROMEO:", 0) == 0);
  ablate_cmd("inspect " + (d / "llama") + " --text 'ROMEO: But' -o " + (d / "i.html") +
             " --tsne-iterations 50 --map-tokens 40");
  CHECK(std::filesystem::exists(d / "i.h5"));
  ablate_cmd("data arithmetic --test " + (d / "test.txt") +
             " --test-count 4 --train-count 0 --examples 0");
  CHECK(contains(
      ablate_cmd("eval " + (d / "llama") + " --task arithmetic --data " + (d / "test.txt")),
      "exact match"));
}

TEST_CASE(
    "interop/a Hugging Face directory imports, generates, scores a text, fine-tunes and exports "
    "with the same layout") {
  require_torch();
  ablate::test::registry();
  TempDir d;
  peer("make " + (d / "hf") + " --arch gpt2 --seed 13 --d 32 --heads 4 --layers 2 --context 32");
  // Scored by the text_loss evaluator at step 0 (before any step), and by PyTorch.
  const std::string text = "ROMEO:\nBut, soft";  // 16 bytes: the first row of kIds
  const std::string exp = experiment(d, "init_from: " + (d / "hf") + "\n", 4,
                                     "eval: [{type: text_loss, text: \"ROMEO:\\nBut, soft\"}]\n");
  ablate_cmd("run " + exp + " -o " + (d / "tuned") + " -q");
  const ablate::RunData rd = ablate::read_run_file(d / "tuned/run.h5");
  CHECK(rd.str_attrs.at("init_from") == d / "hf");
  const double step0 = rd.tables.at("eval/text_loss").at("loss").front();
  peer("logits " + (d / "hf") + " " + write_ids(d) + " " + (d / "logits.f32"));
  const std::vector<float> lg = read_floats(d / "logits.f32");
  double nll = 0;
  const int64_t V = 256, T = 16;
  for (int64_t t = 0; t + 1 < T; ++t) {
    const float* row = lg.data() + t * V;
    double mx = row[0], sum = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(row[v]));
    for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    nll += mx + std::log(sum) - row[static_cast<unsigned char>(text[static_cast<size_t>(t + 1)])];
  }
  CHECK(step0 == doctest::Approx(nll / (T - 1)).epsilon(1e-5));
  CHECK(rd.tables.at("eval/text_loss").at("loss").back() < step0);  // fine-tuning changed the model
  // Generation from the fine-tuned run (KV cache), then the export: the import's layout.
  CHECK(ablate_cmd("generate " + (d / "tuned") + " --greedy -n 10 --prompt 'ROMEO:'")
            .rfind("ROMEO:", 0) == 0);
  ablate_cmd("export " + (d / "tuned") + " --format hf -o " + (d / "again"));
  CHECK(contains(peer("finetune-check " + (d / "hf") + " " + (d / "again")),
                 "same layout: 28 tensors, 28 changed"));
  same_as_pytorch(d / "tuned", d / "again", d);
}

TEST_CASE(
    "interop/safetensors export keeps every parameter's name, shape and the configuration, and "
    "loads back") {
  ablate::test::registry();
  TempDir d;
  ablate_cmd("run " + experiment(d, kLlamaModel) + " -o " + (d / "run") + " -q");
  ablate_cmd("export " + (d / "run") + " --format safetensors -o " + (d / "w.safetensors"));
  const ablate::SafetensorsFile f = ablate::SafetensorsFile::open(d / "w.safetensors");
  auto run = ablate::load_run(d / "run");
  REQUIRE(f.entries().size() == run.model->params().all().size());
  for (const ablate::Parameter* p : run.model->params().all()) {
    const ablate::SafetensorsEntry* e = f.find(p->name);
    REQUIRE(e != nullptr);
    CHECK(e->dtype == "F32");
    CHECK(e->shape == std::vector<int64_t>{p->value.rows, p->value.cols});
  }
  CHECK(contains(f.metadata().at("ablate_config"), "type: swiglu"));
  CHECK(f.metadata().at("format") == "pt");
  const std::string bytes = ablate::test::read_file(d / "w.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  CHECK((8 + n) % 8 == 0);  // the data 8-byte aligned: the header padded with spaces
  auto back = ablate::load_run(d / "w.safetensors");
  CHECK(ablate_logits(back) == ablate_logits(run));  // bit for bit
}

TEST_CASE(
    "interop/a configuration with no Hugging Face equivalent is refused with what does not map") {
  ablate::test::registry();
  TempDir d;
  const std::string model = R"(model:
  d_model: 32
  n_heads: 4
  n_layers: 2
  context: 32
  positional: alibi
  block: postnorm
  ffn: relu
  head_bias: true
)";
  ablate_cmd("run " + experiment(d, model) + " -o " + (d / "run") + " -q");
  const std::string err = ablate_cmd("export " + (d / "run") + " --format hf -o " + (d / "hf"), 1);
  CHECK(contains(err, "no Hugging Face equivalent"));
  CHECK(contains(
      err,
      "not GPT2LMHeadModel:\n    model.positional.type is alibi; GPT2LMHeadModel needs learned\n"));
  CHECK(contains(err, "model.block.type is postnorm; GPT2LMHeadModel needs prenorm"));
  CHECK(contains(err, "model.positional.type is alibi; GPT2LMHeadModel needs learned"));
  CHECK(contains(err, "model.ffn.type is relu; GPT2LMHeadModel needs gelu"));
  CHECK(contains(err, "model.head_bias is true; GPT2LMHeadModel needs false"));
  CHECK(contains(
      err,
      "not LlamaForCausalLM:\n    model.positional.type is alibi; LlamaForCausalLM needs rope\n"));
  CHECK(contains(err, "model.norm.type is layernorm; LlamaForCausalLM needs rmsnorm"));
  CHECK(contains(err, "--format safetensors"));
  CHECK(!std::filesystem::exists(d / "hf/model.safetensors"));
  ablate_cmd("export " + (d / "run") + " --format safetensors -o " + (d / "w.safetensors"));
  CHECK(ablate::SafetensorsFile::open(d / "w.safetensors").entries().size() > 0);
}

namespace {

// A safetensors file from (name, dtype, shape, raw bytes), offsets in this order.
struct Raw {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

std::string safetensors_bytes(const std::vector<Raw>& tensors,
                              const std::string& header_override = "") {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  size_t at = 0;
  std::string data;
  for (const Raw& t : tensors) {
    h[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes.size()}}};
    at += t.bytes.size();
    data += t.bytes;
  }
  const std::string text = header_override.empty() ? h.dump() : header_override;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  return out + text + data;
}

std::string f32(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(&s[0], v.begin(), s.size());
  return s;
}

std::string parse_error(const std::string& bytes) {
  return error_of([&] {
    ablate::SafetensorsFile::parse(std::vector<uint8_t>(bytes.begin(), bytes.end()),
                                   "t.safetensors");
  });
}

// Every tensor of a file, as F32 values, to rewrite it with a change.
struct Tensors {
  std::vector<std::string> names;
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> t;
  explicit Tensors(const std::string& path) {
    const ablate::SafetensorsFile f = ablate::SafetensorsFile::open(path);
    for (const auto& e : f.entries()) {
      std::vector<float> v(static_cast<size_t>(e.numel()));
      f.read(e, v.data());
      names.push_back(e.name);
      t[e.name] = {e.shape, v};
    }
  }
  void write(const std::string& path) const {
    std::vector<ablate::SafetensorsTensor> out;
    for (const auto& n : names) out.push_back({n, t.at(n).first, t.at(n).second.data()});
    ablate::write_safetensors(path, out, {{"format", "pt"}});
  }
  void transpose(const std::string& name) {
    auto& [shape, v] = t.at(name);
    std::vector<float> w(v.size());
    for (int64_t i = 0; i < shape[0]; ++i)
      for (int64_t j = 0; j < shape[1]; ++j)
        w[static_cast<size_t>(j * shape[0] + i)] = v[static_cast<size_t>(i * shape[1] + j)];
    v = w;
    std::swap(shape[0], shape[1]);
  }
  void remove(const std::string& name) {
    names.erase(std::find(names.begin(), names.end(), name));
    t.erase(name);
  }
  void add(const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    names.push_back(name);
    t[name] = {shape, std::vector<float>(static_cast<size_t>(n), 0.5f)};
  }
};

// A copy of the Hugging Face directory `from` in `to`, its model.safetensors changed by `edit`.
std::string edited(const TempDir& d, const std::string& from, const std::string& to,
                   const std::function<void(Tensors&)>& edit) {
  std::filesystem::create_directories(d / to);
  for (const auto& e : std::filesystem::directory_iterator(d / from))
    std::filesystem::copy_file(e.path(), std::filesystem::path(d / to) / e.path().filename());
  Tensors t(d / (from + "/model.safetensors"));
  edit(t);
  t.write(d / (to + "/model.safetensors"));
  return d / to;
}

std::string load_error(const std::string& dir) {
  return error_of([&] { ablate::load_run(dir); });
}

}  // namespace

TEST_CASE("interop/damaged safetensors files are errors naming what is wrong") {
  const std::string good =
      safetensors_bytes({{"a", "F32", {2}, f32({1, 2})}, {"b", "F32", {1, 2}, f32({3, 4})}});
  CHECK(ablate::SafetensorsFile::parse(std::vector<uint8_t>(good.begin(), good.end()), "ok")
            .entries()
            .size() == 2);
  CHECK(contains(
      parse_error(""),
      "t.safetensors: not a safetensors file: 0 bytes, fewer than the 8 of the header length"));
  // Cut inside the header: the length says more than follows.
  CHECK(contains(parse_error(good.substr(0, 30)),
                 "truncated or not a safetensors file: the header length says"));
  // Cut inside the data: a tensor reaches past the end.
  CHECK(contains(parse_error(good.substr(0, good.size() - 4)),
                 "tensor 'b': data_offsets [8, 16) reach past the end of the data (12 bytes"));
  CHECK(
      contains(parse_error(safetensors_bytes(
                               {}, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})") +
                           std::string(12, '\0')),
               "tensors 'a' [0, 8) and 'b' [4, 12) overlap"));
  CHECK(
      contains(parse_error(safetensors_bytes(
                               {}, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}})") +
                           std::string(20, '\0')),
               "bytes [8, 12) of the data belong to no tensor"));
  CHECK(contains(
      parse_error(safetensors_bytes(
                      {}, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})") +
                  std::string(12, '\0')),
      "bytes [8, 12) of the data, after the last tensor, belong to no tensor"));
  CHECK(contains(parse_error(safetensors_bytes({{"a", "F32", {3}, f32({1, 2})}})),
                 "hold 8 bytes, but shape [3] of F32 needs 12"));
  CHECK(contains(parse_error(safetensors_bytes({{"a", "F33", {2}, f32({1, 2})}})),
                 "has dtype 'F33', which is no safetensors dtype"));
  CHECK(contains(parse_error(safetensors_bytes({}, "{\"a\": [1, 2")),
                 "the safetensors header is not valid JSON"));
  CHECK(contains(parse_error(safetensors_bytes({}, "[1, 2]")), "does not start with '{'"));
  CHECK(contains(parse_error(safetensors_bytes(
                     {}, R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})")),
                 "has an entry that is not a size >= 0"));
  // A dtype the format has but ablate does not read: refused when read, naming the readable ones.
  const std::string i64 = safetensors_bytes({{"a", "I64", {1}, std::string(8, '\1')}});
  const auto f =
      ablate::SafetensorsFile::parse(std::vector<uint8_t>(i64.begin(), i64.end()), "i.safetensors");
  float x;
  CHECK(contains(error_of([&] { f.read(f.entries()[0], &x); }),
                 "tensor 'a' has dtype I64; ablate reads F32, F16 and BF16"));
  // Every single-byte change of a small valid file: an Error or a parse, never a crash.
  for (size_t i = 0; i < good.size(); ++i)
    for (char v : {'\0', '\xff', '{', ']', '9'}) {
      std::string b = good;
      b[i] = v;
      try {
        ablate::SafetensorsFile::parse(std::vector<uint8_t>(b.begin(), b.end()), "m");
      } catch (const ablate::Error&) {
      }
    }
}

TEST_CASE(
    "interop/an import checks every tensor's name, shape and dtype and loads nothing when one is "
    "wrong") {
  require_torch();
  ablate::test::registry();
  TempDir d;
  peer("make " + (d / "gpt2") + " --arch gpt2 --seed 21 --d 32 --heads 4 --layers 2 --context 16");
  peer("make " + (d / "llama") +
       " --arch llama --seed 22 --d 32 --heads 4 --kv-heads 2 --layers 1 --context 16 --hidden 40");
  std::string e = load_error(edited(
      d, "gpt2", "t1", [](Tensors& t) { t.transpose("transformer.h.0.attn.c_attn.weight"); }));
  CHECK(contains(e,
                 "tensor 'transformer.h.0.attn.c_attn.weight' has shape (96, 32) where (32, 96) is "
                 "expected: transposed: "
                 "nn.Linear layout (out, in) where Conv1D (in, out) is expected"));
  CHECK(contains(e, "nothing was loaded"));
  e = load_error(edited(d, "llama", "t2",
                        [](Tensors& t) { t.transpose("model.layers.0.self_attn.k_proj.weight"); }));
  CHECK(contains(e,
                 "tensor 'model.layers.0.self_attn.k_proj.weight' has shape (32, 16) where (16, "
                 "32) is expected: transposed: "
                 "(in, out) layout (Conv1D's, or ablate's) where nn.Linear (out, in) is expected"));
  e = load_error(edited(d, "gpt2", "t3", [](Tensors& t) {
    t.remove("transformer.h.1.mlp.c_fc.bias");
    t.add("transformer.h.2.ln_1.weight", {32});
  }));
  CHECK(contains(e, "2 tensors do not fit the model"));
  CHECK(contains(e,
                 "missing tensor 'transformer.h.1.mlp.c_fc.bias' (128,) (GPT2LMHeadModel, for "
                 "ablate's blocks.1.ffn.up.bias)"));
  CHECK(contains(e,
                 "unexpected tensor 'transformer.h.2.ln_1.weight' (32,): the model configured has "
                 "no place for it (2 layers)"));
  e = load_error(edited(d, "gpt2", "t4", [](Tensors& t) {
    t.t.at("transformer.wpe.weight").first = {8, 64};
  }));
  CHECK(
      contains(e, "tensor 'transformer.wpe.weight' has shape (8, 64) where (16, 32) is expected"));
  // GPT-2's own files: names without "transformer.", causal-mask buffers: read as they are.
  const std::string bare = edited(d, "gpt2", "t5", [](Tensors& t) {
    Tensors u = t;
    t.names.clear();
    t.t.clear();
    for (const auto& n : u.names) {
      const std::string m = n.rfind("transformer.", 0) == 0 ? n.substr(12) : n;
      t.names.push_back(m);
      t.t[m] = u.t.at(n);
    }
    t.add("h.0.attn.bias", {1, 1, 16, 16});
    t.add("h.1.attn.bias", {1, 1, 16, 16});
  });
  auto a = ablate::load_run(d / "gpt2");
  auto b = ablate::load_run(bare);
  CHECK(ablate_logits(a) == ablate_logits(b));
  // A dtype ablate does not read: named, with the readable ones.
  const std::string i64dir = edited(d, "gpt2", "t6", [](Tensors&) {});
  {
    Tensors t(d / "gpt2/model.safetensors");
    std::vector<Raw> raws;
    for (const auto& n : t.names) {
      const auto& [shape, v] = t.t.at(n);
      if (n == "transformer.ln_f.bias")
        raws.push_back({n, "I64", shape, std::string(v.size() * 8, '\0')});
      else
        raws.push_back(
            {n, "F32", shape, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)});
    }
    std::ofstream(i64dir + "/model.safetensors", std::ios::binary | std::ios::trunc)
        << safetensors_bytes(raws);
  }
  CHECK(contains(load_error(i64dir),
                 "tensor 'transformer.ln_f.bias' has dtype I64; ablate reads F32, F16 and BF16"));
  // Nothing loads half: a model keeps every value when a file fails on its last tensor.
  const std::string last_bad =
      edited(d, "gpt2", "t7", [](Tensors& t) { t.transpose("transformer.h.1.mlp.c_proj.weight"); });
  std::vector<std::vector<float>> before;
  for (const ablate::Parameter* p : a.model->params().all())
    before.emplace_back(p->value.data, p->value.data + p->value.numel());
  ablate::ModelFile mf = ablate::read_model_file(last_bad);
  CHECK(contains(error_of([&] {
                   ablate::load_model_file_weights(*a.model, mf,
                                                   YAML::Load(a.experiment->resolved_yaml()));
                 }),
                 "transformer.h.1.mlp.c_proj.weight"));
  size_t i = 0;
  for (const ablate::Parameter* p : a.model->params().all())
    CHECK(std::vector<float>(p->value.data, p->value.data + p->value.numel()) == before[i++]);
}

TEST_CASE(
    "interop/config.json of another architecture, one ablate cannot follow, or a vocabulary that "
    "is not the tokenizer's") {
  require_torch();
  ablate::test::registry();
  TempDir d;
  peer("make " + (d / "gpt2") + " --arch gpt2 --seed 23 --d 32 --heads 4 --layers 1 --context 16");
  auto with_config = [&](const std::string& name,
                         const std::function<void(nlohmann::json&)>& edit) {
    const std::string dir = edited(d, "gpt2", name, [](Tensors&) {});
    nlohmann::json c = nlohmann::json::parse(ablate::test::read_file(dir + "/config.json"));
    edit(c);
    std::ofstream(dir + "/config.json", std::ios::trunc) << c.dump(2);
    return dir;
  };
  std::string e = load_error(with_config("bert", [](nlohmann::json& c) {
    c["architectures"] = {"BertForMaskedLM"};
    c["model_type"] = "bert";
  }));
  CHECK(contains(e,
                 "config.json: describes a BertForMaskedLM (model_type bert); ablate maps "
                 "GPT2LMHeadModel (model_type gpt2), "
                 "LlamaForCausalLM (model_type llama)"));
  e = load_error(with_config("relu", [](nlohmann::json& c) { c["activation_function"] = "relu"; }));
  CHECK(contains(e, "ablate cannot build this GPT2LMHeadModel: activation_function is 'relu'"));
  e = load_error(with_config("mixed", [](nlohmann::json& c) { c["model_type"] = "llama"; }));
  CHECK(contains(e, "architectures says GPT2LMHeadModel but model_type is 'llama'"));
  // 300 ids in config.json and the weights, 256 in the tokenizer.
  peer("make " + (d / "v300") +
       " --arch gpt2 --seed 24 --d 32 --heads 4 --layers 1 --context 16 --vocab 300");
  std::filesystem::copy_file(d / "gpt2/tokenizer.json", d / "v300/tokenizer.json");
  CHECK(contains(load_error(d / "v300"),
                 "vocab_size is 300 but the tokenizer (" + (d / "v300/tokenizer.json") +
                     ") has 256 tokens: the tokenizer files do not belong to these weights"));
  std::filesystem::remove(d / "v300/tokenizer.json");
  CHECK(contains(load_error(d / "v300"),
                 "no tokenizer: ablate reads vocab.json with merges.txt, SentencePiece's "
                 "tokenizer.model, or a "
                 "tokenizer.json"));
  std::filesystem::rename(d / "v300/model.safetensors", d / "v300/pytorch_model.bin");
  CHECK(contains(load_error(d / "v300"), "has pytorch_model.bin but no model.safetensors"));
  // A bare safetensors file with Hugging Face names: its configuration must come from an
  // experiment.
  CHECK(contains(load_error(d / "gpt2/model.safetensors"),
                 "a safetensors file without a configuration"));
}

TEST_CASE(
    "interop/init_from a bare safetensors file takes the experiment's model, and a change of what "
    "it computes is refused") {
  require_torch();
  ablate::test::registry();
  TempDir d;
  peer("make " + (d / "hf") + " --arch gpt2 --seed 25 --d 32 --heads 4 --layers 2 --context 32");
  // model.safetensors alone (Hugging Face's names, no config.json): the experiment's model: section
  // says what it is; the same start as from the whole directory.
  ablate_cmd("run " +
             experiment(d, "init_from: " + (d / "hf/model.safetensors") + "\n" + kGpt2Model, 1) +
             " -o " + (d / "bare") + " -q");
  ablate_cmd("run " + experiment(d, "init_from: " + (d / "hf") + "\n", 1) + " -o " + (d / "dir") +
             " -q");
  const ablate::RunData bare = ablate::read_run_file(d / "bare/run.h5"),
                        dir = ablate::read_run_file(d / "dir/run.h5");
  CHECK(bare.str_attrs.at("init_from") == d / "hf/model.safetensors");
  CHECK(bare.tables.at("eval").at("val_loss").front() ==
        dir.tables.at("eval").at("val_loss").front());
  const std::string out = ablate_cmd(
      "run " +
          experiment(d, "init_from: " + (d / "hf") +
                            "\nmodel: {ffn: {type: gelu, approximate: none, bias: true}}\n") +
          " -o " + (d / "r") + " -q",
      1);
  // approximate: none is GELU with erf, config.json says gelu_new.
  CHECK(contains(out,
                 "the experiment changes what the model of the file computes: "
                 "model.ffn.approximate is none, the file's "
                 "is tanh"));
}

TEST_CASE("interop/checkpoints record shapes, read version 1, and name a transposed parameter") {
  ablate::test::registry();
  ablate::Checkpoint ck;
  ck.tensors["w"] = {1, 2, 3, 4, 5, 6};
  ck.shapes["w"] = {2, 3};
  ck.ints["step"] = 1;
  std::vector<uint8_t> b = ablate::serialize_checkpoint(ck);
  CHECK(ablate::parse_checkpoint(b.data(), b.size(), "v2").shapes.at("w") ==
        std::vector<int64_t>{2, 3});
  // The same entries without the shape, written as version 1 (as ablate before version 2).
  ablate::Checkpoint old = ck;
  old.shapes.clear();
  b = ablate::serialize_checkpoint(old);
  b[8] = 1;
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
  };
  put32(20, ablate::crc32(b.data(), 20));
  put32(b.size() - 4, ablate::crc32(b.data(), b.size() - 4));
  const ablate::Checkpoint v1 = ablate::parse_checkpoint(b.data(), b.size(), "v1");
  CHECK(v1.tensors.at("w") == ck.tensors.at("w"));
  CHECK(v1.shapes.empty());
  ablate::Checkpoint bad = ck;
  bad.shapes["w"] = {4, 2};
  CHECK(contains(error_of([&] { ablate::serialize_checkpoint(bad); }),
                 "tensor 'w' has 6 values, but its shape (4, 2) has 8 elements"));
  // A run's checkpoint whose parameter is stored transposed: named, nothing restored.
  TempDir d;
  ablate_cmd("run " + experiment(d, kGpt2Model, 1) + " -o " + (d / "run") + " -q");
  ablate::Checkpoint run_ck = ablate::read_checkpoint(d / "run/checkpoint.ckpt");
  CHECK(run_ck.shapes.at("param/blocks.0.attn.qkv.weight") == std::vector<int64_t>{32, 96});
  run_ck.shapes["param/blocks.0.attn.qkv.weight"] = {96, 32};
  ablate::write_checkpoint(d / "run/checkpoint.ckpt", run_ck);
  CHECK(contains(
      load_error(d / "run"),
      "parameter 'blocks.0.attn.qkv.weight' has shape (96, 32) in the checkpoint, the model "
      "needs (32, 96): transposed"));
}

TEST_CASE(
    "interop/the gpt2 tokenizer exports as GPT-2's vocab.json and merges.txt, and GPT-2's files "
    "import") {
  const ablate::test::Gpt2Reference& ref = ablate::test::gpt2_reference();
  if (!ref.ok()) {
    if (ref.npm_missing) FAIL(ref.problem);
    MESSAGE("skipped: " << ref.problem);
    return;
  }
  require_torch();
  ablate::test::registry();
  TempDir d;
  const std::string model = "tokenizer: {type: gpt2, encoder: " + ref.files() +
                            "/encoder.json, merges: " + ref.files() + "/vocab.bpe}\n" + kGpt2Model;
  std::string exp = experiment(d, model, 1);
  {  // the experiment's own tokenizer line replaces the byte tokenizer's
    std::string text = ablate::test::read_file(exp);
    text.replace(text.find("tokenizer: byte\n"), 16, "");
    d.write("exp.yaml", text);
  }
  ablate_cmd("run " + exp + " -o " + (d / "run") + " -q");
  ablate_cmd("export " + (d / "run") + " --format hf -o " + (d / "hf"));
  CHECK(nlohmann::json::parse(ablate::test::read_file(d / "hf/vocab.json")) ==
        nlohmann::json::parse(ablate::test::read_file(ref.files() + "/encoder.json")));
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
      if (!line.empty() && line.rfind("#version", 0) != 0) out.push_back(line);
    return out;
  };
  const auto ours = lines(ablate::test::read_file(d / "hf/merges.txt")),
             theirs = lines(ablate::test::read_file(ref.files() + "/vocab.bpe"));
  CHECK(ours.size() == 50000);
  CHECK(ours == theirs);
  // Read back (from the metadata), as a directory and as ablate's own safetensors file.
  const std::vector<int32_t> hello{15496, 616, 1438, 318};
  CHECK(ablate::load_run(d / "hf").tokenizer->encode("Hello my name is") == hello);
  ablate_cmd("export " + (d / "run") + " --format safetensors -o " + (d / "w.safetensors"));
  CHECK(ablate::load_run(d / "w.safetensors").tokenizer->encode("Hello my name is") == hello);
  // A PyTorch GPT-2 with GPT-2's files (vocab.json, merges.txt): tiktoken's ids.
  peer("make " + (d / "pt") +
       " --arch gpt2 --seed 26 --d 16 --heads 2 --layers 1 --context 16 --vocab 50257 "
       "--tokenizer-files " +
       ref.files());
  auto run = ablate::load_run(d / "pt");
  CHECK(run.tokenizer->encode("Hello my name is") == std::vector<int32_t>{15496, 616, 1438, 318});
}

TEST_CASE("interop/SentencePiece's tokenizer.model imports with SentencePiece's ids, and exports") {
  require_torch();
  if (run_command(kPython + " -c 'import sentencepiece'").status != 0)
    FAIL("python3-sentencepiece is not installed (tools/bootstrap.sh --tests)");
  ablate::test::registry();
  TempDir d;
  peer("make " + (d / "llama") +
       " --arch llama --seed 27 --d 32 --heads 4 --kv-heads 1 --layers 1 --context 32 --vocab 300");
  const std::string text = "ROMEO: But soft, what light";
  const auto r = run_command(
      kPython + " -c \"import sentencepiece as spm; spm.SentencePieceTrainer.train(input='" +
      std::string(ABLATE_TEST_DATA_DIR) + "/shakespeare_16k.txt', model_prefix='" +
      (d / "llama/tokenizer") +
      "', vocab_size=300, model_type='bpe', minloglevel=2); p = "
      "spm.SentencePieceProcessor(model_file='" +
      (d / "llama/tokenizer.model") + "'); print(','.join(map(str, p.encode('" + text + "'))))\"");
  INFO(r.output);
  REQUIRE(r.status == 0);
  auto run = ablate::load_run(d / "llama");
  CHECK(joined(run.tokenizer->encode(text)) == r.output.substr(0, r.output.find('\n')));
  CHECK(run.tokenizer->vocab_size() == 300);
  // The other way: a run whose sentencepiece tokenizer was trained by ablate exports its
  // tokenizer.model (read by SentencePiece itself), and its state (binary) in base64.
  const std::string exp = experiment(d, kLlamaModel, 1);
  std::string yaml = ablate::test::read_file(exp);
  yaml.replace(yaml.find("tokenizer: byte\n"), 16,
               "tokenizer: {type: sentencepiece, train: {vocab_size: 400}}\n");
  d.write("exp.yaml", yaml);
  ablate_cmd("run " + exp + " -o " + (d / "run") + " -q");
  const std::string out = ablate_cmd("export " + (d / "run") + " --format hf -o " + (d / "hf"));
  CHECK(contains(out, "tokenizer 'sentencepiece': tokenizer.model, tokenizer_config.json"));
  const auto theirs = run_command(
      kPython + " -c \"import sentencepiece as spm; p = spm.SentencePieceProcessor(model_file='" +
      (d / "hf/tokenizer.model") + "'); print(','.join(map(str, p.encode('" + text + "'))))\"");
  REQUIRE(theirs.status == 0);
  auto trained = ablate::load_run(d / "run");
  auto back = ablate::load_run(d / "hf");
  CHECK(joined(trained.tokenizer->encode(text)) ==
        theirs.output.substr(0, theirs.output.find('\n')));
  CHECK(joined(back.tokenizer->encode(text)) == joined(trained.tokenizer->encode(text)));
  CHECK(ablate::SafetensorsFile::open(d / "hf/model.safetensors")
            .metadata()
            .count("ablate_tokenizer_base64") == 1);
}
