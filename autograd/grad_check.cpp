// Central finite differences in float64 against the tape's gradients.
#include "lat/grad_check.h"

#include <cmath>
#include <limits>

#include "lat/ops.h"
#include "lat/tape.h"

namespace lat {

double relative_error(const Tensor& a, const Tensor& b) {
  LAT_CHECK(a.defined() && b.defined(), "relative_error: undefined tensor");
  LAT_CHECK(a.numel() == b.numel(), "relative_error: a has " << a.numel() << " elements, b has " << b.numel());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    double d = x[i] - y[i];
    diff += d * d;
    ref += y[i] * y[i];
  }
  if (std::isnan(diff)) return std::numeric_limits<double>::infinity();
  return ref > 0.0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

GradCheckResult grad_check(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                           const std::vector<Tensor>& inputs, double eps, uint64_t seed) {
  for (size_t i = 0; i < inputs.size(); ++i)
    LAT_CHECK(inputs[i].dtype() == DType::f64 || !inputs[i].requires_grad(),
              "grad_check: input " << i << " must be f64, got " << dtype_name(inputs[i].dtype()));

  // Analytic gradients of sum(f(x) * w).
  Tensor weights;
  {
    NoGradGuard no_grad;
    Tensor probe = f(inputs);
    Generator gen(seed);
    weights = Tensor::randn(probe.shape(), gen, DType::f64);
  }
  for (Tensor t : inputs)
    if (t.requires_grad()) t.zero_grad();
  Tensor loss = sum(mul(f(inputs), weights));
  backward(loss);

  auto objective = [&]() {
    NoGradGuard no_grad;
    return sum(mul(f(inputs), weights)).item();
  };

  GradCheckResult result;
  for (Tensor input : inputs) {
    if (!input.requires_grad()) continue;
    Tensor analytic = input.grad();
    if (!analytic.defined()) analytic = Tensor::zeros(input.shape(), DType::f64);
    Tensor numeric = Tensor::zeros(input.shape(), DType::f64);
    double* x = input.data<double>();
    double* n = numeric.data<double>();
    for (int64_t i = 0; i < input.numel(); ++i) {
      double saved = x[i];
      x[i] = saved + eps;
      double plus = objective();
      x[i] = saved - eps;
      double minus = objective();
      x[i] = saved;
      n[i] = (plus - minus) / (2.0 * eps);
    }
    double err = relative_error(analytic, numeric);
    double norm = 0.0;
    for (int64_t i = 0; i < numeric.numel(); ++i) norm += n[i] * n[i];
    if (norm < 1e-24) {
      // Numeric gradient ~0: report the absolute error.
      std::vector<double> a = analytic.to_vector<double>();
      double abs = 0.0;
      for (double v : a) abs += v * v;
      err = std::sqrt(abs);
    }
    result.rel_error.push_back(err);
    result.max_rel_error = std::max(result.max_rel_error, err);
    input.zero_grad();
  }
  return result;
}

}  // namespace lat
