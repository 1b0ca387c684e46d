// Gradient averaging for data-parallel training (DistributedDataParallel). Parameters are laid
// out in buckets of about `bucket_bytes`, in reverse registration order (roughly the order in
// which backward finalises their gradients). A grad-ready hook on each parameter counts down its
// bucket; a full bucket's average is started at once (start_bucket below: its all-reduce runs on
// the communication thread while backward goes on). Buckets start strictly in order, so every
// rank issues the same collectives in the same order. When the last bucket has started (the hook
// of the last parameter backward reaches), the reducer waits for every bucket, once, and writes
// the averaged gradients back into .grad. A compiled step calls the same average on the
// gradients it traced (Reducer::average); its plan starts each bucket where the bucket's last
// gradient is made and waits before the first read of the result (passes/overlap.cpp).
#pragma once
#include <string>
#include <vector>

#include "flowgrad/distributed/process_group.h"
#include "flowgrad/ops/registry.h"

namespace fg::dist {

// The data-parallel gradient average as ops, one implementation for eager and traced steps.
// start_bucket: the gradients of one bucket (indices into `params`) flattened and packed into one
// tensor (cat; an undefined gradient adds zeros shaped like its parameter), its all-reduce ('avg')
// started (all_reduce_start_); returns that flat tensor. finish_bucket: waits for it
// (all_reduce_wait_) and sets grads[i] of the bucket to views of it in each gradient's shape (an
// undefined one stays undefined). average: every bucket started, then every one finished.
Tensor start_bucket(const Tensors& params, const Tensors& grads, const std::vector<int64_t>& bucket);
void finish_bucket(const Tensor& flat, const Tensors& params, Tensors& grads, const std::vector<int64_t>& bucket);
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
    Tensor flat;  // the bucket's packed gradients, once started (averaged once waited for)
  };

  void mark_ready(int64_t index);
  void launch_ready_buckets();
  void finish();
  void abandon();

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::vector<int64_t> hook_ids_, bucket_of_;
  std::vector<bool> ready_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  bool armed_ = false;
};

}  // namespace fg::dist
