// Run inspection: PCA and t-SNE on data with a known answer, the new SVG charts, the
// inspection of a tiny trained run (attention rows, causal zeros, positional probes
// through the interface), the HTML page in headless Chromium, the HDF5 file read by h5py,
// and the CLI's errors on bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include <H5Cpp.h>

#include "ablate/experiment.hpp"
#include "ablate/inspect.hpp"
#include "ablate/svg.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using ablate::test::TempDir;

namespace {

using ablate::test::count;

// No model.positional: the default (learned) must still be named on the page.
const char* kTiny = R"(name: tiny-inspect
seed: 3
data: {path: shakespeare_16k.txt, train_fraction: 0.9}
tokenizer: char
model:
  d_model: 32
  n_heads: 2
  n_layers: 2
  context: 24
  attention: causal
  ffn: relu
train: {steps: 80, batch_size: 16, eval_every: 40, eval_batches: 2, checkpoint_every: 80, log_every: 20, threads: 2}
optimizer: {type: adamw, lr: 1.0e-2}
sample: {tokens: 10, prompt: "A", temperature: 0.8}
)";

// Trains the experiment `yaml` in dir/run (about a second for kTiny); returns the run directory.
std::string train(const TempDir& dir, const std::string& yaml) {
  ablate::test::registry();
  setenv("ABLATE_DATA_PATH", ABLATE_TEST_DATA_DIR, 1);
  ablate::RunOptions ro;
  ro.out_dir = dir / "run";
  ro.quiet = true;
  return ablate::run_experiment(ablate::Experiment::load(dir.write("experiment.yaml", yaml), {}),
                                ro)
      .run_dir;
}

// One tiny trained run for the whole file.
const std::string& tiny_run() {
  static TempDir dir;
  static std::string run = train(dir, kTiny);
  return run;
}

const std::string kText = "ROMEO:\nBut soft, what";

// Inspection of kText with a small t-SNE.
ablate::InspectOptions text_options(int tsne_iterations) {
  ablate::InspectOptions o;
  o.text = kText;
  o.perplexity = 5;
  o.tsne_iterations = tsne_iterations;
  return o;
}

}  // namespace

TEST_CASE("inspect/PCA finds the direction of a line and t-SNE keeps clusters apart") {
  // Points along (1, 2, 0, 0) with a little noise in the other directions.
  ablate::Rng rng(5);
  Eigen::MatrixXd line(40, 4);
  for (int i = 0; i < 40; ++i) {
    const double t = i - 20.0;
    line.row(i) << t, 2 * t, 0.01 * rng.normal(), 0.01 * rng.normal();
  }
  auto p = ablate::pca_2d(line);
  CHECK(p.explained[0] > 0.999);
  CHECK(p.explained[1] < 0.001);
  // PC 1 is the centred position along the line, |(1, 2)| = sqrt(5); the sign is fixed
  // by the largest loading (the 2) being positive.
  for (int i = 0; i < 40; ++i)
    CHECK(p.points(i, 0) == doctest::Approx((i - 20.0 + 0.5) * std::sqrt(5.0)).epsilon(1e-3));

  // Two clusters of 15 points in 10-D, far apart: every point's map neighbour is in its cluster.
  Eigen::MatrixXd x(30, 10);
  for (int i = 0; i < 30; ++i)
    for (int k = 0; k < 10; ++k) x(i, k) = rng.normal() + (i < 15 ? 0.0 : 12.0);
  ablate::TsneOptions o;
  o.perplexity = 5;
  o.seed = 3;
  auto t = ablate::tsne_2d(x, o);
  REQUIRE(t.points.rows() == 30);
  for (int i = 0; i < 30; ++i) {
    int best = -1;
    double bd = 1e300;
    for (int j = 0; j < 30; ++j)
      if (j != i && (t.points.row(i) - t.points.row(j)).squaredNorm() < bd)
        bd = (t.points.row(i) - t.points.row(j)).squaredNorm(), best = j;
    CHECK((best < 15) == (i < 15));
  }
  // ...and the clusters are far apart compared with their size.
  double within = 0, between = 0;
  for (int i = 0; i < 30; ++i)
    for (int j = 0; j < 30; ++j)
      ((i < 15) == (j < 15) ? within : between) += (t.points.row(i) - t.points.row(j)).norm();
  within /= 2 * 15 * 14;
  between /= 2 * 15 * 15;
  CHECK(between > 4 * within);
  CHECK(t.kl > 0);
  CHECK(t.kl < 0.5);
  // Deterministic for a seed.
  CHECK(ablate::tsne_2d(x, o).points.isApprox(t.points));
  o.perplexity = 10;  // (30 - 1) / 3 = 9.67
  CHECK_THROWS_WITH_AS(ablate::tsne_2d(x, o), doctest::Contains("choose a value in [1, 9.6"),
                       ablate::Error);
}

