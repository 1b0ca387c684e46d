// Gradient averaging for data-parallel training (DistributedDataParallel). Parameters are laid
// out in buckets of about `bucket_bytes`, in reverse registration order (roughly the order in
// which backward finalises their gradients). A grad-ready hook on each parameter counts down its
// bucket; a full bucket is averaged at once (average below), so buckets finish while backward
// goes on. Buckets run strictly in order, so every rank issues the same collectives in the same
// order. After the last bucket the reducer writes the averaged gradients back into .grad. A
// compiled step calls the same average on the gradients it traced (Reducer::average).
#pragma once
#include <string>
#include <vector>

#include "flowgrad/distributed/process_group.h"
#include "flowgrad/ops/registry.h"

namespace fg::dist {

// The data-parallel gradient average as ops, one implementation for eager and traced steps: per
// bucket (indices into `params`), the bucket's gradients flattened and packed into one tensor
// (cat; an undefined gradient adds zeros shaped like its parameter), one all_reduce_ ('avg'),
// then views of the result in each gradient's shape. Returns `grads` with every bucketed one
// averaged (an undefined one stays undefined).
Tensors average(const Tensors& params, const Tensors& grads, const std::vector<std::vector<int64_t>>& buckets);

class Reducer {
 public:
  Reducer(std::vector<Tensor> params, std::vector<std::string> names, int64_t bucket_bytes);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Called after each forward whose backward should synchronise: arms the hooks. With
  // find_unused, parameters that `outputs` do not depend on are marked ready (zeros) at once.
  void prepare_for_backward(const Tensors& outputs, bool find_unused);
  int64_t bucket_count() const { return static_cast<int64_t>(buckets_.size()); }
  // The parameter indices of each bucket, in launch order.
  std::vector<std::vector<int64_t>> bucket_indices() const;
  // The average of the gradients of `params` (some of this reducer's parameters, any order) over
  // the group, bucket by bucket as backward averages them: what a compiled step records.
  Tensors average(const Tensors& params, const Tensors& grads) const;

 private:
  struct Bucket {
    std::vector<int64_t> params;
    int64_t pending = 0;
    Tensors averaged;  // per parameter of the bucket, once it ran
  };

  void mark_ready(int64_t index);
  void launch_ready_buckets();
  void finish();

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::vector<int64_t> hook_ids_, bucket_of_;
  std::vector<bool> ready_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  bool armed_ = false;
};

}  // namespace fg::dist
