// The safetensors format: 8-byte little-endian header length, a JSON header mapping names to
// {dtype, shape, data_offsets} (plus optional "__metadata__": {str: str}), then the raw data.
// The reader validates every field and raises CheckpointError; it never allocates more than
// the file holds. Writes are atomic (a temporary file unique to the process and the call in the
// same directory, fsync, rename); device tensors are copied to the host; temporary files of
// processes that died mid-save are removed by the next save or load of the same path.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flowgrad/core/tensor.h"

namespace fg::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::vector<std::pair<std::string, std::string>>;

struct TensorFile {
  NamedTensors tensors;  // in the order of their data
  Metadata metadata;
};

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata);
TensorFile load_safetensors(const std::string& path);
// Parses a whole file held in memory; `source` names it in error messages.
TensorFile parse_safetensors(std::string_view bytes, const std::string& source);
std::string serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata);

}  // namespace fg::io