TEST_CASE("inspect/svg bar chart, labelled scatter plot, heat map with blank zeros") {
  ablate::svg::BarChart b;
  b.title = "next";
  b.labels = {"e", "<a>"};
  b.values = {0.5, 0.25};
  const std::string bars = ablate::svg::bar_chart(b);
  CHECK(count(bars, "<rect class=\"bar\"") == 2);
  CHECK(bars.find("data-label=\"&lt;a&gt;\" data-value=\"0.25\"") != std::string::npos);
  CHECK(bars.find("<a>") == std::string::npos);

  ablate::svg::ScatterPlot s;
  s.xs = {0, 1, 2};
  s.ys = {1, 0, NAN};
  s.labels = {"a", "\\n", "c"};
  const std::string sc = ablate::svg::scatter_plot(s);
  CHECK(count(sc, "<circle class=\"point\"") == 2);  // the NaN point is left out
  CHECK(sc.find(">\\n</text>") != std::string::npos);
  // A title that fits is set at the full 14 px, centred on the plot; a long one stays inside.
  s.title = "embeddings";
  const std::string sc_titled = ablate::svg::scatter_plot(s);
  CHECK(sc_titled.find("font-size=\"14\" font-weight=\"bold\">embeddings</text>") !=
        std::string::npos);
  s.title = std::string(120, 'w');
  const std::string sc_long = ablate::svg::scatter_plot(s);
  const size_t title_at = sc_long.find("<text x=\"");
  REQUIRE(title_at != std::string::npos);
  CHECK(std::stod(sc_long.substr(title_at + 9)) >= static_cast<double>(s.width) / 2 - 1);

  ablate::svg::HeatMap h;
  h.row_labels = h.col_labels = {"a", "b"};
  h.values = {{1, 0}, {0.4, 0.6}};
  h.zero_is_blank = true;
  h.show_values = false;
  h.min = 0;
  const std::string hm = ablate::svg::heat_map(h);
  CHECK(count(hm, "<rect class=\"cell\"") == 4);
  CHECK(hm.find("data-row=\"0\" data-col=\"1\" data-value=\"0\"") != std::string::npos);
  CHECK(count(hm, "fill=\"#ffffff\"/>") == 2);  // the background and the exact zero, no other cell
  CHECK(hm.find("fill=\"" + ablate::svg::viridis(1) + "\"") != std::string::npos);
  // A title wider than the grid starts inside the image (centred text: x >= half its width).
  h.title = std::string(60, 'w');
  const std::string titled = ablate::svg::heat_map(h);
  const size_t at = titled.find("<text x=\"");
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(titled.substr(at + 9)) >= 4.0 * 60);
}

