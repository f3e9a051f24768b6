// Data-parallel gradient summation (docs/CLUSTER.md): the parameters' gradients, in
// buckets of about kBucketFloats in reverse creation order (the order backward finishes
// them), summed over the ranks with non-blocking allreduces. Attached to the graph before
// the last backward of a step, a bucket's allreduce starts as soon as backward has passed
// every use of its parameters, so transfers overlap the rest of backward; the buckets
// always start in the same order on every rank, as MPI requires.
#pragma once
#include <cstddef>
#include <vector>

#include "ablate/communicator.hpp"
#include "ablate/graph.hpp"

namespace ablate {

class GradientSync {
 public:
  static constexpr size_t kBucketFloats = size_t{1} << 18;  // 1 MB
  GradientSync(Communicator& comm, const std::vector<Parameter*>& params, bool overlap = true,
               size_t bucket_floats = kBucketFloats);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Before g.backward(): start buckets from inside it (no-op without overlap or with one rank).
  void attach(Graph& g);
  // After the step's backward passes: starts the buckets not started yet, waits for all,
  // writes the sums into the gradients, detaches from the graph.
  void finish();
  size_t buckets() const { return buckets_.size(); }
  size_t started_during_backward() const { return early_; }  // of the last step

 private:
  struct Bucket {
    std::vector<Parameter*> params;
    std::vector<float> flat;
    int ready_after = 0;  // the bucket's gradients are final once backward has visited this node
  };
  static void on_node(void* self, int id);
  void start(Bucket& b);
  Communicator& comm_;
  bool overlap_;
  std::vector<Bucket> buckets_;
  size_t next_ = 0, early_ = 0;
  Graph* graph_ = nullptr;
};

}  // namespace ablate
