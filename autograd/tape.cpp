// The thread-local tape and the reverse walk of backward().
#include "lat/tape.h"

#include <unordered_map>

#include "lat/ops.h"

namespace lat {
namespace {

struct OutputInfo {
  int64_t id;
  Shape shape;
  DType dtype;
  Device device;
};

// What backward needs of an input: where its gradient goes. A leaf that requires grad (a
// parameter) keeps its handle, for .grad; any other input only its id and shape, so that an
// intermediate no backward function saved is freed during the forward, not at backward.
struct InputInfo {
  bool receives_grad = false;  // defined and requiring grad when recorded
  int64_t id = 0;
  Shape shape;
  Tensor leaf;  // defined for a leaf that requires grad
};

struct Node {
  const char* name;
  std::vector<InputInfo> inputs;
  std::vector<OutputInfo> outputs;
  BackwardFn backward_fn;
};

struct Tape {
  std::vector<Node> nodes;
  bool grad_enabled = true;
};

Tape& tape() {
  thread_local Tape t;
  return t;
}

// dst += src in place (same shape and dtype, checked), for leaf gradients.
void accumulate_in_place(Tensor& dst, const Tensor& src) {
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    int64_t n = dst.numel();
    if (dst.dtype() == DType::f32) {
      float* d = dst.data<float>();
      const float* s = src.data<float>();
#pragma omp parallel for if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) d[i] += s[i];
      return;
    }
    if (dst.dtype() == DType::f64) {
      double* d = dst.data<double>();
      const double* s = src.data<double>();
#pragma omp parallel for if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) d[i] += s[i];
      return;
    }
  }
  dst.copy_(add(dst, src));
}

}  // namespace

bool grad_enabled() { return tape().grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(tape().grad_enabled) { tape().grad_enabled = false; }
NoGradGuard::~NoGradGuard() { tape().grad_enabled = previous_; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!tape().grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t->requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!tape().grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.requires_grad()) return true;
  return false;
}

void record(const char* name, std::vector<Tensor> inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward_fn) {
  Node node{name, {}, {}, std::move(backward_fn)};
  node.inputs.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    InputInfo info;
    if (in.defined() && in.requires_grad()) {
      info.receives_grad = true;
      info.id = in.id();
      info.shape = in.shape();
      if (in.is_leaf()) info.leaf = in;
    }
    node.inputs.push_back(std::move(info));
  }
  node.outputs.reserve(outputs.size());
  for (const Tensor& out : outputs) {
    out.impl()->requires_grad = true;
    out.impl()->is_leaf = false;
    node.outputs.push_back({out.id(), out.shape(), out.dtype(), out.device()});
  }
  tape().nodes.push_back(std::move(node));
}

size_t tape_size() { return tape().nodes.size(); }

void clear_tape() { tape().nodes.clear(); }

void backward(const Tensor& loss, const Tensor& grad_output) {
  LAT_CHECK(loss.defined(), "backward: loss is undefined");
  LAT_CHECK(loss.requires_grad(), "backward: loss does not require grad (no recorded op leads to it)");
  Tensor seed = grad_output;
  if (!seed.defined()) {
    LAT_CHECK(loss.numel() == 1, "backward: grad_output is required for a non-scalar loss of shape "
                                     << shape_str(loss.shape()));
    seed = Tensor::ones(loss.shape(), loss.dtype(), loss.device());
  }
  LAT_CHECK(seed.shape() == loss.shape(), "backward: grad_output shape " << shape_str(seed.shape())
                                                                         << ", expected " << shape_str(loss.shape()));

  Tape& t = tape();
  // Swap the nodes out first: backward functions run ops (no-grad) and the tape must be
  // empty afterwards even when a backward function throws.
  std::vector<Node> nodes;
  nodes.swap(t.nodes);
  NoGradGuard no_grad;

  std::unordered_map<int64_t, Tensor> grads;  // non-leaf tensor id -> gradient
  if (loss.is_leaf()) {
    Tensor l = loss;
    l.set_grad(l.grad().defined() ? add(l.grad(), seed) : seed.clone());
    return;
  }
  grads[loss.id()] = seed;

  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node& node = *it;
    bool any = false;
    std::vector<Tensor> grad_outputs;
    grad_outputs.reserve(node.outputs.size());
    for (const OutputInfo& out : node.outputs) {
      auto g = grads.find(out.id);
      if (g != grads.end()) {
        grad_outputs.push_back(std::move(g->second));
        grads.erase(g);
        any = true;
      } else {
        grad_outputs.emplace_back();
      }
    }
    if (!any) continue;  // this node does not lead to the loss
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (!grad_outputs[i].defined())
        grad_outputs[i] = Tensor::zeros(node.outputs[i].shape, node.outputs[i].dtype, node.outputs[i].device);

    std::vector<Tensor> grad_inputs = node.backward_fn(grad_outputs);
    LAT_CHECK(grad_inputs.size() == node.inputs.size(), "backward: node '" << node.name << "' returned "
                                                                           << grad_inputs.size() << " gradients for "
                                                                           << node.inputs.size() << " inputs");
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      InputInfo& input = node.inputs[i];
      Tensor& g = grad_inputs[i];
      if (!input.receives_grad || !g.defined()) continue;
      LAT_CHECK(g.shape() == input.shape, "backward: node '" << node.name << "' gave input " << i
                                                             << " a gradient of shape " << shape_str(g.shape())
                                                             << ", expected " << shape_str(input.shape));
      if (input.leaf.defined()) {
        Tensor existing = input.leaf.grad();
        if (existing.defined()) {
          accumulate_in_place(existing, g);
        } else {
          input.leaf.set_grad(g.clone());  // never alias a gradient another input may also hold
        }
      } else {
        auto [slot, inserted] = grads.try_emplace(input.id, g);
        if (!inserted) slot->second = add(slot->second, g);
      }
    }
    node.backward_fn = nullptr;  // free saved tensors as we go
    node.inputs.clear();
  }
}

}  // namespace lat
