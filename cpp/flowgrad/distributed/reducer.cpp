#include "flowgrad/distributed/reducer.h"

#include <algorithm>
#include <numeric>
#include <unordered_set>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/distributed/collective_ops.h"
#include "flowgrad/ops/ops.h"
#include "flowgrad/ops/raw.h"

namespace fg::dist {
namespace {

// The leaves whose gradient backward from `outputs` would reach.
std::unordered_set<const TensorImpl*> reachable_leaves(const Tensors& outputs) {
  std::unordered_set<const TensorImpl*> leaves;
  std::unordered_set<const Node*> seen;
  std::vector<Node*> stack;
  for (const Tensor& t : outputs) {
    if (!t.defined() || !requires_grad(t)) continue;
    if (auto fn = grad_fn(t)) stack.push_back(fn.get());
    else leaves.insert(t.impl());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    for (const Edge& e : n->next) {
      if (e.leaf) leaves.insert(e.leaf.get());
      if (e.fn) stack.push_back(e.fn.get());
    }
  }
  return leaves;
}

}  // namespace

Tensor start_bucket(const Tensors& params, const Tensors& grads, const std::vector<int64_t>& bucket) {
  Tensors parts;
  for (int64_t i : bucket) {
    const Tensor& g = grads[i];  // no gradient on this rank: it adds nothing to the sum
    parts.push_back(reshape(g.defined() ? g : zeros(params[i].shape(), params[i].dtype(), params[i].device()), {-1}));
  }
  return all_reduce_start_(cat(parts, 0), ReduceOp::Avg);
}

void finish_bucket(const Tensor& flat, const Tensors& params, Tensors& grads, const std::vector<int64_t>& bucket) {
  Tensor averaged = all_reduce_wait_(flat);
  int64_t offset = 0;
  for (int64_t i : bucket) {
    const int64_t n = params[i].numel();
    if (grads[i].defined()) grads[i] = reshape(narrow(averaged, 0, offset, n), params[i].shape().vec());
    offset += n;
  }
}

Tensors average(const Tensors& params, const Tensors& grads, const std::vector<std::vector<int64_t>>& buckets) {
  Tensors out = grads;
  if (group().size() == 1) return out;  // an average over one process changes nothing
  Tensors flats;
  for (const std::vector<int64_t>& bucket : buckets) flats.push_back(start_bucket(params, grads, bucket));
  for (size_t k = 0; k < buckets.size(); ++k) finish_bucket(flats[k], params, out, buckets[k]);
  return out;
}

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names, int64_t bucket_bytes)
    : params_(std::move(params)), names_(std::move(names)) {
  FG_CHECK(bucket_bytes > 0, Value, "DistributedDataParallel: bucket size must be positive, got ",
           bucket_bytes, " bytes");
  bucket_of_.assign(params_.size(), -1);
  ready_.assign(params_.size(), false);
  int64_t bytes = 0;
  for (int64_t i = static_cast<int64_t>(params_.size()) - 1; i >= 0; --i) {
    const Tensor& p = params_[i];
    if (!requires_grad(p)) continue;
    int64_t size = p.numel() * itemsize(p.dtype());
    bool fits = !buckets_.empty() && bytes + size <= bucket_bytes &&
                params_[buckets_.back().params[0]].dtype() == p.dtype() &&
                params_[buckets_.back().params[0]].device() == p.device();
    if (!fits) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    b.params.push_back(i);
    bucket_of_[i] = static_cast<int64_t>(buckets_.size()) - 1;
    bytes += size;
  }
  for (size_t i = 0; i < params_.size(); ++i)
    hook_ids_.push_back(bucket_of_[i] < 0 ? -1 : add_grad_ready_hook(params_[i], [this, i] { mark_ready(i); }));
}

Reducer::~Reducer() {
  for (size_t i = 0; i < params_.size(); ++i)
    if (hook_ids_[i] >= 0) remove_grad_ready_hook(params_[i], hook_ids_[i]);
}

std::vector<std::vector<int64_t>> Reducer::bucket_indices() const {
  std::vector<std::vector<int64_t>> out;
  for (const Bucket& b : buckets_) out.push_back(b.params);
  return out;
}

