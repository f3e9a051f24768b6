// PCA and exact t-SNE (see projection.hpp). The t-SNE schedule follows the paper and
// scikit-learn: early exaggeration 12 for 250 iterations with momentum 0.5, then 0.8;
// learning rate max(N / 48, 50) ("auto"); gains +0.2 / x0.8, floor 0.01.
#include "ablate/projection.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "ablate/error.hpp"
#include "ablate/tensor.hpp"

namespace ablate {

Projection pca_2d(const Eigen::MatrixXd& x) {
  Projection p;
  const Eigen::Index n = x.rows(), d = x.cols();
  p.points = Eigen::MatrixXd::Zero(n, 2);
  p.explained = {0, 0};
  if (n == 0 || d == 0) return p;
  const Eigen::RowVectorXd mean = x.colwise().mean();
  const Eigen::MatrixXd c = x.rowwise() - mean;
  const Eigen::MatrixXd cov =
      (c.transpose() * c) / static_cast<double>(std::max<Eigen::Index>(1, n - 1));
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(cov);
  const double total = std::max(0.0, es.eigenvalues().sum());
  for (int k = 0; k < 2 && k < d; ++k) {
    const Eigen::Index col = d - 1 - k;  // eigenvalues ascend
    Eigen::VectorXd v = es.eigenvectors().col(col);
    Eigen::Index arg = 0;
    v.cwiseAbs().maxCoeff(&arg);
    if (v(arg) < 0) v = -v;
    p.points.col(k) = c * v;
    p.explained[static_cast<size_t>(k)] =
        total > 0 ? std::max(0.0, es.eigenvalues()(col)) / total : 0;
  }
  return p;
}

double tsne_max_perplexity(int64_t n) { return static_cast<double>(n - 1) / 3.0; }

namespace {

// Row i of the conditional affinities P(j|i) with the bandwidth whose entropy is
// log(perplexity); distances are shifted by their minimum so exp() cannot underflow to
// an all-zero row.
void conditional_row(const Eigen::MatrixXd& d2, Eigen::Index i, double perplexity,
                     Eigen::MatrixXd& p) {
  const Eigen::Index n = d2.rows();
  const double target = std::log(perplexity);
  double dmin = std::numeric_limits<double>::infinity();
  for (Eigen::Index j = 0; j < n; ++j)
    if (j != i) dmin = std::min(dmin, d2(i, j));
  double beta = 1, lo = 0, hi = std::numeric_limits<double>::infinity();
  for (int it = 0; it < 200; ++it) {
    double sum = 0, dsum = 0;
    for (Eigen::Index j = 0; j < n; ++j) {
      if (j == i) {
        p(i, j) = 0;
        continue;
      }
      const double dd = d2(i, j) - dmin, e = std::exp(-beta * dd);
      p(i, j) = e;
      sum += e;
      dsum += dd * e;
    }
    const double h = std::log(sum) + beta * dsum / sum;  // entropy in nats
    p.row(i) /= sum;
    if (std::fabs(h - target) < 1e-6) break;
    if (h > target) {
      lo = beta;
      beta = std::isinf(hi) ? beta * 2 : (beta + hi) / 2;
    } else {
      hi = beta;
      beta = (beta + lo) / 2;
    }
  }
}

}  // namespace

Projection tsne_2d(const Eigen::MatrixXd& x, const TsneOptions& o) {
  const Eigen::Index n = x.rows();
  if (n < 4) throw Error("t-SNE needs at least 4 points, got " + std::to_string(n));
  const double max_perp = tsne_max_perplexity(n);
  if (!(o.perplexity >= 1 && o.perplexity <= max_perp))
    throw Error("t-SNE perplexity " + std::to_string(o.perplexity) + " is out of range for " +
                std::to_string(n) + " points: choose a value in [1, " + std::to_string(max_perp) +
                "] ((N - 1) / 3)");
  if (o.iterations < 1)
    throw Error("t-SNE needs at least 1 iteration, got " + std::to_string(o.iterations));

  Eigen::VectorXd sq = x.rowwise().squaredNorm();
  Eigen::MatrixXd d2 = (-2.0 * x * x.transpose()).colwise() + sq;
  d2.rowwise() += sq.transpose();
  d2 = d2.cwiseMax(0.0);
  Eigen::MatrixXd p(n, n);
  for (Eigen::Index i = 0; i < n; ++i) conditional_row(d2, i, o.perplexity, p);
  p = (p + p.transpose()).eval() / (2.0 * static_cast<double>(n));  // eval: the transpose aliases p
  p = p.cwiseMax(1e-12);
  p.diagonal().setZero();

  Rng rng(o.seed);
  Eigen::MatrixXd y(n, 2), update = Eigen::MatrixXd::Zero(n, 2),
                           gains = Eigen::MatrixXd::Ones(n, 2), grad(n, 2);
  for (Eigen::Index i = 0; i < n; ++i)
    for (int k = 0; k < 2; ++k) y(i, k) = 1e-4 * rng.normal();
  const double lr = std::max(static_cast<double>(n) / 48.0, 50.0);
  const int exaggerate_until = std::min(250, o.iterations / 4 + 1);
  Eigen::MatrixXd num(n, n);
  double qsum = 0;
  for (int it = 0; it < o.iterations; ++it) {
    const double ex = it < exaggerate_until ? 12.0 : 1.0,
                 momentum = it < exaggerate_until ? 0.5 : 0.8;
    Eigen::VectorXd ysq = y.rowwise().squaredNorm();
    num = (-2.0 * y * y.transpose()).colwise() + ysq;
    num.rowwise() += ysq.transpose();
    num = (1.0 + num.cwiseMax(0.0).array()).inverse().matrix();
    num.diagonal().setZero();
    qsum = num.sum();
    // dC/dy_i = 4 sum_j (ex p_ij - q_ij) num_ij (y_i - y_j)
    const Eigen::MatrixXd w = ((ex * p).array() - num.array() / qsum).matrix().cwiseProduct(num);
    grad = 4.0 * (w.rowwise().sum().asDiagonal() * y - w * y);
    for (Eigen::Index i = 0; i < n; ++i)
      for (int k = 0; k < 2; ++k) {
        const bool same = (grad(i, k) > 0) == (update(i, k) > 0);
        gains(i, k) = std::max(0.01, same ? gains(i, k) * 0.8 : gains(i, k) + 0.2);
        update(i, k) = momentum * update(i, k) - lr * gains(i, k) * grad(i, k);
        y(i, k) += update(i, k);
      }
    y.rowwise() -= y.colwise().mean();
  }
  Projection r;
  r.points = y;
  double kl = 0;
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < n; ++j)
      if (i != j) kl += p(i, j) * std::log(p(i, j) / std::max(num(i, j) / qsum, 1e-12));
  r.kl = kl;
  return r;
}

}  // namespace ablate
