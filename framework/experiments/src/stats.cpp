// Student's t distribution and the paired t-test (see stats.hpp).
#include "ablate/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "ablate/error.hpp"

namespace ablate::stats {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The continued fraction of DLMF 8.17.22 for I_x(a,b) / (x^a (1-x)^b / (a B(a,b))),
// converging fast for x < (a+1)/(a+b+2). Modified Lentz: tiny guards against division
// by a zero partial denominator.
double beta_fraction(double a, double b, double x) {
  const double tiny = 1e-300, eps = 1e-15;
  double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
  if (std::fabs(d) < tiny) d = tiny;
  d = 1.0 / d;
  double f = d;
  for (int m = 1; m <= 1000; ++m) {
    // Even step: d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m)).
    double num = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
    d = 1.0 + num * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1.0 + num / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    f *= d * c;
    // Odd step: d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)).
    num = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0));
    d = 1.0 + num * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1.0 + num / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    f *= delta;
    if (std::fabs(delta - 1.0) < eps) break;
  }
  return f;
}

}  // namespace

double incomplete_beta(double a, double b, double x) {
  if (!(a > 0) || !(b > 0) || std::isnan(x))
    throw Error("incomplete_beta: needs a > 0, b > 0 and x in [0, 1]");
  if (x <= 0) return 0.0;
  if (x >= 1) return 1.0;
  // x^a (1-x)^b / B(a,b) in logs, so that large a, b do not overflow.
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
                                a * std::log(x) + b * std::log1p(-x));
  // Symmetry I_x(a,b) = 1 - I_{1-x}(b,a) keeps the fraction in its fast region.
  if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_fraction(a, b, x) / a;
  return 1.0 - front * beta_fraction(b, a, 1.0 - x) / b;
}

double t_two_sided_p(double t, double df) {
  if (!(df > 0)) throw Error("t distribution: degrees of freedom must be positive");
  if (std::isnan(t)) return kNaN;
  if (std::isinf(t)) return 0.0;
  // P(|T| >= |t|) = I_{df/(df+t^2)}(df/2, 1/2).
  return incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
}

double t_cdf(double t, double df) {
  if (std::isnan(t)) return kNaN;
  if (std::isinf(t)) return t > 0 ? 1.0 : 0.0;
  const double tail = 0.5 * t_two_sided_p(t, df);
  return t > 0 ? 1.0 - tail : tail;
}

double t_quantile(double p, double df) {
  if (!(p > 0 && p < 1)) throw Error("t_quantile: p must lie in (0, 1)");
  if (p == 0.5) return 0.0;
  // The CDF is monotone: bracket, then bisect to the last representable bit.
  double lo = -1, hi = 1;
  while (t_cdf(lo, df) > p) lo *= 2;
  while (t_cdf(hi, df) < p) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-15 * std::max(1.0, std::fabs(lo)); ++i) {
    const double mid = 0.5 * (lo + hi);
    (t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

Summary summarize(const std::vector<double>& x, double level) {
  Summary s;
  s.n = static_cast<int64_t>(x.size());
  if (x.empty()) {
    s.mean = s.std = s.ci_low = s.ci_high = kNaN;
    return s;
  }
  double sum = 0;
  for (double v : x) sum += v;
  s.mean = sum / static_cast<double>(s.n);
  if (s.n < 2) {
    s.std = s.ci_low = s.ci_high = kNaN;
    return s;
  }
  double ss = 0;
  for (double v : x) ss += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(ss / static_cast<double>(s.n - 1));
  const double half = t_quantile(0.5 + level / 2.0, static_cast<double>(s.n - 1)) * s.std /
                      std::sqrt(static_cast<double>(s.n));
  s.ci_low = s.mean - half;
  s.ci_high = s.mean + half;
  return s;
}

PairedTest paired_t_test(const std::vector<double>& a, const std::vector<double>& b, double level) {
  if (a.size() != b.size()) throw Error("paired_t_test: the two samples differ in length");
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  Summary s = summarize(d, level);
  PairedTest r;
  r.n = s.n;
  r.mean_diff = s.mean;
  r.std_diff = s.std;
  r.ci_low = s.ci_low;
  r.ci_high = s.ci_high;
  if (s.n < 2) {
    r.t = r.p = kNaN;
    return r;
  }
  // Differences equal up to rounding (0.2504 - 0.2500 and 0.3004 - 0.3000 differ in the last
  // bits) count as equal: a spread below 1e-9 of the values' magnitude is no spread.
  double scale = 0;
  for (size_t i = 0; i < a.size(); ++i) scale = std::max({scale, std::fabs(a[i]), std::fabs(b[i])});
  if (s.std <= 1e-9 * scale) {
    r.std_diff = 0;
    r.ci_low = r.ci_high = s.mean;
  }
  const double se = r.std_diff / std::sqrt(static_cast<double>(s.n));
  if (se == 0) {
    // Every pair differs by the same amount. None: no difference (p = 1). A nonzero one
    // (quantized metrics do this, e.g. one problem more right in every pair): t is infinite
    // but the test has no spread to judge it by, so p is undefined rather than 0.
    r.t = s.mean == 0 ? 0.0 : std::copysign(std::numeric_limits<double>::infinity(), s.mean);
    r.p = s.mean == 0 ? 1.0 : kNaN;
    return r;
  }
  r.t = s.mean / se;
  r.p = t_two_sided_p(r.t, static_cast<double>(s.n - 1));
  return r;
}

}  // namespace ablate::stats