TEST_CASE(
    "inspect/a trained causal run: attention rows, zeros above the diagonal, positional probes") {
  auto run = ablate::load_run(tiny_run());
  auto in = ablate::inspect_run(run, text_options(300));
  const int64_t T = static_cast<int64_t>(kText.size());
  REQUIRE(in.time == T);
  REQUIRE(in.n_layers == 2);
  REQUIRE(in.n_heads == 2);
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double sum = 0;
        for (int64_t j = 0; j < T; ++j) {
          if (j > i) CHECK(in.weight(l, h, i, j) == 0.0f);
          sum += in.weight(l, h, i, j);
        }
        CHECK(sum == doctest::Approx(1).epsilon(1e-4));
      }
  double total = 0;
  for (float p : in.next_probs) total += p;
  CHECK(total == doctest::Approx(1).epsilon(1e-4));
  CHECK(std::find(in.vocab_labels.begin(), in.vocab_labels.end(), "\\n") != in.vocab_labels.end());
  CHECK(std::find(in.vocab_labels.begin(), in.vocab_labels.end(), "\xE2\x90\xA3") !=
        in.vocab_labels.end());
  CHECK(in.embedding.tsne.points.rows() == in.vocab);
  CHECK(in.head.tsne.points.rows() == in.vocab);
  CHECK_FALSE(in.tied);
  CHECK(in.positional_type == "learned");

  // The run's own learned vectors, and references found through the registry.
  std::map<std::string, const ablate::PositionalView*> views;
  for (const auto& v : in.positional) views[v.variant + "/" + v.key] = &v;
  REQUIRE(views.count("learned/cosine"));
  CHECK_FALSE(views["learned/cosine"]->reference);
  const auto& learned = views["learned/cosine"]->values;
  CHECK(learned.rows() == 24);  // min(context, 64) positions
  for (int i = 0; i < 24; ++i) CHECK(learned(i, i) == doctest::Approx(1));
  REQUIRE(views.count("sinusoidal/cosine"));
  CHECK(views["sinusoidal/cosine"]->reference);
  REQUIRE(views.count("rope/rotary_kernel"));
  REQUIRE(views.count("alibi/bias"));
  CHECK(views.count("none/cosine") == 0);
  // RoPE's kernel on all-ones vectors: cos(q_i, k_j) = mean over pairs p of cos((i - j) theta_p),
  // theta_p = 10000^(-2p/HS), HS = 16: a function of i - j only.
  const auto& rope = views["rope/rotary_kernel"]->values;
  for (int i = 0; i < 24; ++i)
    for (int j = 0; j < 24; ++j) {
      double expect = 0;
      for (int p = 0; p < 8; ++p)
        expect += std::cos((i - j) * std::pow(10000.0, -2.0 * p / 16)) / 8;
      CHECK(rope(i, j) == doctest::Approx(expect).epsilon(1e-4));
    }
  // Sinusoidal similarity also depends on the distance only (up to float rounding).
  const auto& sin = views["sinusoidal/cosine"]->values;
  CHECK(sin(3, 7) == doctest::Approx(sin(10, 14)).epsilon(1e-4));
  CHECK(sin(0, 0) == doctest::Approx(1));
  const auto& alibi = views["alibi/bias"]->values;
  CHECK(alibi.rows() == 2);
  CHECK(alibi(0, 3) == doctest::Approx(-3 * std::exp2(-4.0)));  // head 1 of 2: m = 2^(-8/2)
}

TEST_CASE("inspect/a prefix-LM run reads the text whole, as generation reads a prompt") {
  TempDir dir;
  const std::string yaml = std::regex_replace(std::string(kTiny), std::regex("attention: causal"),
                                              "attention: prefix_lm");
  REQUIRE(yaml.find("prefix_lm") != std::string::npos);
  auto run = ablate::load_run(train(dir, yaml));
  auto in = ablate::inspect_run(run, text_options(50));
  const int64_t T = static_cast<int64_t>(kText.size());
  // Every position sees the whole text: the first attends to the last (causal: weight 0).
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t h = 0; h < 2; ++h) {
      CHECK(in.weight(l, h, 0, T - 1) > 0.0f);
      double sum = 0;
      for (int64_t j = 0; j < T; ++j) sum += in.weight(l, h, 0, j);
      CHECK(sum == doctest::Approx(1).epsilon(1e-4));
    }
}

