// Gradient averaging for data-parallel training (DistributedDataParallel). Parameters are laid
// out in buckets of about `bucket_bytes`, in reverse registration order (roughly the order in
// which backward finalises their gradients). A grad-ready hook on each parameter counts down its
// bucket; a full bucket is packed into one flat buffer and its all-reduce launched at once, so
// communication overlaps the rest of backward. Buckets launch strictly in order, so every rank
// issues the same collectives in the same order. When the last bucket is launched, the reducer
// waits for all of them and writes the averaged gradients back into .grad.
#pragma once
#include <string>
#include <vector>

#include "flowgrad/distributed/process_group.h"
#include "flowgrad/ops/registry.h"

namespace fg::dist {

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

 private:
  struct Bucket {
    std::vector<int64_t> params;
    std::vector<int64_t> offsets;  // element offset of each parameter in `flat`
    Tensor flat;
    int64_t pending = 0;
    WorkPtr work;
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
