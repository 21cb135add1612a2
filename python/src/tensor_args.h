// Tensors, as Python describes them, to the params structs of the C++ API.
//
// The binding never sees a torch tensor: Python passes each one as a TensorRef
// (address, dtype name, sizes, strides in elements, device). This file checks
// what only a tensor description can tell (rank, dtype, device, sizes that must
// agree across tensors, a contiguous innermost dimension) and fills the params;
// everything else is left to the api validators, so each rule lives in one
// place. Messages have the api's shape:
//   "<entry>: argument '<name>' <problem>: got <value>, expected <what>".
// Plain C++: no Python or nanobind headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "openmla/params.h"
#include "openmla/status.h"
#include "openmla/types.h"

namespace openmla::python {

inline constexpr int kCpuDevice = -1;

// A borrowed view of one tensor; the caller keeps the storage alive.
struct TensorRef {
  uint64_t data = 0;     // address of element 0
  std::string dtype;     // torch's name without "torch.": "bfloat16", "int32", ...
  int64_t itemsize = 0;  // bytes per element
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // in elements
  int device = kCpuDevice;       // kCpuDevice, or a CUDA device index

  int64_t numel() const;
  bool on_cpu() const { return device == kCpuDevice; }
};

// ---- dense decode ----------------------------------------------------------------
// The call's shape from q [batch, s_q, h_q, d_qk], kv_cache [num_pages,
// page_size, h_kv, d_qk] and block_table [batch, max_pages_per_seq];
// out_dtype is the one the run will write (bf16 for fp8 inputs, else q's).
Status dense_decode_shape(const char* entry, const TensorRef& q, const TensorRef& kv_cache,
                          const TensorRef& block_table, int d_v, DenseDecodeShape* shape);

struct DenseDecodeTensors {
  const TensorRef* q = nullptr;            // [batch, s_q, h_q, d_qk]
  const TensorRef* kv_cache = nullptr;     // [num_pages, page_size, h_kv, d_qk]
  const TensorRef* block_table = nullptr;  // [batch, max_pages_per_seq] int32
  const TensorRef* seqlens = nullptr;      // [batch] int32
  const TensorRef* out = nullptr;          // [batch, s_q, h_q, d_v]
  const TensorRef* lse = nullptr;          // [batch, h_q, s_q] fp32
  const TensorRef* q_scale = nullptr;      // [1] fp32, may be null
  const TensorRef* kv_scale = nullptr;     // [1] fp32, may be null
};
Status dense_decode_params(const char* entry, const DenseDecodeTensors& tensors, float softmax_scale,
                           bool causal, DenseDecodeParams* params);

// ---- sparse decode (656-byte FP8 cache) ------------------------------------------
// q [batch, s_q, h_q, 576] bf16, kv_cache [num_pages, page_size, 1, 656] bytes,
// indices [batch, s_q, topk] int32.
Status sparse_decode_shape(const char* entry, const TensorRef& q, const TensorRef& kv_cache,
                           const TensorRef& indices, int d_v, SparseDecodeShape* shape);

struct SparseDecodeTensors {
  const TensorRef* q = nullptr;            // [batch, s_q, h_q, 576] bf16
  const TensorRef* kv_cache = nullptr;     // [num_pages, page_size, 1, 656] 1-byte elements
  const TensorRef* indices = nullptr;      // [batch, s_q, topk] int32
  const TensorRef* topk_length = nullptr;  // [batch] int32, may be null
  const TensorRef* attn_sink = nullptr;    // [h_q] fp32, may be null
  const TensorRef* out = nullptr;          // [batch, s_q, h_q, d_v] bf16
  const TensorRef* lse = nullptr;          // [batch, h_q, s_q] fp32
};
Status sparse_decode_params(const char* entry, const SparseDecodeTensors& tensors, float softmax_scale,
                            SparseDecodeParams* params);

// ---- sparse prefill --------------------------------------------------------------
struct SparsePrefillTensors {
  const TensorRef* q = nullptr;            // [s_q, h_q, d_qk] bf16
  const TensorRef* kv = nullptr;           // [s_kv, 1, d_qk] bf16
  const TensorRef* indices = nullptr;      // [s_q, 1, topk] int32
  const TensorRef* topk_length = nullptr;  // [s_q] int32, may be null
  const TensorRef* attn_sink = nullptr;    // [h_q] fp32, may be null
  const TensorRef* out = nullptr;          // [s_q, h_q, d_v] bf16
  const TensorRef* max_logits = nullptr;   // [s_q, h_q] fp32, contiguous
  const TensorRef* lse = nullptr;          // [s_q, h_q] fp32, contiguous
};
Status sparse_prefill_params(const char* entry, const SparsePrefillTensors& tensors, float softmax_scale,
                             SparsePrefillParams* params);

// ---- workspace -------------------------------------------------------------------
// A contiguous buffer on `device` (any dtype): its address and size in bytes.
Status workspace_bytes(const char* entry, const TensorRef& workspace, int device, void** base, size_t* bytes);

// Every tensor of a call lives on q's device; returns that device.
Status common_device(const char* entry, const std::vector<std::pair<const char*, const TensorRef*>>& tensors,
                     int* device);

}  // namespace openmla::python
