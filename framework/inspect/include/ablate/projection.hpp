// 2-D maps of row vectors X (N, D) for plots: PCA (eigenvectors of the covariance) and
// exact t-SNE (van der Maaten & Hinton 2008): per-point Gaussian bandwidths found by
// binary search on the perplexity, Student-t affinities in the map, gradient descent with
// momentum, gains and early exaggeration. Exact t-SNE costs O(N^2) per iteration: meant
// for a few hundred to a few thousand points.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <vector>

namespace ablate {

struct Projection {
  Eigen::MatrixXd points;         // (N, 2)
  std::vector<double> explained;  // PCA: fraction of the variance along each axis
  double kl = 0;                  // t-SNE: final KL(P || Q)
};

// Principal components 1 and 2 of X (N, D), N >= 1. Signs are fixed (each axis's largest
// loading positive), so the map is deterministic.
Projection pca_2d(const Eigen::MatrixXd& x);

struct TsneOptions {
  double perplexity = 30;  // effective number of neighbours; in [1, tsne_max_perplexity(N)]
  uint64_t seed = 1;       // initial map: N(0, 1e-4) from this seed
  int iterations = 1000;
};
// The largest perplexity t-SNE accepts for n points: (n - 1) / 3, as scikit-learn's
// rule of thumb (a larger one makes every point a neighbour of every other).
double tsne_max_perplexity(int64_t n);
// Throws ablate::Error when X has fewer than 4 rows or the perplexity is out of range.
Projection tsne_2d(const Eigen::MatrixXd& x, const TsneOptions& o = {});

}  // namespace ablate
