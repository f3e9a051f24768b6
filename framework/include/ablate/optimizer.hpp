// Family "optimizer": updates parameters from their gradients. Its state is exposed
// as named buffers so that checkpoints can save and restore it bitwise.
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
};

}  // namespace ablate
