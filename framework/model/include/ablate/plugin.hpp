// The plugin ABI. Each variant is one .cpp file compiled into its own shared library
// that exports one PluginInfo (section "ablate", symbol "ablate_plugin") through
// Boost.DLL. The framework loads every library in the plugin search path and finds
// variants by (family, name); it never names a concrete variant.
#pragma once
#include <string>
#include <vector>
#include <boost/dll/alias.hpp>

#include "ablate/options.hpp"
#include "ablate/tensor.hpp"

namespace ablate {

// Bump on any change to PluginInfo, BuildContext, a family interface, or the layout of
// what plugins use inline (Graph, OpContext, Tensor).
//   1: first release.
//   2: Node names its op; Graph has a profile, gradient-sync hooks and grad_unzeroed.
//   3: PositionalEncoding::rotates(); AttentionSpec has column offsets (fused qkv).
//   4: PluginInfo::destroy; families declared as data (ablate/family.hpp); custom ops
//      (ablate/custom_op.hpp), tanh, scalar broadcasting; task plugins.
//      The block family (block.hpp) and BuildContext::parts; Attention::causal(); the
//      objective family (objective.hpp). Parameters are created with a Role, not values
//      (tensor.hpp; the `init` family sets them); optimizers see roles
//      (Parameter::weight_decay() follows the role; eval_point(), train_point()).
//      The framework split into layer libraries (plugins link libablate_model.so, tasks
//      and evaluators also libablate_train.so, instead of libablate_core.so);
//      arithmetic::decode is ablate::decode_prompts (generate.hpp).
//   5: prefix LMs: AttentionInput::prefix, AttentionSpec::prefix, ForwardArgs::prefix;
//      Node keeps five saved pointers.
//   6: AttentionSpec::projection_out; MultiHeadAttention projects with qkv_projection.
//   7: BuildContext::vocab (the tokens' texts); PosContext::ids and ::prefix (positions
//      that depend on the tokens, e.g. place_value).
//   8: Tokenizer::eot_id() and ::pretrained(). EvalContext::token_bytes (each id's bytes of
//      raw text, for bits per byte; ablate::byte_loss in evaluator.hpp). The head family
//      (head.hpp: the LM head, model.head) and BuildContext::tied_embedding. The qk_transform
//      family (qk_transform.hpp: q, k and v head by head between attention's projection and
//      the attention, model.attention.qk_transform), which MultiHeadAttention applies.
//      Ops gather/scatter_add/scale_rows, reshape, top_k, *norm_groups; custom-op IntArray.
//      Auxiliary losses and metrics (Graph::add_aux, AuxTerm). EvalContext::data (the run's
//      split); the objective's BuildContext has the vocabulary; Objective::reads_logits;
//      Evaluator/Objective::metric_specs (metric_spec.hpp: direction and range of columns).
//      Node is private to the core: plugins see a node through OpContext (whose methods are
//      no longer inline) and Graph::node's read-only NodeInfo (op, value, param); custom ops
//      save typed state (OpContext::save<T>/saved<T>). Batch-1 decoding runs op by op:
//      run_decoding_team, qkv_projection, AttentionSpec::projection_out and
//      KVCache::team_weights are gone (MultiHeadAttention projects with linear), and
//      plugins' forward no longer runs on two threads at once. One ablate::Batch
//      (batch.hpp) reaches Model::forward, blocks, attention and positional encodings,
//      replacing ForwardArgs, AttentionInput and PosContext. Objective::loss returns the
//      sum of the scored positions' losses and their count (LossSum, cross_entropy_sum);
//      the framework divides once, by the count over every rank and micro-batch of a step.
//      Parameter values and gradients and KV caches lie on 64-byte boundaries
//      (kTensorAlignment, AlignedFloats), as the graph's values always did.
//   9: Values' lifetimes (graph.hpp): a step follows a plan from an earlier one and gives
//      values back after their last read; plugins read values through Graph::value() where
//      they use them, and a plugin whose nodes depend on the data calls
//      Graph::tape_depends_on_data(). Graph::planned().
constexpr int kPluginApiVersion = 9;

// Model sizes a plugin may need. `layer` is the block index (-1 outside blocks).
struct ModelDims {
  int64_t vocab_size = 0;
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t n_layers = 0;
  int64_t context = 0;
  int64_t ffn_multiplier = 4;
  bool bias = false;
  float dropout = 0.0f;
  int64_t layer = -1;
};

class BlockParts;  // block.hpp

// What a plugin constructor receives besides its options.
struct BuildContext {
  ModelDims dims;
  ParamScope params;  // where the plugin creates its parameters
  uint64_t seed = 0;  // for plugins with randomness of their own
  // The model's configured attention, FFN and norm, for blocks to create (block.hpp);
  // null outside a model.
  const BlockParts* parts = nullptr;
  // Each token id's text (the tokenizer's decode of the id alone; "" for ids the objective
  // adds), vocab_size of them, or null where no tokenizer is known (a benchmark, a probe).
  // Valid while the constructor runs: copy what you need.
  const std::vector<std::string>* vocab = nullptr;
  // For the LM head (head.hpp): the token embedding (V, C) when model.tie_embeddings ties the
  // head to it; null otherwise, and for every other family.
  Parameter* tied_embedding = nullptr;
};

using PluginCreateFn = void* (*)(const Options&, const BuildContext&);
using PluginDestroyFn = void (*)(void*);

struct PluginInfo {
  int api_version;          // first field, layout-stable: checked before anything else is read
  const char* family;       // "ffn", "positional", ...
  const char* name;         // the YAML value; equals the source file stem
  const char* summary;      // one line for `ablate plugins`
  PluginCreateFn create;    // returns a Family* as void*
  PluginDestroyFn destroy;  // deletes what create returned
};

}  // namespace ablate

#define ABLATE_PLUGIN_CAT2(a, b) a##b
#define ABLATE_PLUGIN_CAT(a, b) ABLATE_PLUGIN_CAT2(a, b)

// Registers Class (derived from Family, constructible from (const Options&, const
// BuildContext&)) as variant `name` of Family's family.
#define ABLATE_PLUGIN(Family, name, Class, summary)                                          \
  namespace {                                                                                \
  void* ablate_plugin_create_(const ::ablate::Options& o, const ::ablate::BuildContext& c) { \
    return static_cast<Family*>(new Class(o, c));                                            \
  }                                                                                          \
  void ablate_plugin_destroy_(void* p) { delete static_cast<Family*>(p); }                   \
  const ::ablate::PluginInfo ablate_plugin_info_{                                            \
      ::ablate::kPluginApiVersion, Family::kFamily,        #name, summary,                   \
      &ablate_plugin_create_,      &ablate_plugin_destroy_};                                 \
  }                                                                                          \
  BOOST_DLL_ALIAS_SECTIONED(ablate_plugin_info_, ablate_plugin, ablate)
