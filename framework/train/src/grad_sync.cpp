// Bucketed gradient allreduce, overlapped with backward (grad_sync.hpp).
#include "ablate/grad_sync.hpp"

#include <algorithm>
#include <climits>
#include <unordered_map>

namespace ablate {

GradientSync::GradientSync(Communicator& comm, const std::vector<Parameter*>& params, bool overlap,
                           size_t bucket_floats)
    : comm_(comm), overlap_(overlap) {
  if (comm.size() == 1) return;
  size_t n = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    if (buckets_.empty() || n >= bucket_floats) {
      buckets_.emplace_back();
      n = 0;
    }
    buckets_.back().params.push_back(*it);
    n += static_cast<size_t>((*it)->grad.numel());
  }
  for (Bucket& b : buckets_) {
    size_t total = 0;
    for (Parameter* p : b.params) total += static_cast<size_t>(p->grad.numel());
    b.flat.resize(total);
  }
}

GradientSync::~GradientSync() {
  if (graph_) graph_->after_backward_node = nullptr;
}

void GradientSync::attach(Graph& g) {
  if (buckets_.empty() || !overlap_) return;
  // A parameter's gradient is final once backward has visited its first leaf on the tape:
  // every node using it comes later on the tape and so earlier in backward.
  std::unordered_map<const Parameter*, int> first_leaf;
  for (int id = 0; id < static_cast<int>(g.num_nodes()); ++id)
    if (const Parameter* p = g.node(id).param) first_leaf.emplace(p, id);
  for (Bucket& b : buckets_) {
    b.ready_after = INT_MAX;  // parameters this step does not use are final already
    for (Parameter* p : b.params)
      if (auto it = first_leaf.find(p); it != first_leaf.end())
        b.ready_after = std::min(b.ready_after, it->second);
  }
  early_ = 0;
  graph_ = &g;
  g.after_backward_node = &GradientSync::on_node;
  g.after_backward_ctx = this;
}

void GradientSync::on_node(void* self, int id) {
  auto* s = static_cast<GradientSync*>(self);
  // In bucket order only, so that every rank starts the same collectives in the same order.
  bool started = false;
  while (s->next_ < s->buckets_.size() && id <= s->buckets_[s->next_].ready_after) {
    s->start(s->buckets_[s->next_++]);
    ++s->early_;
    started = true;
  }
  // Open MPI moves non-blocking collectives on only inside MPI calls.
  if (!started && s->next_ > 0) s->comm_.poll();
}

void GradientSync::start(Bucket& b) {
  float* dst = b.flat.data();
  for (Parameter* p : b.params) dst = std::copy(p->grad.data, p->grad.data + p->grad.numel(), dst);
  comm_.start_sum(b.flat.data(), b.flat.size());
}

void GradientSync::finish() {
  if (graph_) {
    graph_->after_backward_node = nullptr;
    graph_ = nullptr;
  }
  if (buckets_.empty()) return;
  while (next_ < buckets_.size()) start(buckets_[next_++]);
  comm_.wait_all();
  for (Bucket& b : buckets_) {
    const float* src = b.flat.data();
    for (Parameter* p : b.params) {
      std::copy(src, src + p->grad.numel(), p->grad.data);
      src += p->grad.numel();
    }
  }
  next_ = 0;
}

}  // namespace ablate
