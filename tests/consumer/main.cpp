// A user's first program against lat::lat: a small matmul, its backward, and a check of
// one gradient against the hand-computed value. Exit code 0 when right.
#include <cmath>
#include <cstdio>
#include <vector>

#include <lat/lat.h>

int main() {
  // loss = sum(a @ b), so d loss / d a[i][k] = sum_j b[k][j].
  lat::Tensor a = lat::Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, true);
  lat::Tensor b = lat::Tensor::from_vector(std::vector<float>{1, -1, 2, 0.5f, 3, 1}, {3, 2});
  lat::Tensor loss = lat::sum(lat::matmul(a, b));
  lat::backward(loss);

  const double expected_loss = 1 * 0 + 2 * 2.5 + 3 * 4 + 4 * 0 + 5 * 2.5 + 6 * 4;  // row sums of b: 0, 2.5, 4
  const double expected_grad = 2.5;                                                // a.grad[0][1]
  const double got_loss = loss.item(), got_grad = a.grad().at({0, 1});
  std::printf("lat %s: loss %g (expected %g), grad %g (expected %g)\n", lat::version(), got_loss, expected_loss,
              got_grad, expected_grad);
  return std::fabs(got_loss - expected_loss) < 1e-4 && std::fabs(got_grad - expected_grad) < 1e-6 ? 0 : 1;
}
