// Family "optimizer": updates parameters from their gradients. Its state is exposed
// as named buffers so that checkpoints can save and restore it bitwise. Each parameter
// carries its role and shape (tensor.hpp: Parameter::role, value.rows x value.cols), so an
// optimizer can treat hidden matrices differently from embeddings, gains or the head
// without knowing parameter names.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ablate/tensor.hpp"

namespace ablate {

struct StateBuffer {
  std::string name;           // "adamw.m.blocks.0.attn.qkv.weight"
  std::vector<float>* data;   // owned by the optimizer
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

}  // namespace ablate
