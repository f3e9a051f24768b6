// Student's t distribution and the paired t-test against closed forms, published tables
// and a textbook example (stats.hpp).
#include <doctest/doctest.h>

#include <cmath>

#include "ablate/error.hpp"
#include "ablate/stats.hpp"

using namespace ablate::stats;

namespace {

// I_x(a, b) for integer a, b as a binomial tail: sum_{j=a}^{a+b-1} C(a+b-1, j) x^j (1-x)^(a+b-1-j).
double beta_by_binomial(int a, int b, double x) {
  const int n = a + b - 1;
  double s = 0;
  for (int j = a; j <= n; ++j)
    s += std::exp(std::lgamma(n + 1.0) - std::lgamma(j + 1.0) - std::lgamma(n - j + 1.0) +
                  j * std::log(x) + (n - j) * std::log1p(-x));
  return s;
}

}  // namespace

TEST_CASE("stats/incomplete beta matches closed forms and binomial sums") {
  for (double x : {0.01, 0.2, 0.5, 0.77, 0.99}) {
    CHECK(incomplete_beta(2.5, 1.0, x) == doctest::Approx(std::pow(x, 2.5)).epsilon(1e-12));
    CHECK(incomplete_beta(1.0, 3.5, x) == doctest::Approx(1 - std::pow(1 - x, 3.5)).epsilon(1e-12));
    CHECK(incomplete_beta(0.5, 0.5, x) ==
          doctest::Approx(2 / M_PI * std::asin(std::sqrt(x))).epsilon(1e-12));
    CHECK(incomplete_beta(3.0, 7.0, x) ==
          doctest::Approx(1 - incomplete_beta(7.0, 3.0, 1 - x)).epsilon(1e-12));
  }
  CHECK(incomplete_beta(40.0, 40.0, 0.5) == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(incomplete_beta(3.0, 5.0, 0.3) ==
        doctest::Approx(beta_by_binomial(3, 5, 0.3)).epsilon(1e-12));
  CHECK(incomplete_beta(20.0, 30.0, 0.45) ==
        doctest::Approx(beta_by_binomial(20, 30, 0.45)).epsilon(1e-11));
  CHECK(incomplete_beta(200.0, 300.0, 0.4) ==
        doctest::Approx(beta_by_binomial(200, 300, 0.4)).epsilon(1e-10));
  CHECK(incomplete_beta(2.0, 3.0, 0.0) == 0.0);
  CHECK(incomplete_beta(2.0, 3.0, 1.0) == 1.0);
  CHECK_THROWS(incomplete_beta(0.0, 1.0, 0.5));
}

TEST_CASE("stats/t CDF matches closed forms for 1, 2 and 4 degrees of freedom") {
  for (double t : {-7.0, -1.5, -0.3, 0.0, 0.4, 1.0, 2.2, 12.0}) {
    // df = 1 is the Cauchy distribution.
    CHECK(t_cdf(t, 1) == doctest::Approx(0.5 + std::atan(t) / M_PI).epsilon(1e-12));
    // df = 2: F(t) = 1/2 + t / (2 sqrt(2 + t^2)).
    CHECK(t_cdf(t, 2) == doctest::Approx(0.5 + t / (2 * std::sqrt(2 + t * t))).epsilon(1e-12));
    // df = 4: F(t) = 1/2 + 3/8 * t/sqrt(1+t^2/4) * (1 - t^2 / (12 (1+t^2/4))).
    const double u = 1 + t * t / 4;
    CHECK(t_cdf(t, 4) ==
          doctest::Approx(0.5 + 0.375 * t / std::sqrt(u) * (1 - t * t / (12 * u))).epsilon(1e-12));
  }
  CHECK(t_cdf(INFINITY, 3) == 1.0);
  CHECK(t_cdf(-INFINITY, 3) == 0.0);
}

TEST_CASE("stats/t quantiles match the NIST table of critical values") {
  // NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.2, "Critical values
  // of the Student's t distribution" (3 decimals).
  struct Row {
    double p, df, t;
  };
  for (Row r :
       {Row{0.975, 1, 12.706}, Row{0.975, 2, 4.303}, Row{0.975, 3, 3.182}, Row{0.975, 5, 2.571},
        Row{0.975, 10, 2.228}, Row{0.975, 30, 2.042}, Row{0.975, 100, 1.984}, Row{0.995, 10, 3.169},
        Row{0.95, 4, 2.132}, Row{0.90, 20, 1.325}}) {
    CAPTURE(r.df);
    CAPTURE(r.p);
    CHECK(t_quantile(r.p, r.df) == doctest::Approx(r.t).epsilon(5e-4 / r.t));
    CHECK(t_quantile(1 - r.p, r.df) == doctest::Approx(-r.t).epsilon(5e-4 / r.t));
  }
  // Closed forms: df = 1 (Cauchy) and df = 2 (t = (2p-1) sqrt(2 / (4 p (1-p))))
  CHECK(t_quantile(0.975, 1) == doctest::Approx(std::tan(M_PI * 0.475)).epsilon(1e-10));
  CHECK(t_quantile(0.9, 2) == doctest::Approx(0.8 * std::sqrt(2 / (4 * 0.9 * 0.1))).epsilon(1e-10));
  // Large df tends to the normal quantile 1.959963985.
  CHECK(t_quantile(0.975, 1e7) == doctest::Approx(1.959963985).epsilon(1e-6));
  for (double df : {1.0, 3.0, 17.0})
    for (double p : {0.01, 0.3, 0.5, 0.8, 0.999})
      CHECK(t_cdf(t_quantile(p, df), df) == doctest::Approx(p).epsilon(1e-10));
}

TEST_CASE("stats/paired t-test reproduces R's sleep example") {
  // Cushny & Peebles' sleep data as in R: t.test(extra ~ group, data = sleep, paired = TRUE)
  // prints t = -4.0621, df = 9, p-value = 0.002833, 95 percent confidence interval
  // -2.4598858 -0.7001142, mean difference -1.58.
  std::vector<double> g1{0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0};
  std::vector<double> g2{1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4};
  PairedTest r = paired_t_test(g1, g2);
  CHECK(r.n == 10);
  CHECK(r.mean_diff == doctest::Approx(-1.58).epsilon(1e-12));
  CHECK(r.t == doctest::Approx(-4.0621).epsilon(1e-4));
  CHECK(r.p == doctest::Approx(0.002833).epsilon(2e-4));
  CHECK(r.ci_low == doctest::Approx(-2.4598858).epsilon(1e-7));
  CHECK(r.ci_high == doctest::Approx(-0.7001142).epsilon(1e-7));
  // The test is symmetric.
  PairedTest s = paired_t_test(g2, g1);
  CHECK(s.t == doctest::Approx(-r.t));
  CHECK(s.p == doctest::Approx(r.p));
}

TEST_CASE("stats/tiny p-values keep their precision") {
  // P(|T| >= 40) with 3 degrees of freedom; reference by numerical integration of the t
  // density (midpoint rule, 200000 points, Python): 3.4380680789e-05.
  CHECK(t_two_sided_p(40, 3) == doctest::Approx(3.4380680789e-05).epsilon(1e-8));
  CHECK(t_two_sided_p(-40, 3) == t_two_sided_p(40, 3));
  CHECK(t_two_sided_p(1e6, 5) > 0);
  CHECK(t_two_sided_p(0, 5) == doctest::Approx(1.0));
}

TEST_CASE("stats/summaries and tests with too few or identical values") {
  Summary e = summarize({});
  CHECK(e.n == 0);
  CHECK(std::isnan(e.mean));
  Summary one = summarize({1.5});
  CHECK(one.mean == 1.5);
  CHECK(std::isnan(one.std));
  CHECK(std::isnan(one.ci_low));
  Summary three = summarize({1, 2, 3});
  CHECK(three.mean == doctest::Approx(2));
  CHECK(three.std == doctest::Approx(1));
  CHECK(three.ci_high - three.mean ==
        doctest::Approx(4.302652729749464 / std::sqrt(3.0)).epsilon(1e-9));

  PairedTest same = paired_t_test({1, 2, 3}, {1, 2, 3});
  CHECK(same.p == 1.0);
  CHECK(same.t == 0.0);
  PairedTest shifted = paired_t_test({1.5, 2.5, 3.5}, {1, 2, 3});
  CHECK(std::isnan(shifted.p));  // no spread: undefined, not "significant" (p = 0 before)
  CHECK(std::isinf(shifted.t));
  CHECK(shifted.ci_low == shifted.ci_high);
  PairedTest single = paired_t_test({1}, {2});
  CHECK(single.n == 1);
  CHECK(single.mean_diff == -1);
  CHECK(std::isnan(single.p));
  CHECK_THROWS_AS(paired_t_test({1, 2}, {1}), ablate::Error);
}