TEST_CASE("inspect/the page renders in headless Chromium and the HDF5 file reads in h5py") {
  TempDir d;
  const std::string run = tiny_run();
  auto r = ablate::test::run_command(ablate::test::ablate_binary() + " inspect " + run +
                                     " --text 'ROMEO:\nBut soft, what' --perplexity 5 -o " +
                                     (d / "inspect.html"));
  CAPTURE(r.output);
  REQUIRE(r.status == 0);
  REQUIRE(fs::exists(d / "inspect.h5"));
  const std::string html = ablate::test::read_file(d / "inspect.html");
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("<link") == std::string::npos);  // self-contained: nothing fetched
  CHECK(html.find(" src=") == std::string::npos);

  if (!ablate::test::have_chromium()) {
    MESSAGE(
        "chromium is not installed: skipping the rendering check (tools/bootstrap.sh installs it)");
  } else {
    auto dom = ablate::test::run_command(ablate::test::chromium_flags(d) + "--dump-dom file://" +
                                         (d / "inspect.html") + " 2>/dev/null");
    REQUIRE(dom.status == 0);
    const std::string& html_dom = dom.output;
    // Every expected plot: 2 layers x 2 heads, the next-token bars, four token maps, the
    // learned position similarity and the references.
    CHECK(count(html_dom, "data-plot=\"attention-l") == 4);
    for (const char* kind :
         {"next-token", "embedding-pca", "embedding-tsne", "lm-head-pca", "lm-head-tsne",
          "positional-learned-cosine", "positional-sinusoidal-cosine",
          "positional-rope-rotary_kernel", "positional-alibi-bias"})
      CHECK_MESSAGE(count(html_dom, std::string("data-plot=\"") + kind + "\"") == 1, kind);
    CHECK(count(html_dom, "<rect class=\"bar\"") == 20);
    // Labels: the input's newline and space are visible in the maps.
    CHECK(html_dom.find("data-label=\"\\n\"") != std::string::npos);
    CHECK(html_dom.find("data-label=\"\xE2\x90\xA3\"") != std::string::npos);
    // The attention maps of this causal model are zero, and blank, above the diagonal.
    const int T = 21;
    std::regex cell(
        "<rect class=\"cell\" data-row=\"(\\d+)\" data-col=\"(\\d+)\" "
        "data-value=\"([^\"]+)\"[^>]*fill=\"([^\"]+)\"");
    const size_t a0 = html_dom.find("id=\"attention\""), a1 = html_dom.find("id=\"embeddings\"");
    REQUIRE(a0 != std::string::npos);
    REQUIRE(a1 > a0);
    const std::string attention = html_dom.substr(a0, a1 - a0);
    int above = 0, above_nonzero = 0, below = 0, below_zero = 0;
    for (auto it = std::sregex_iterator(attention.begin(), attention.end(), cell);
         it != std::sregex_iterator(); ++it) {
      const int i = std::stoi((*it)[1]), j = std::stoi((*it)[2]);
      const std::string v = (*it)[3], fill = (*it)[4];
      if (j > i) {
        ++above;
        if (v != "0" || fill != "#ffffff") ++above_nonzero;
      } else {
        ++below;
        if (v == "0") ++below_zero;
      }
    }
    CHECK(above == 4 * T * (T - 1) / 2);
    CHECK(above_nonzero == 0);
    CHECK(below == 4 * T * (T + 1) / 2);
    CHECK(below_zero == 0);

    auto shot = ablate::test::run_command(
        ablate::test::chromium_flags(d) + "--screenshot=" + (d / "inspect.png") +
        " --window-size=1200,1600 file://" + (d / "inspect.html"));
    CAPTURE(shot.output);
    REQUIRE(fs::exists(d / "inspect.png"));
    d.write("png_stats.py", ablate::test::kPngStats);
    auto st = ablate::test::run_command("/usr/bin/python3 " + (d / "png_stats.py") + " " +
                                        (d / "inspect.png"));
    CAPTURE(st.output);
    REQUIRE(st.status == 0);
    std::istringstream in(st.output);
    long w = 0, h = 0, nonwhite = 0, blue = 0, orange = 0, yellow = 0;
    in >> w >> h >> nonwhite >> blue >> orange >> yellow;
    CHECK(w == 1200);
    CHECK(nonwhite > w * h / 20);
    CHECK(blue > 100);  // the bars
    CHECK(yellow >
          50);  // the brightest attention cells (position 0 attends to itself with weight 1)
  }

  if (ablate::test::run_command("/usr/bin/python3 -c 'import h5py'").status != 0) {
    MESSAGE("h5py is not installed: skipping the HDF5 check");
    return;
  }
  d.write("check.py", R"(import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], 'r')
assert f.attrs['format'] == 'ablate-inspect', f.attrs['format']
a = f['attention'][...]
assert a.shape == (2, 2, 21, 21), a.shape
assert np.all(np.triu(a, 1) == 0), 'weights above the diagonal'
assert np.allclose(a.sum(-1), 1, atol=1e-4), 'rows do not sum to 1'
p = f['next_token/probs'][...]
assert abs(p.sum() - 1) < 1e-4
labels = [s.decode() for s in f['tokens/labels'][...]]
assert labels[:7] == ['R', 'O', 'M', 'E', 'O', ':', '\\n'], labels
assert labels[10] == '\u2423', labels
V = len(f['vocab/labels'])
assert f['embedding/token/pca'].shape == (V, 2)
assert f['embedding/token/tsne'].shape == (V, 2)
e = f['embedding/token/pca_explained'][...]
assert e.shape == (2,) and 0 < e[1] <= e[0] < 1, e
assert f['embedding/lm_head/matrix'].shape == (V, 32)
c = f['positional/learned/cosine'][...]
assert c.shape == (24, 24) and np.allclose(np.diag(c), 1)
assert f['positional/learned/vectors'].shape == (24, 32)
assert f['positional/rope'].attrs['reference'] == 1
print('ok', V)
)");
  auto py =
      ablate::test::run_command("/usr/bin/python3 " + (d / "check.py") + " " + (d / "inspect.h5"));
  CAPTURE(py.output);
  CHECK(py.status == 0);
  CHECK(py.output.rfind("ok ", 0) == 0);
}

