// The conformance suite of family "optimizer": steps on a quadratic, state buffers, threads,
// checkpoints.
#include <tbb/global_control.h>

#include "ablate/optimizer.hpp"
#include "kit.hpp"
#include "suites.hpp"

namespace ablate::conformance {
namespace {

// Three parameters (a wide hidden matrix, a bias, a tall residual-output matrix) and a
// diagonal quadratic 0.5 * sum c (p - t)^2; `large` adds a 96 x 400 hidden matrix, more
// than the 16K elements an optimizer's parallel span usually holds.
struct Quadratic {
  ParamStore store{3};
  std::vector<float> target, curv;
  explicit Quadratic(bool large = false) {
    add_input(store, "w", 3, 4).role = Role::kHidden;
    add_input(store, "b", 1, 4).role = Role::kBias;
    add_input(store, "u", 5, 2).role = Role::kResidualOut;
    if (large) add_input(store, "big", 96, 400).role = Role::kHidden;
    const size_t n = large ? 26 + 96 * 400 : 26;
    target = randn(n, 4);
    curv = randn(n, 5);
    for (float& c : curv) c = 0.5f + std::fabs(c);
  }
  // Sets the gradients, returns the loss.
  double grad() {
    double loss = 0;
    size_t k = 0;
    for (Parameter* p : store.all())
      for (int64_t i = 0; i < p->value.numel(); ++i, ++k) {
        const double r = p->value.data[i] - target[k];
        loss += 0.5 * curv[k] * r * r;
        p->grad.data[i] = static_cast<float>(curv[k] * r);
      }
    return loss;
  }
  std::vector<float> flat() const {
    std::vector<float> v;
    for (Parameter* p : store.all())
      v.insert(v.end(), p->value.data, p->value.data + p->value.numel());
    return v;
  }
  void run(Optimizer& o, int64_t first, int64_t n) {
    for (int64_t s = first; s < first + n; ++s) {
      grad();
      o.step(store.all(), o.base_lr(), s);
    }
  }
};

// What the optimizer checks share: the variant.
struct OptimizerCase {
  const Subject& s;
  const ModelDims d = small_dims();
  const std::string path = path_of(s.family);
  Built<Optimizer> optimizer() const { return build<Optimizer>(s.options, path, d); }
};

void decreases_a_quadratic(OptimizerCase& c, std::string& note) {
  auto o = c.optimizer();
  expect(o->base_lr() > 0.0f, "base_lr() is " + num(o->base_lr()));
  Quadratic q;
  o->init(q.store.all());
  const double before = q.grad();
  q.run(*o.obj, 1, 100);
  const double after = q.grad();
  expect_finite(q.flat(), "the parameters");
  expect(after < before, "the loss went from " + num(before) + " to " + num(after));
  note = "loss " + num(before) + " -> " + num(after);
}

void state_buffers_fit_the_parameters(OptimizerCase& c, std::string& note) {
  auto o = c.optimizer();
  Quadratic q;
  o->init(q.store.all());
  q.run(*o.obj, 1, 3);
  std::set<std::string> names;
  std::multiset<size_t> sizes;
  for (Parameter* p : q.store.all()) sizes.insert(static_cast<size_t>(p->value.numel()));
  for (const StateBuffer& b : o->state()) {
    expect(names.insert(b.name).second, "state buffer name '" + b.name + "' is used twice");
    expect(b.data != nullptr, "state buffer '" + b.name + "' has no data");
    expect(sizes.count(b.data->size()) > 0 || b.data->size() <= 16,
           "state buffer '" + b.name + "' has " + std::to_string(b.data->size()) +
               " values, not the size of any parameter");
  }
  note = std::to_string(names.size()) + " buffers for 3 parameters";
}

void eval_point_round_trips(OptimizerCase& c, std::string&) {
  Quadratic q1, q2;
  auto o1 = c.optimizer(), o2 = c.optimizer();
  o1->init(q1.store.all());
  o2->init(q2.store.all());
  q1.run(*o1.obj, 1, 10);
  q2.run(*o2.obj, 1, 10);
  const std::vector<float> trained = q1.flat();
  expect(trained == q2.flat(), "two runs from the same start differ");
  o1->eval_point(q1.store.all());
  expect_finite(q1.flat(), "the parameters at the eval point");
  o1->train_point(q1.store.all());
  expect(q1.flat() == trained, "eval_point() then train_point() changed the parameters");
}

// Parallel loops split work into spans fixed by the sizes, so the thread count must not
// change a bit: a race between spans (scratch shared by all of them) shows here.
void threads_change_nothing(OptimizerCase& c, std::string& note) {
  Quadratic q1(true), q2(true);
  auto o1 = c.optimizer(), o2 = c.optimizer();
  o1->init(q1.store.all());
  o2->init(q2.store.all());
  {
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    q1.run(*o1.obj, 1, 3);
  }
  q2.run(*o2.obj, 1, 3);
  expect_finite(q2.flat(), "the parameters");
  expect(q1.flat() == q2.flat(),
         "3 steps on one thread and on all threads give different parameters");
  note = std::to_string(
             tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)) +
         " threads";
}

// A step with other parameters than init() saw would read and write past the state's
// buffers; it must fail with a message instead (ablate::SlotState::check does).
void rejects_other_parameters(OptimizerCase& c, std::string& note) {
  auto o = c.optimizer();
  Quadratic q;
  o->init(q.store.all());
  q.grad();
  std::vector<Parameter*> fewer = q.store.all();
  fewer.pop_back();
  try {
    o->step(fewer, o->base_lr(), 1);
  } catch (const Error& e) {
    note = e.what();
    return;
  }
  expect(false, "step() with 2 of init()'s 3 parameters returned without an error");
}

// As the trainer checkpoints: at the eval point, then back to the train point.
void resumes_bit_for_bit(OptimizerCase& c, std::string&) {
  Quadratic q1;
  auto o1 = c.optimizer();
  o1->init(q1.store.all());
  q1.run(*o1.obj, 1, 10);
  o1->eval_point(q1.store.all());
  std::map<std::string, std::vector<float>> saved;
  for (const auto& b : o1->state()) saved[b.name] = *b.data;
  const std::vector<float> params = q1.flat();
  o1->train_point(q1.store.all());
  q1.run(*o1.obj, 11, 5);
  Quadratic q3;
  size_t k = 0;
  for (Parameter* p : q3.store.all())
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.data[i] = params[k++];
  auto o3 = c.optimizer();
  o3->init(q3.store.all());
  for (const auto& b : o3->state()) {
    expect(saved.count(b.name) > 0,
           "a fresh optimizer has a state buffer '" + b.name + "' that the first did not have");
    *b.data = saved[b.name];
  }
  o3->train_point(q3.store.all());
  q3.run(*o3.obj, 11, 5);
  expect(q3.flat() == q1.flat(),
         "steps 11-15 after restoring the state differ from the uninterrupted run");
}

}  // namespace

void check_optimizer(Checker& ck, const Subject& s) {
  OptimizerCase c{s};
  run_properties<OptimizerCase>(
      ck, c,
      {{"positive base_lr; 100 steps decrease a quadratic; parameters stay finite",
        &decreases_a_quadratic},
       {"state buffers: unique names, each as large as a parameter or of at most 16 scalars",
        &state_buffers_fit_the_parameters},
       {"deterministic; eval_point then train_point restores the parameters bitwise",
        &eval_point_round_trips},
       {"the same parameters on one thread as on all of them (a matrix of 38,400 elements)",
        &threads_change_nothing},
       {"a step with fewer parameters than init() saw fails with an ablate::Error",
        &rejects_other_parameters},
       {"resumes bit for bit from its state buffers and eval-point parameters (as checkpoints do)",
        &resumes_bit_for_bit}});
  check_options<Optimizer>(ck, s, c.d);
}

}  // namespace ablate::conformance