Tensors Reducer::average(const Tensors& params, const Tensors& grads) const {
  FG_CHECK(params.size() == grads.size(), Value, "DistributedDataParallel: average got ", params.size(),
           " parameters and ", grads.size(), " gradients");
  Tensors all(params_.size());
  std::vector<int64_t> given(params_.size(), -1);  // per parameter of the reducer: its index in `params`
  for (size_t k = 0; k < params.size(); ++k)
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].impl() == params[k].impl()) all[i] = grads[k], given[i] = static_cast<int64_t>(k);
  Tensors averaged = dist::average(params_, all, bucket_indices());
  Tensors out = grads;
  for (size_t i = 0; i < params_.size(); ++i)
    if (given[i] >= 0) out[given[i]] = averaged[i];
  return out;
}

void Reducer::prepare_for_backward(const Tensors& outputs, bool find_unused) {
  if (group().size() == 1) return;  // an average over one process changes nothing
  if (armed_ && std::find(ready_.begin(), ready_.end(), true) != ready_.end()) {
    std::string missing;
    for (size_t i = 0; i < params_.size(); ++i)
      if (bucket_of_[i] >= 0 && !ready_[i]) missing += (missing.empty() ? "'" : ", '") + names_[i] + "'";
    fail(ErrorKind::Value, "DistributedDataParallel: the previous backward did not finish averaging "
         "gradients: no gradient reached ", missing, ". Pass find_unused_parameters=True when some "
         "parameters do not take part in every forward (e.g. switch branches)");
  }
  std::fill(ready_.begin(), ready_.end(), false);
  for (Bucket& b : buckets_) b.pending = static_cast<int64_t>(b.params.size());
  next_launch_ = 0;
  armed_ = true;
  if (!find_unused) return;
  auto reached = reachable_leaves(outputs);
  for (size_t i = 0; i < params_.size(); ++i)
    if (bucket_of_[i] >= 0 && !reached.count(params_[i].impl())) mark_ready(i);
}

void Reducer::mark_ready(int64_t index) {
  if (!armed_) return;  // a backward that no DDP forward armed (or one inside no_sync)
  FG_CHECK(!ready_[index], Value, "DistributedDataParallel: parameter '", names_[index],
           "' got its gradient twice after one forward (a second backward through the same "
           "graph?); run forward again before each backward");
  ready_[index] = true;
  if (--buckets_[bucket_of_[index]].pending == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  GradModeGuard no_grad(false);  // inside backward: the average records nothing
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    Tensors params, grads;
    for (int64_t i : b.params) {
      const Tensor& p = params_[i];
      params.push_back(p);
      grads.push_back(grad_of(p));  // none on this rank: zeros, so its .grad still gets the others' average
    }
    std::vector<int64_t> all(b.params.size());
    std::iota(all.begin(), all.end(), int64_t{0});
    try {
      b.flat = start_bucket(params, grads, all);
    } catch (...) {
      abandon();
      throw;
    }
  }
  if (next_launch_ == buckets_.size()) finish();
}

// Every bucket started: waits for each in turn (the backward's one wait) and writes .grad.
void Reducer::finish() {
  armed_ = false;
  for (Bucket& b : buckets_) {
    Tensors params, averaged;
    for (int64_t i : b.params) params.push_back(params_[i]);
    averaged = params;  // defined: finish_bucket replaces each with its averaged gradient
    std::vector<int64_t> all(b.params.size());
    std::iota(all.begin(), all.end(), int64_t{0});
    try {
      finish_bucket(b.flat, params, averaged, all);
    } catch (...) {
      abandon();
      throw;
    }
    b.flat = Tensor();
    for (size_t k = 0; k < params.size(); ++k) {
      Tensor g = grad_of(params[k]);
      if (!g.defined()) {
        g = Tensor::empty(params[k].shape(), params[k].dtype(), params[k].device());
        set_grad(params[k], g);
      }
      raw::copy_into(g, averaged[k]);
    }
  }
}

// A failed start or wait: the backward raises, the collectives still in flight are waited for
// here without their errors (one failure is reported; a peer that left fails them all), and the
// reducer is ready for the next forward.
void Reducer::abandon() {
  armed_ = false;
  for (Bucket& b : buckets_) {
    if (b.flat.defined()) {
      try {
        all_reduce_wait_(b.flat);
      } catch (...) {  // reported by the first failure
      }
    }
    b.flat = Tensor();
  }
  std::fill(ready_.begin(), ready_.end(), false);
}

}  // namespace fg::dist