TEST_CASE(
    "inspect/an encoding that reads the tokens is probed on the text too (place_value on a "
    "problem)") {
  TempDir d;
  auto gen = ablate::test::run_command(
      ablate::test::ablate_binary() + " data arithmetic --ops +- --train " + (d / "train.txt") +
      " --test " + (d / "test.txt") + " --train-count 400 --test-count 10 --seed 5");
  REQUIRE_MESSAGE(gen.status == 0, gen.output);
  const std::string run = train(
      d,
      "name: pv\nseed: 2\ndata: {path: " + (d / "train.txt") +
          ", train_fraction: 0.9, windows: lines, fill: pad, score_after: \"=\"}\n"
          "tokenizer: char\nmodel: {d_model: 16, n_heads: 2, n_layers: 1, context: 36, positional: "
          "{type: place_value, decimals: 2}, ffn: relu}\n"
          "train: {steps: 4, batch_size: 8, eval_every: 4, eval_batches: 1, checkpoint_every: 4}\n"
          "optimizer: {type: adamw, lr: 1.0e-3}\nsample: {tokens: 0}\n");
  // 0 '$', 1 '(', 2-5 zeros, 6 '7' (hundreds), 7 '5', 8 '3' (units), 9 '.', 10 '7' (tenths),
  // 11 '8', 12 '+', 13-19 zeros, 20 '9' (hundreds), 21 '1', 22 '0' (units), 23 ')', 24 '='.
  ablate::InspectOptions o;
  o.text = "$(0000753.78+0000000910)=";
  o.perplexity = 3;
  o.tsne_iterations = 50;
  auto loaded = ablate::load_run(run);
  auto in = ablate::inspect_run(loaded, o);
  std::map<std::string, const ablate::PositionalView*> views;
  for (const auto& v : in.positional) views[v.variant + "/" + v.key] = &v;
  REQUIRE(views.count("place_value/cosine"));
  REQUIRE(views.count("place_value/cosine_text"));
  for (const auto& view : views)  // only the run's
    CHECK_MESSAGE((view.second->key != "cosine_text" || view.second->variant == "place_value"),
                  view.first);
  const auto& text = *views["place_value/cosine_text"];
  const auto& bare = *views["place_value/cosine"];
  REQUIRE(text.vectors.rows() == 25);
  CHECK(text.row_labels[6] == "7");
  CHECK(text.row_labels[20] == "9");
  // On the text each digit adds its place row where the bare probe adds the "other" row:
  // the difference is the same for the two hundreds, the same for the two units, and
  // nothing for a bracket.
  auto place = [&](int i) -> Eigen::VectorXd {
    return (text.vectors.row(i) - bare.vectors.row(i)).transpose();
  };
  const double scale = place(6).norm();
  REQUIRE(scale > 0);
  CHECK((place(6) - place(20)).norm() < 1e-5 * scale);
  CHECK((place(8) - place(22)).norm() < 1e-5 * scale);
  CHECK((place(6) - place(8)).norm() > 1e-2 * scale);
  CHECK((place(6) - place(10)).norm() > 1e-2 * scale);
  CHECK(place(1).norm() < 1e-6 * scale);
  CHECK(text.values(6, 6) == doctest::Approx(1));

  // The command writes it to the HDF5 file and the page.
  auto r = ablate::test::run_command(ablate::test::ablate_binary() + " inspect " + run +
                                     " --text '" + o.text + "' -o " + (d / "pv.html"));
  CAPTURE(r.output);
  REQUIRE(r.status == 0);
  CHECK(ablate::test::read_file(d / "pv.html")
            .find("place_value: cosine similarity of position vectors on the text") !=
        std::string::npos);
  if (ablate::test::run_command("/usr/bin/python3 -c 'import h5py'").status != 0) return;
  auto py = ablate::test::run_command(
      "/usr/bin/python3 -c \"import h5py; f = h5py.File('" + (d / "pv.h5") +
      "', 'r'); g = f['positional/place_value']; "
      "print(g['cosine_text'].shape, g['cosine_text_vectors'].shape, g['vectors'].shape)\"");
  CAPTURE(py.output);
  CHECK(py.output == "(25, 25) (25, 16) (36, 16)\n");
}

