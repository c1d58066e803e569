// The thread-local tape: ops record nodes in execution order; backward() walks them in
// reverse once and frees them. Ownership flows one way: tape -> nodes -> saved tensors.
#pragma once
#include <functional>
#include <vector>

#include "lat/tensor.h"

namespace lat {

/// Receives the gradient of each output (zeros when an output got none) and returns
/// the gradient of each input, in order; an undefined Tensor for an input that needs none.
/// Runs with recording disabled.
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

/// True when ops record onto the tape (not inside a NoGradGuard).
bool grad_enabled();

/// RAII: disables recording on this thread for its lifetime (nests).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

/// True when recording is on and any defined input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

/// Records one node: marks `outputs` as non-leaf tensors requiring grad and notes where the
/// gradients `backward_fn` returns for `inputs` (in order) go: the handles of leaves that
/// require grad are kept until backward, of other inputs only their ids and shapes (what
/// `backward_fn` needs of them it captures itself). Call only when needs_grad(inputs) is true.
void record(const char* name, std::vector<Tensor> inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward_fn);

/// Backpropagates from `loss` through the tape, accumulating (+=) into the .grad of leaf
/// tensors that require grad, then clears the tape. `grad_output` defaults to 1 and is
/// required when `loss` is not a one-element tensor. Throws lat::Error on shape mismatch.
void backward(const Tensor& loss, const Tensor& grad_output = Tensor());

/// Number of nodes currently recorded on this thread's tape.
size_t tape_size();
/// Drops every recorded node (e.g. after a forward pass whose result is not differentiated).
void clear_tape();

}  // namespace lat
