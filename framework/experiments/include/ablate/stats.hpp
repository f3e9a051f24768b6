// Small-sample statistics for comparing runs over seeds: Student's t distribution (CDF
// and quantile through the regularised incomplete beta function, DLMF 8.17), mean with
// a t confidence interval, and the paired t-test. No external library.
#pragma once
#include <cstdint>
#include <vector>

namespace ablate::stats {

// Regularised incomplete beta I_x(a, b) for a, b > 0 and x in [0, 1] (continued
// fraction, DLMF 8.17.22, evaluated with the modified Lentz method; ~1e-14 relative).
double incomplete_beta(double a, double b, double x);

// Student's t distribution with df > 0 degrees of freedom.
double t_cdf(double t, double df);
// Two-sided tail probability P(|T| >= |t|), computed without cancellation (tiny p stay accurate).
double t_two_sided_p(double t, double df);
// The p-quantile (0 < p < 1): t_cdf(t_quantile(p, df), df) = p.
double t_quantile(double p, double df);

// Mean, sample standard deviation (n - 1) and a two-sided t confidence interval.
// Fields that need more values are NaN (std and CI need n >= 2).
struct Summary {
  int64_t n = 0;
  double mean = 0, std = 0, ci_low = 0, ci_high = 0;
};
Summary summarize(const std::vector<double>& x, double level = 0.95);

// Paired t-test of a - b (same length, pairs by position): mean difference, its CI,
// t statistic with n - 1 degrees of freedom and the two-sided p-value. n < 2: t, p and
// the CI are NaN. All differences equal (up to rounding): the CI has zero width, p = 1 when
// they are 0, else NaN (t = +-inf: no spread to judge the difference by).
struct PairedTest {
  int64_t n = 0;
  double mean_diff = 0, std_diff = 0, ci_low = 0, ci_high = 0, t = 0, p = 0;
  // Every pair differs by the same amount: no interval and no t-test to show.
  bool same_in_every_pair() const { return n > 1 && std_diff == 0; }
};
PairedTest paired_t_test(const std::vector<double>& a, const std::vector<double>& b,
                         double level = 0.95);

}  // namespace ablate::stats