TEST_CASE("inspect/--h5 names the numbers' file and a tied head is drawn once") {
  TempDir d;
  auto r = ablate::test::run_command(ablate::test::ablate_binary() + " inspect " + tiny_run() +
                                     " --text 'ROMEO:' --top 5 -o " + (d / "page.html") + " --h5 " +
                                     (d / "numbers.h5"));
  CAPTURE(r.output);
  REQUIRE(r.status == 0);
  CHECK(fs::exists(d / "numbers.h5"));
  CHECK_FALSE(fs::exists(d / "page.h5"));
  const std::string html = ablate::test::read_file(d / "page.html");
  CHECK(html.find("<code>numbers.h5</code>") != std::string::npos);
  CHECK(count(html, "<rect class=\"bar\"") == 5);

  // The same run with the LM head tied to the embedding: no separate LM-head maps.
  auto run = ablate::load_run(tiny_run());
  ablate::InspectOptions o;
  o.text = "ROMEO:";
  o.perplexity = 5;
  o.tsne_iterations = 50;
  auto in = ablate::inspect_run(run, o);
  in.tied = true;
  const std::string tied = ablate::render_inspection(in);
  CHECK(count(tied, "data-plot=\"lm-head-") == 0);
  CHECK(tied.find("The LM head is tied to the token embedding") != std::string::npos);
  CHECK(count(ablate::render_inspection(ablate::inspect_run(run, o)), "data-plot=\"lm-head-") == 2);
}

TEST_CASE("inspect/bad input names the flag, the value and a fix") {
  TempDir d;
  const std::string run = tiny_run(), bin = ablate::test::ablate_binary() + " inspect ";
  auto unknown =
      ablate::test::run_command(bin + run + " --text 'caf\xC3\xA9 ~' -o " + (d / "a.html"));
  CHECK(unknown.status != 0);
  CHECK(unknown.output.find("--text") != std::string::npos);
  CHECK(unknown.output.find("'\xC3\xA9'") != std::string::npos);
  CHECK(unknown.output.find("use only characters of the training data") != std::string::npos);

  auto longer = ablate::test::run_command(bin + run + " --text '" + std::string(30, 'a') + "' -o " +
                                          (d / "a.html"));
  CHECK(longer.status != 0);
  CHECK(longer.output.find("30 tokens long, longer than the model's context of 24") !=
        std::string::npos);

  auto perp =
      ablate::test::run_command(bin + run + " --text ab --perplexity 400 -o " + (d / "a.html"));
  CHECK(perp.status == 2);
  CHECK(perp.output.find("--perplexity 400 is too large") != std::string::npos);
  CHECK(perp.output.find("choose e.g. --perplexity") != std::string::npos);

  auto nan =
      ablate::test::run_command(bin + run + " --text ab --perplexity nan -o " + (d / "a.html"));
  CHECK(nan.status == 2);

  auto no_ckpt =
      ablate::test::run_command(bin + d.path.string() + " --text ab -o " + (d / "a.html"));
  CHECK(no_ckpt.status != 0);
  CHECK(no_ckpt.output.find("no checkpoint here") != std::string::npos);

  auto no_dir = ablate::test::run_command(bin + run + " --text ab -o " + (d / "missing/a.html"));
  CHECK(no_dir.status == 2);
  CHECK(no_dir.output.find("-o " + (d / "missing/a.html") + ": the directory") !=
        std::string::npos);
  CHECK(no_dir.output.find("mkdir -p") != std::string::npos);

  auto no_text = ablate::test::run_command(bin + run);
  CHECK(no_text.status == 2);
  CHECK(no_text.output.find("missing --text") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "a.html"));
}

