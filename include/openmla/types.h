// Element types, fixed MLA dimensions and the device description the planner takes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace openmla {

enum class DType : int32_t {
  kBF16 = 0,
  kFP16,
  kFP8E4M3,  // float8_e4m3fn (finite-only, max 448)
  kFP32,
  kInt32,
};

const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);

// MLA in absorbed form: 512 latent dims, optionally followed by 64 RoPE dims.
inline constexpr int kHeadDimLatent = 512;
inline constexpr int kHeadDimRope = 64;
inline constexpr int kHeadDimQK = kHeadDimLatent + kHeadDimRope;  // 576
inline constexpr int kHeadDimV = kHeadDimLatent;                  // 512

// Sparse FP8 cache ("656-byte" format, DeepSeek-V3.2), per token:
//   bytes [0, 512)   512 x e4m3 latent values
//   bytes [512, 528) 4 x fp32 scales; scale t covers values [128 t, 128 t + 128)
//   bytes [528, 656) 64 x bf16 RoPE values (not quantised)
inline constexpr int kSparseFp8TokenBytes = 656;
inline constexpr int kSparseFp8ScaleOffset = 512;
inline constexpr int kSparseFp8NumScales = 4;
inline constexpr int kSparseFp8ValuesPerScale = 128;
inline constexpr int kSparseFp8RopeOffset = 528;

// Scheduling granule: the KV tokens one kernel iteration consumes.
inline constexpr int kKvBlockTokens = 64;

// What the planner needs to know about the target device. The caller fills it
// (e.g. from cudaGetDeviceProperties); the planner never queries the device.
struct DeviceInfo {
  int num_sms = 132;
  int max_smem_per_block = 227 * 1024;
  int cc_major = 9;
  int cc_minor = 0;
};

}  // namespace openmla
