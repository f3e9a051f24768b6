// Looking inside a trained run (ablate inspect): attention weights of every layer and head
// on a text, the next-token distribution after it, 2-D maps (PCA, t-SNE) of the token
// embedding and of the LM head, and similarity maps of the positional encoding, built
// through the positional interface only (added vectors, rotated queries/keys, biases).
// Rendered as one self-contained HTML page (svg.hpp) and written to HDF5.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ablate/projection.hpp"
#include "ablate/trainer.hpp"

namespace ablate {

struct InspectOptions {
  std::string text;        // the input; 1..context tokens
  int64_t top = 20;        // bars of the next-token chart
  double perplexity = 30;  // t-SNE
  uint64_t seed = 1;       // t-SNE initial map
  int tsne_iterations = 1000;
  int64_t map_tokens = 500;  // tokens drawn in the maps and given to t-SNE (PCA uses all)
  int64_t positions = 0;     // positional maps over positions 0..P-1 (0: min(context, 64))
};

// A map of one (V, C) matrix, a row per token.
struct TokenMap {
  std::string name;            // "token embedding", "LM head"
  Eigen::MatrixXd matrix;      // (V, C)
  std::vector<int32_t> shown;  // ids drawn and given to t-SNE (all, or a subsample)
  Projection pca;              // (V, 2): every token
  Projection tsne;             // (shown, 2)
};

// One heat map of the positional encoding, with the numbers behind it.
struct PositionalView {
  std::string key;      // HDF5 name under /positional/<variant>/: "cosine", "rotary_kernel", "bias"
  std::string variant;  // registered name of the encoding ("" if unknown)
  std::string title, caption;
  std::vector<std::string> row_labels, col_labels;
  Eigen::MatrixXd values;   // (rows, cols)
  Eigen::MatrixXd vectors;  // additive encodings: the (P, C) vectors behind "cosine"
  bool reference = false;   // a parameter-free variant at this model's sizes, not the run's own
};

struct Inspection {
  std::string run_dir, run_name, positional_type, text;
  std::string precision;  // of the graphs that computed it: "float32" or "bf16"
  double perplexity = 0;  // t-SNE settings used
  uint64_t seed = 0;
  int64_t top = 20;  // bars of the next-token chart
  int64_t step = 0, n_layers = 0, n_heads = 0, time = 0, vocab = 0, d_model = 0, context = 0;
  std::vector<int32_t> ids;               // (T)
  std::vector<std::string> vocab_labels;  // (V) visible token text (newline as \n, space as ␣)
  std::vector<float> attention;           // (L, NH, T, T): row = query, col = key
  std::vector<float> next_probs;          // (V) after the last position
  TokenMap embedding, head;
  bool tied = false;  // LM head = embedding
  std::vector<PositionalView> positional;
  std::vector<std::string> notes;  // what was skipped and why

  float weight(int64_t layer, int64_t head, int64_t query, int64_t key) const {
    return attention[static_cast<size_t>(((layer * n_heads + head) * time + query) * time + key)];
  }
};

// A token's text with whitespace and control characters made visible.
std::string visible_token(const std::string& text);

// Characters of `text` that `tok` cannot round-trip (decode(encode(c)) != c), in order
// of first appearance.
std::vector<std::string> unknown_characters(const Tokenizer& tok, const std::string& text);

// Throws ablate::Error for a text that is empty, has unknown characters, or is longer
// than the model's context, and for options out of range.
Inspection inspect_run(LoadedRun& run, const InspectOptions& o);

// The page; `h5_name` (may be "") is mentioned as the numbers' file.
std::string render_inspection(const Inspection& in, const std::string& h5_name = "");
// Every number of the page to HDF5 (layout in docs/INSPECT.md). Throws Error naming the file.
void write_inspection_h5(const Inspection& in, const std::string& path);

}  // namespace ablate