TEST_CASE(
    "inspect/generate refuses characters the tokenizer does not know, as inspect does, its output "
    "ends with a newline") {
  const std::string run = tiny_run(), bin = ablate::test::ablate_binary() + " generate ";
  auto unknown = ablate::test::run_command(bin + run + " --prompt 'caf\xC3\xA9' -n 3");
  CHECK(unknown.status == 1);
  CHECK(unknown.output.find(
            "the prompt has 1 character the run's tokenizer does not know: '\xC3\xA9'") !=
        std::string::npos);
  CHECK(unknown.output.find("--allow-unknown") != std::string::npos);
  // With --allow-unknown: a warning on stderr, the text (unknown symbol as U+FFFD) on stdout.
  auto allowed = ablate::test::run_command(
      "(" + bin + run + " --prompt 'caf\xC3\xA9' -n 3 --allow-unknown 2>/dev/null)");
  CHECK(allowed.status == 0);
  CHECK(allowed.output.rfind("caf\xEF\xBF\xBD", 0) == 0);
  auto warned = ablate::test::run_command(
      "(" + bin + run + " --prompt 'caf\xC3\xA9' -n 3 --allow-unknown 2>&1 >/dev/null)");
  CHECK(warned.output.find("warning: the prompt has 1 character") != std::string::npos);
  for (const char* n : {"0", "5"}) {
    auto ok = ablate::test::run_command("(" + bin + run + " --prompt ab -n " + n + " 2>/dev/null)");
    CAPTURE(ok.output);
    CHECK(ok.status == 0);
    REQUIRE_FALSE(ok.output.empty());
    CHECK(ok.output.back() == '\n');
    CHECK(ok.output.rfind("ab", 0) == 0);
  }
}

TEST_CASE(
    "inspect/--precision bf16 computes in bf16, close to float32 and not equal, and says so, other "
    "values are an error") {
  auto run = ablate::load_run(tiny_run());
  ablate::InspectOptions o = text_options(50);
  struct Restore {
    ~Restore() { ablate::set_default_precision(ablate::Precision::float32); }
  } restore;
  ablate::set_default_precision(ablate::Precision::bf16);
  const ablate::Inspection lo = ablate::inspect_run(run, o);
  ablate::set_default_precision(ablate::Precision::float32);
  const ablate::Inspection hi = ablate::inspect_run(run, o);
  CHECK(lo.precision == "bf16");
  CHECK(hi.precision == "float32");
  double worst = 0;
  for (size_t i = 0; i < hi.attention.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(lo.attention[i] - hi.attention[i])));
  for (size_t i = 0; i < hi.next_probs.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(lo.next_probs[i] - hi.next_probs[i])));
  INFO("largest difference of an attention weight or next-token probability: " << worst);
  CHECK(worst > 0);     // the products read rounded values
  CHECK(worst < 0.01);  // roundings of 2^-9 of logits of a few units move probabilities by ~0.1%
  CHECK(ablate::render_inspection(lo).find("computed in <code>bf16</code>") != std::string::npos);

  TempDir d;
  const std::string bin = ablate::test::ablate_binary() + " inspect " + tiny_run() +
                          " --text 'ROMEO:' --tsne-iterations 50 -o " + (d / "p.html");
  auto ok = ablate::test::run_command(bin + " --precision bf16");
  CAPTURE(ok.output);
  REQUIRE(ok.status == 0);
  CHECK(ok.output.find("heads, bf16") != std::string::npos);
  H5::H5File f(d / "p.h5", H5F_ACC_RDONLY);
  std::string attr;
  H5::Attribute a = f.openGroup("/").openAttribute("precision");
  a.read(a.getStrType(), attr);
  CHECK(attr == "bf16");
  auto bad = ablate::test::run_command(bin + " --precision fp16");
  CHECK(bad.status == 2);
  CHECK(bad.output.find("'fp16' is not a precision; use float32 or bf16") != std::string::npos);
}
