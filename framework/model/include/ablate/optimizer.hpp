// Family "optimizer": updates parameters from their gradients. Its state is exposed
// as named buffers so that checkpoints can save and restore it bitwise. Each parameter
// carries its role and shape (tensor.hpp: Parameter::role, value.rows x value.cols), so an
// optimizer can treat hidden matrices differently from embeddings, gains or the head
// without knowing parameter names.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ablate/options.hpp"
#include "ablate/tensor.hpp"

namespace ablate {

struct StateBuffer {
  std::string name;          // "adamw.m.blocks.0.attn.qkv.weight"
  std::vector<float>* data;  // owned by the optimizer
};

class Optimizer {
 public:
  static constexpr const char* kFamily = "optimizer";
  virtual ~Optimizer() = default;
  // Allocates state for these parameters (called once, before step or restore).
  virtual void init(const std::vector<Parameter*>& params) = 0;
  // One update with learning rate lr; step counts optimizer steps from 1.
  virtual void step(const std::vector<Parameter*>& params, float lr, int64_t step) = 0;
  // The base learning rate (option "lr"); the scheduler multiplies it.
  virtual float base_lr() const = 0;
  virtual std::vector<StateBuffer> state() = 0;

  // Where evaluation, checkpoints and samples see the weights. Most optimizers evaluate the
  // point they train (these defaults do nothing). A schedule-free one takes gradients at a
  // point y but its answer is an average x: eval_point() writes x into the parameters and
  // train_point() writes y back, each computed from the state alone, so that train_point()
  // also follows a restore from a checkpoint written at the eval point. The trainer calls
  // eval_point() before evaluating or checkpointing and train_point() before the next step,
  // including the first step after a resume.
  virtual void eval_point(const std::vector<Parameter*>& params) { (void)params; }
  virtual void train_point(const std::vector<Parameter*>& params) { (void)params; }
};

// The per-parameter state most optimizers keep: for each slot ("m", "v", "momentum") one
// float buffer per parameter, as large as the parameter and zero after init(). state()
// names them "<slot>.<parameter name>", slot after slot, which is how checkpoints store
// them. check() rejects a step with other parameters than init() saw, naming the optimizer.
class SlotState {
 public:
  SlotState(std::string optimizer, std::vector<std::string> slots)
      : optimizer_(std::move(optimizer)), slots_(std::move(slots)) {}
  void init(const std::vector<Parameter*>& params);
  // Throws ablate::Error unless params are init()'s (count, names, sizes) and step >= 1.
  void check(const std::vector<Parameter*>& params, int64_t step) const;
  // Slot `slot`'s buffer of parameter i.
  float* at(size_t slot, size_t i) { return buffers_[slot][i].data(); }
  std::vector<StateBuffer> state();

 private:
  std::string optimizer_;
  std::vector<std::string> slots_, names_;
  std::vector<size_t> sizes_;
  std::vector<std::vector<std::vector<float>>> buffers_;  // [slot][parameter]
};

// Option `key` ("betas"): two numbers, each in [0, 1); a bad value fails naming the option.
std::pair<float, float> read_betas(const Options& o, const std::string& key,
                                   std::pair<float, float> defaults, const std::string& help);

}  // namespace ablate
