// openmla_bench: times the decode kernels with CUDA events (L2 flushed before
// every timed run, median of --iters >= 20, after --warmup-ms of untimed runs
// of the same case) and reports each case against the copy bandwidth and bf16
// GEMM rate measured in the same process, with the SM clock it ran at (NVML).
//   openmla_bench --help | --list | [--case SPEC]... [--filter SUBSTRING] [--json FILE] [options]
// (kUsage below lists every option). The built-in cases are dense_cases() and
// sparse_cases(); --case SPEC replaces them with shapes from the command line.
// "graph" cases time CUDA-graph replays of a whole decode call (schedule +
// attention + combine), so host launch overhead is excluded. The JSON has one
// object per case with the shape in fields, the figures and the ratios to the
// ceilings; bench/plot.py turns it into a roofline and a bar chart.
#include <cublas_v2.h>
#include <dlfcn.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "openmla/openmla.h"

namespace {

constexpr const char* kUsage =
    "usage: openmla_bench [options]\n"
    "  --help                 this text\n"
    "  --list                 print the cases that would run (after --case / --filter) and exit\n"
    "  --case SPEC            run this shape instead of the built-in cases (repeatable). SPEC is\n"
    "                         key=value pairs separated by commas:\n"
    "                           family=dense,b=4,s_q=1,h_q=128,s_k=4096,page=64,dtype=bf16\n"
    "                             [,var=1: lengths normal around s_k] [,graph=1: CUDA-graph replays]\n"
    "                             dtype bf16, fp16 or fp8 (e4m3 q and kv, descales 0.5 / 0.25, bf16 out);\n"
    "                           page 8, 16, 32 or a multiple of 64\n"
    "                           family=sparse,b=128,s_q=2,h_q=128,topk=2048[,ctx=32768] (FP8 cache, page 64)\n"
    "                           either family: [,inv=1: batch-invariant mode] [,chunk=N: and chunks of N blocks]\n"
    "  --batch-invariant-pairs run the issue-27 bar shapes, each in the default and the batch-invariant mode\n"
    "  --filter SUBSTRING     only cases whose name contains SUBSTRING\n"
    "  --json FILE            write the results as JSON (bench/plot.py draws them)\n"
    "  --iters N              timed runs per case, median reported (N >= 20; default 30)\n"
    "  --warmup-ms MS         untimed runs of each case before timing (default 200)\n"
    "  --no-flush             do not flush L2 between timed runs (diagnosis only)\n"
    "  --min-part-cost BLOCKS planner option: least work per SM part\n"
    "  --cluster-split C      planner option, dense: 0 auto, 1 never, 2/4/8 always\n"
    "  --schedule-placement P planner option, decode: 0 auto, 1 schedule kernel, 2 attention kernel\n"
    "                         (batch-invariant cases keep 0: their schedule is the schedule kernel's)\n"
    "  --gather-ceiling       also measure the row-gather ceilings (random rows by index, as the\n"
    "                         sparse kernels read them) and report them beside copy and GEMM\n";

// Planner options for every case (--min-part-cost tunes how finely small calls split).
openmla::PlanOptions g_plan_options;

#define BENCH_CUDA(call)                                                                       \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

void check(const openmla::Status& status, const char* what) {
  if (!status.is_ok()) {
    std::fprintf(stderr, "%s: %s\n", what, status.message().c_str());
    std::exit(1);
  }
}

// ---- device fills: random bf16 (never zeros), NaN poison -----------------------
__global__ void fill_random_bf16(__nv_bfloat16* data, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed ^ uint32_t(i >> 32) * 40503u;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    data[i] = __float2bfloat16((float(h & 0xffffff) / 16777216.f - 0.5f) * scale);
  }
}

// The same values as fp16 (the bench's fp16 cases).
__global__ void bf16_to_fp16(const __nv_bfloat16* in, __half* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    out[i] = __float2half(__bfloat162float(in[i]));
  }
}

// The same values as e4m3 bytes (the bench's dense fp8 cases; NaN stays NaN).
__global__ void bf16_to_e4m3(const __nv_bfloat16* in, __nv_fp8_storage_t* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    out[i] = __nv_cvt_float_to_fp8(__bfloat162float(in[i]), __NV_SATFINITE, __NV_E4M3);
  }
}

// NaN into the slots of each request's last page past its length.
__global__ void poison_page_tails(__nv_bfloat16* kv, const int32_t* block_table, const int32_t* seqlens,
                                  int max_pages, int page_size, int row_elems) {
  const int b = blockIdx.x;
  const int len = seqlens[b];
  const int used_in_last = len % page_size;
  if (len == 0 || used_in_last == 0) return;
  const int page = block_table[size_t(b) * max_pages + (len - 1) / page_size];
  __nv_bfloat16* tail = kv + (size_t(page) * page_size + used_in_last) * row_elems;
  const size_t n = size_t(page_size - used_in_last) * row_elems;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) tail[i] = __float2bfloat16(NAN);
}

// Random 656-byte FP8 tokens: finite e4m3 codes (never the NaN codes 0x7f/0xff),
// power-of-two scales, bf16 RoPE.
__global__ void fill_sparse_fp8_tokens(uint8_t* cache, size_t num_tokens, uint32_t seed) {
  for (size_t t = blockIdx.x * size_t(blockDim.x) + threadIdx.x; t < num_tokens; t += size_t(gridDim.x) * blockDim.x) {
    uint8_t* token = cache + t * openmla::kSparseFp8TokenBytes;
    uint32_t h = uint32_t(t) * 2654435761u ^ seed;
    for (int i = 0; i < 512; ++i) {
      h ^= h << 13; h ^= h >> 17; h ^= h << 5;
      uint8_t code = uint8_t(h);
      if ((code & 0x7f) == 0x7f) code ^= 0x01;
      token[i] = code;
    }
    float* scales = reinterpret_cast<float*>(token + openmla::kSparseFp8ScaleOffset);
    for (int g = 0; g < openmla::kSparseFp8NumScales; ++g) scales[g] = ldexpf(1.f, -8 + int((h >> (4 * g)) & 3));
    __nv_bfloat16* rope = reinterpret_cast<__nv_bfloat16*>(token + openmla::kSparseFp8RopeOffset);
    for (int i = 0; i < openmla::kHeadDimRope; ++i) {
      h ^= h << 13; h ^= h >> 17; h ^= h << 5;
      rope[i] = __float2bfloat16((float(h & 0xffff) / 65536.f - 0.5f));
    }
  }
}

// The SM clock through NVML, loaded at run time (no build dependency; 0 when
// the library or the device is not found). Reported next to each case: the
// compute-bound cases run at the 700 W cap, where the clock, not the kernel,
// moves most from run to run.
class SmClock {
 public:
  SmClock() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY);
    if (lib == nullptr) return;
    auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    auto by_bus_id = reinterpret_cast<int (*)(const char*, void**)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    get_clock_ = reinterpret_cast<int (*)(void*, int, unsigned*)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    char bus_id[32] = {};
    if (init == nullptr || by_bus_id == nullptr || get_clock_ == nullptr || init() != 0 ||
        cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, 0) != cudaSuccess || by_bus_id(bus_id, &device_) != 0) {
      device_ = nullptr;
    }
  }
  unsigned mhz() const {
    constexpr int kNvmlClockSm = 1;
    unsigned clock = 0;
    return device_ != nullptr && get_clock_(device_, kNvmlClockSm, &clock) == 0 ? clock : 0;
  }

 private:
  void* device_ = nullptr;
  int (*get_clock_)(void*, int, unsigned*) = nullptr;
};

struct Timer {
  cudaEvent_t start, stop;
  void* flush = nullptr;
  size_t flush_bytes = size_t(256) << 20;  // > 4x the 60 MB L2
  bool flush_l2 = true;                     // --no-flush: warm-cache timing (diagnosis only)
  // --warmup-ms: the case runs (flush + call, untimed) for this long before
  // timing, so the GPU's clock reflects the case itself rather than the
  // previous case or the GEMM ceiling (measured 2026-11-30: a b = 1 call timed
  // right after the GEMM ceiling ran 17% slower). Compute-bound cases hit the
  // 700 W cap and keep slowing for about a second: --warmup-ms 1000 gives the
  // sustained figure (h_q = 128, s_q = 2: ~3% below the 200 ms one).
  int warmup_ms = 200;
  // Every timed piece of work (flush, events, calls) goes to this one stream:
  // events on the legacy default stream added a cross-stream wait to short calls.
  cudaStream_t stream = nullptr;
  SmClock sm_clock;
  double last_mhz = 0;  // median SM clock sampled right after each timed run of the last median_us
  Timer() {
    BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    BENCH_CUDA(cudaEventCreate(&start));
    BENCH_CUDA(cudaEventCreate(&stop));
    BENCH_CUDA(cudaMalloc(&flush, flush_bytes));
  }
  // Median over `iters` runs of fn, each after an L2 flush.
  template <class Fn>
  double median_us(int iters, Fn&& fn) {
    BENCH_CUDA(cudaDeviceSynchronize());  // inputs filled on the default stream
    fn();  // warm-up
    BENCH_CUDA(cudaDeviceSynchronize());
    const auto warm_start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - warm_start < std::chrono::milliseconds(warmup_ms)) {
      if (flush_l2) BENCH_CUDA(cudaMemsetAsync(flush, 0x5a, flush_bytes, stream));
      fn();
      BENCH_CUDA(cudaStreamSynchronize(stream));
    }
    std::vector<double> times, clocks;
    for (int i = 0; i < iters; ++i) {
      if (flush_l2) BENCH_CUDA(cudaMemsetAsync(flush, i & 0xff, flush_bytes, stream));
      BENCH_CUDA(cudaEventRecord(start, stream));
      fn();
      BENCH_CUDA(cudaEventRecord(stop, stream));
      BENCH_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
      times.push_back(ms * 1000.0);
      clocks.push_back(sm_clock.mhz());
    }
    std::sort(clocks.begin(), clocks.end());
    last_mhz = clocks[clocks.size() / 2];
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }
};

// ---- ceilings ---------------------------------------------------------------------
double measure_copy_gbps(Timer& timer, int iters) {
  const size_t bytes = size_t(2) << 30;
  void *src, *dst;
  BENCH_CUDA(cudaMalloc(&src, bytes));
  BENCH_CUDA(cudaMalloc(&dst, bytes));
  fill_random_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(src), bytes / 2, 7, 1.f);
  const double us = timer.median_us(iters, [&] { BENCH_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, timer.stream)); });
  BENCH_CUDA(cudaFree(src));
  BENCH_CUDA(cudaFree(dst));
  return 2.0 * double(bytes) / (us * 1e-6) / 1e9;  // read + write
}

double measure_gemm_tflops(Timer& timer, int iters) {
  const int n = 8192;
  __nv_bfloat16 *a, *b, *c;
  BENCH_CUDA(cudaMalloc(&a, size_t(n) * n * 2));
  BENCH_CUDA(cudaMalloc(&b, size_t(n) * n * 2));
  BENCH_CUDA(cudaMalloc(&c, size_t(n) * n * 2));
  fill_random_bf16<<<1024, 256>>>(a, size_t(n) * n, 11, 1.f);
  fill_random_bf16<<<1024, 256>>>(b, size_t(n) * n, 13, 1.f);
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) { std::fprintf(stderr, "cublasCreate failed\n"); std::exit(1); }
  cublasSetStream(handle, timer.stream);
  const float alpha = 1.f, beta = 0.f;
  const double us = timer.median_us(iters, [&] {
    cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &beta, c,
                 CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  cublasDestroy(handle);
  BENCH_CUDA(cudaFree(a));
  BENCH_CUDA(cudaFree(b));
  BENCH_CUDA(cudaFree(c));
  return 2.0 * n * double(n) * n / (us * 1e-6) / 1e12;
}

// Row-gather ceiling: sparse kernels read whole cache rows named by an index, so the rate they
// are held to is a gather of such rows, not a copy. Each warp takes four rows at a time, lane l
// loading the row's 16-byte units l, l + 32, ... with evict-first streaming loads (all of them
// before any is used: 64 registers a thread, 32 warps an SM), and folds them into one word
// (stored only if it matches a constant, so the loads stay live and nothing is written).
constexpr int kGatherThreads = 256, kGatherCtasPerSm = 4;
template <int kRowBytes>
__global__ void __launch_bounds__(kGatherThreads, kGatherCtasPerSm)
    gather_rows_kernel(const uint4* table, const int32_t* indices, int64_t num_rows, uint32_t* sink) {
  static_assert(kRowBytes % 16 == 0, "rows of whole 16-byte units");
  constexpr int kUnits = kRowBytes / 16;
  constexpr int kUnitsPerLane = (kUnits + 31) / 32;
  constexpr int kRowsInFlight = 4;
  const int lane = int(threadIdx.x % 32);
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t num_warps = int64_t(gridDim.x) * blockDim.x / 32;
  uint32_t folded = 0;
  for (int64_t first = warp * kRowsInFlight; first < num_rows; first += num_warps * kRowsInFlight) {
    uint4 units[kRowsInFlight][kUnitsPerLane];
#pragma unroll
    for (int r = 0; r < kRowsInFlight; ++r) {
      const int64_t row = first + r;
      const uint4* src = table + (row < num_rows ? int64_t(__ldg(indices + row)) : 0) * kUnits;
#pragma unroll
      for (int u = 0; u < kUnitsPerLane; ++u) {
        const int unit = lane + 32 * u;
        units[r][u] = row < num_rows && unit < kUnits ? __ldcs(src + unit) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsInFlight; ++r) {
#pragma unroll
      for (int u = 0; u < kUnitsPerLane; ++u) folded ^= units[r][u].x ^ units[r][u].y ^ units[r][u].z ^ units[r][u].w;
    }
  }
  if (folded == 0x9e3779b9u) sink[0] = folded;
}

struct GatherCeiling {
  std::string name;
  double gbps;  // row bytes gathered per second
};

// Gathers `num_gathers` rows of kRowBytes, drawn uniformly from a table of `table_rows` rows.
template <int kRowBytes>
GatherCeiling measure_gather_gbps(const std::string& name, int64_t table_rows, int64_t num_gathers, Timer& timer,
                                  int iters, int num_sms) {
  uint4* table;
  int32_t* indices;
  uint32_t* sink;
  BENCH_CUDA(cudaMalloc(&table, size_t(table_rows) * kRowBytes));
  BENCH_CUDA(cudaMalloc(&indices, size_t(num_gathers) * sizeof(int32_t)));
  BENCH_CUDA(cudaMalloc(&sink, sizeof(uint32_t)));
  fill_random_bf16<<<1024, 256>>>(reinterpret_cast<__nv_bfloat16*>(table), size_t(table_rows) * kRowBytes / 2, 17, 1.f);
  std::vector<int32_t> host_indices(static_cast<size_t>(num_gathers));  // [num_gathers]
  std::mt19937 rng(23);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(table_rows - 1));
  for (int32_t& index : host_indices) index = pick(rng);
  BENCH_CUDA(cudaMemcpy(indices, host_indices.data(), host_indices.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  const double us = timer.median_us(iters, [&] {
    gather_rows_kernel<kRowBytes><<<num_sms * kGatherCtasPerSm, kGatherThreads, 0, timer.stream>>>(
        table, indices, num_gathers, sink);
  });
  BENCH_CUDA(cudaFree(table));
  BENCH_CUDA(cudaFree(indices));
  BENCH_CUDA(cudaFree(sink));
  return GatherCeiling{name, double(num_gathers) * kRowBytes / (us * 1e-6) / 1e9};
}

// The gathers of the sparse bench shapes: decode (b = 128, s_q = 2, topk 2048 over 128 requests
// of 32768 tokens: 2.75 GB of 656-byte rows, from HBM) and prefill (s_q = 4096, topk 2048 over
// s_kv = 32768: 37.7 MB of BF16 rows or 21.5 MB of FP8 rows, about the L2's size).
std::vector<GatherCeiling> measure_gather_ceilings(Timer& timer, int iters, int num_sms) {
  std::vector<GatherCeiling> ceilings;
  ceilings.push_back(measure_gather_gbps<656>("656 B rows of a 2.75 GB cache (sparse decode)", int64_t(128) * 32768,
                                              int64_t(128) * 2 * 2048, timer, iters, num_sms));
  ceilings.push_back(measure_gather_gbps<1152>("1152 B rows of a 37.7 MB kv (sparse prefill, bf16)", 32768,
                                               int64_t(4096) * 2048, timer, iters, num_sms));
  ceilings.push_back(measure_gather_gbps<656>("656 B rows of a 21.5 MB cache (sparse prefill, fp8)", 32768,
                                              int64_t(4096) * 2048, timer, iters, num_sms));
  return ceilings;
}

// ---- batch-invariant mode (docs/batch_invariance.md) -----------------------------------
// A case's `invariant` field: 0 the default mode, 1 batch-invariant with the
// automatic chunk, n > 1 batch-invariant with chunks of n - 1 blocks (--case inv=1, chunk=N).
std::string invariant_name(int invariant) {
  if (invariant == 0) return "";
  return invariant == 1 ? " inv" : " inv c=" + std::to_string(invariant - 1);
}

openmla::PlanOptions plan_options_for(int invariant) {
  openmla::PlanOptions options = g_plan_options;
  if (invariant > 0) {
    options.batch_invariant = true;
    options.chunk_blocks = invariant - 1;
    // The batch-invariant mode builds its schedule in the schedule kernel only (the planner refuses
    // --schedule-placement 2 there): its cases run the planner's choice.
    options.schedule_placement = openmla::SchedulePlacement::kAutomatic;
  }
  return options;
}

// ---- dense decode cases -------------------------------------------------------------
struct DenseCase {
  int batch, h_q, s_q, s_k;
  bool variable_lengths;  // normal around s_k (sd s_k / 2, at least s_q); else exactly s_k
  bool graph;             // time CUDA-graph replays
  int page_size = 64;
  openmla::DType dtype = openmla::DType::kBF16;  // q and kv (fp8: e4m3 with descales, out bf16)
  int invariant = 0;  // 0: default mode; else batch-invariant mode (PlanOptions::batch_invariant), see invariant_name()
  std::string name() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "dense b=%d h_q=%d s_q=%d s_k=%d%s%s p=%d%s%s", batch, h_q, s_q, s_k,
                  variable_lengths ? "~" : "", graph ? " graph" : "", page_size,
                  dtype_suffix(), invariant_name(invariant).c_str());
    return buf;
  }
  const char* dtype_suffix() const {
    return dtype == openmla::DType::kFP16 ? " fp16" : dtype == openmla::DType::kFP8E4M3 ? " fp8" : "";
  }
  const char* dtype_name() const { return *dtype_suffix() ? dtype_suffix() + 1 : "bf16"; }
};

// The batch-invariant bar (issue 27): each shape in the default mode, then the
// batch-invariant mode (automatic chunk; b = 1 also with 16-block chunks).
std::vector<DenseCase> batch_invariant_dense_pairs() {
  std::vector<DenseCase> cases;
  for (int s_k : {4096, 16384})
    for (int h_q : {16, 128})
      for (bool variable : {false, true})
        for (int invariant : {0, 1}) {
          DenseCase c{128, h_q, 1, s_k, variable, false};
          c.invariant = invariant;
          cases.push_back(c);
        }
  for (bool graph : {false, true})
    for (int invariant : {0, 1, 1 + 16}) {
      DenseCase c{1, 16, 1, 16384, false, graph};
      c.invariant = invariant;
      cases.push_back(c);
    }
  return cases;
}

std::vector<DenseCase> dense_cases() {
  std::vector<DenseCase> cases;
  for (int s_k : {4096, 16384})
    for (int h_q : {16, 32, 64, 128})
      for (int s_q : {1, 2}) cases.push_back({128, h_q, s_q, s_k, true, false});
  // h_q = 8: a 64-head model at TP8.
  for (int s_k : {4096, 16384}) cases.push_back({128, 8, 1, s_k, true, false});
  // Page sizes against page 64: the memory-bound case and the compute-bound one (pages of fewer than
  // 64 tokens take the column-split kernel there, page 64 and up the alternate-blocks kernel).
  for (int page : {16, 32, 128}) cases.push_back({128, 16, 1, 16384, true, false, page});
  for (int page : {16, 32, 128}) cases.push_back({128, 128, 2, 16384, true, false, page});
  for (int batch : {1, 32, 128})
    for (int h_q : {16, 128})
      for (int s_q : {1, 4}) cases.push_back({batch, h_q, s_q, 1024, false, true});
  // Dense FP8 (vLLM's FP8 KV path): the memory-bound and the compute-bound shapes.
  for (int s_k : {4096, 16384})
    for (int h_q : {16, 128})
      for (int s_q : {1, 2}) {
        DenseCase c{128, h_q, s_q, s_k, true, false};
        c.dtype = openmla::DType::kFP8E4M3;
        cases.push_back(c);
      }
  return cases;
}

// One case's figures and, for the JSON, its shape in fields.
struct Result {
  std::string name;
  double us, tflops, gbps;
  double mhz = 0;  // SM clock (Timer::last_mhz)
  std::string family, dtype;  // "dense" / "sparse"; "bf16", "fp16" or "fp8"
  int batch = 0, s_q = 0, h_q = 0, page = 0, topk = 0;
  double s_k = 0;      // dense: mean length used; sparse: the context the indices spread over
  bool graph = false, variable_lengths = false;
  std::string kernel;  // the kernel the planner chose (decode_kernel_name(plan.kernel))
  int num_parts = 0, cluster_size = 1;  // the plan's SM parts; CTAs per cluster (dense cluster split)
  double flops = 0, bytes = 0;  // per call: the roofline's x is flops / bytes
};

Result run_dense_case(const DenseCase& c, const openmla::DeviceInfo& device, Timer& timer, int iters) {
  using namespace openmla;
  std::mt19937 rng(uint32_t(c.batch * 131 + c.h_q * 7 + c.s_q + c.s_k));
  std::normal_distribution<double> normal(c.s_k, c.s_k / 2.0);
  std::vector<int32_t> seqlens(static_cast<size_t>(c.batch));
  for (auto& len : seqlens) {
    len = c.variable_lengths ? int32_t(std::clamp(std::lround(normal(rng)), long(c.s_q), long(4 * c.s_k))) : c.s_k;
  }
  const int max_len = *std::max_element(seqlens.begin(), seqlens.end());
  const int max_pages = (max_len + c.page_size - 1) / c.page_size;
  std::vector<int32_t> block_table(size_t(c.batch) * max_pages, 2147480000);  // garbage past the last page
  int num_pages = 0;
  for (int b = 0; b < c.batch; ++b) {
    for (int p = 0; p < (seqlens[size_t(b)] + c.page_size - 1) / c.page_size; ++p) {
      block_table[size_t(b) * max_pages + p] = num_pages++;
    }
  }
  std::vector<int32_t> order(static_cast<size_t>(num_pages));  // shuffle the page ids
  for (int i = 0; i < num_pages; ++i) order[size_t(i)] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (auto& page : block_table) if (page != 2147480000) page = order[size_t(page)];

  DenseDecodeShape shape;
  shape.batch = c.batch;
  shape.s_q = c.s_q;
  shape.h_q = c.h_q;
  shape.page_size = c.page_size;
  shape.num_pages = num_pages;
  shape.max_pages_per_seq = max_pages;
  const bool fp8 = c.dtype == DType::kFP8E4M3;
  shape.q_dtype = shape.kv_dtype = c.dtype;
  shape.out_dtype = fp8 ? DType::kBF16 : c.dtype;
  DecodePlan plan;
  check(plan_dense_decode(shape, device, &plan, plan_options_for(c.invariant)), "plan_dense_decode");

  const size_t q_elems = size_t(c.batch) * c.s_q * c.h_q * kHeadDimQK;      // [b, s_q, h_q, 576]
  const size_t kv_elems = size_t(num_pages) * c.page_size * kHeadDimQK;     // [pages, page, 1, 576]
  const size_t out_elems = size_t(c.batch) * c.s_q * c.h_q * kHeadDimV;     // [b, s_q, h_q, 512]
  __nv_bfloat16 *q, *kv, *out;
  float* lse;
  int32_t *d_table, *d_seqlens;
  float* descales;  // fp8: q_scale, kv_scale
  void* workspace;
  BENCH_CUDA(cudaMalloc(&descales, 2 * sizeof(float)));
  BENCH_CUDA(cudaMalloc(&q, q_elems * 2));
  BENCH_CUDA(cudaMalloc(&kv, kv_elems * 2));
  BENCH_CUDA(cudaMalloc(&out, out_elems * 2));
  BENCH_CUDA(cudaMalloc(&lse, size_t(c.batch) * c.h_q * c.s_q * 4));
  BENCH_CUDA(cudaMalloc(&d_table, block_table.size() * 4));
  BENCH_CUDA(cudaMalloc(&d_seqlens, seqlens.size() * 4));
  BENCH_CUDA(cudaMalloc(&workspace, std::max<size_t>(plan.workspace.total_bytes, 256)));
  fill_random_bf16<<<1024, 256>>>(q, q_elems, 1, 1.f);
  fill_random_bf16<<<4096, 256>>>(kv, kv_elems, 2, 1.f);
  BENCH_CUDA(cudaMemcpy(d_table, block_table.data(), block_table.size() * 4, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(d_seqlens, seqlens.data(), seqlens.size() * 4, cudaMemcpyHostToDevice));
  poison_page_tails<<<c.batch, 256>>>(kv, d_table, d_seqlens, max_pages, c.page_size, kHeadDimQK);
  BENCH_CUDA(cudaGetLastError());
  if (c.dtype != DType::kBF16) {  // same values, converted in place through a scratch copy
    for (auto [data, n] : {std::pair{q, q_elems}, std::pair{kv, kv_elems}}) {
      __nv_bfloat16* scratch;
      BENCH_CUDA(cudaMalloc(&scratch, n * 2));
      BENCH_CUDA(cudaMemcpy(scratch, data, n * 2, cudaMemcpyDeviceToDevice));
      if (fp8) {
        bf16_to_e4m3<<<4096, 256>>>(scratch, reinterpret_cast<__nv_fp8_storage_t*>(data), n);
      } else {
        bf16_to_fp16<<<4096, 256>>>(scratch, reinterpret_cast<__half*>(data), n);
      }
      BENCH_CUDA(cudaGetLastError());
      BENCH_CUDA(cudaFree(scratch));
    }
  }
  const float descale_values[2] = {0.5f, 0.25f};  // not 1: the descales are applied
  BENCH_CUDA(cudaMemcpy(descales, descale_values, sizeof descale_values, cudaMemcpyHostToDevice));

  DenseDecodeParams params;
  params.shape = shape;
  params.q = q;
  params.q_stride_h = kHeadDimQK;
  params.q_stride_s = int64_t(c.h_q) * kHeadDimQK;
  params.q_stride_b = c.s_q * params.q_stride_s;
  params.kv_cache = kv;
  params.kv_stride_head = kHeadDimQK;
  params.kv_stride_token = kHeadDimQK;
  params.kv_stride_page = int64_t(c.page_size) * kHeadDimQK;
  params.block_table = d_table;
  params.block_table_stride_b = max_pages;
  params.seqlens = d_seqlens;
  params.out = out;
  params.out_stride_h = kHeadDimV;
  params.out_stride_s = int64_t(c.h_q) * kHeadDimV;
  params.out_stride_b = c.s_q * params.out_stride_s;
  params.lse = lse;
  params.lse_stride_h = c.s_q;
  params.lse_stride_b = int64_t(c.h_q) * c.s_q;
  params.softmax_scale = 1.f / std::sqrt(float(kHeadDimQK));
  params.causal = c.s_q > 1;
  if (fp8) params.q_scale = descales, params.kv_scale = descales + 1;

  auto call = [&] { check(dense_decode_run(params, plan, workspace, plan.workspace.total_bytes, timer.stream), "run"); };
  double us = 0;
  if (c.graph) {
    cudaStream_t stream;
    BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    check(dense_decode_run(params, plan, workspace, plan.workspace.total_bytes, stream), "run (capture)");
    BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
    BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    us = timer.median_us(iters, [&] { BENCH_CUDA(cudaGraphLaunch(exec, timer.stream)); });
    BENCH_CUDA(cudaGraphExecDestroy(exec));
    BENCH_CUDA(cudaGraphDestroy(graph));
    BENCH_CUDA(cudaStreamDestroy(stream));
  } else {
    us = timer.median_us(iters, call);
  }
  BENCH_CUDA(cudaDeviceSynchronize());

  double mean_len = 0;
  for (int len : seqlens) mean_len += len;
  mean_len /= c.batch;
  const double flops = double(c.batch) * c.s_q * c.h_q * (2.0 * kHeadDimQK + 2.0 * kHeadDimV) * mean_len;
  const double in_bytes = fp8 ? 1.0 : 2.0;  // per q / kv element
  const double bytes = in_bytes * (double(q_elems) + mean_len * c.batch * kHeadDimQK) + 2.0 * double(out_elems);
  for (void* p : {(void*)q, (void*)kv, (void*)out, (void*)lse, (void*)d_table, (void*)d_seqlens, (void*)descales,
                  workspace}) {
    BENCH_CUDA(cudaFree(p));
  }
  Result r{c.name(), us, flops / (us * 1e-6) / 1e12, bytes / (us * 1e-6) / 1e9};
  r.family = "dense";
  r.dtype = c.dtype_name();
  r.batch = c.batch, r.s_q = c.s_q, r.h_q = c.h_q, r.page = c.page_size, r.s_k = mean_len;
  r.graph = c.graph, r.variable_lengths = c.variable_lengths;
  r.kernel = decode_kernel_name(plan.kernel);
  r.num_parts = plan.num_parts, r.cluster_size = plan.cluster_size;
  r.flops = flops, r.bytes = bytes;
  return r;
}

// ---- sparse FP8 decode cases (issue 4) ------------------------------------------------
struct SparseCase {
  int batch, h_q, s_q, topk;
  int context = 32768;  // indices spread over this many tokens
  int invariant = 0;    // as DenseCase::invariant
  std::string name() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "sparse b=%d h_q=%d s_q=%d topk=%d ctx=%d%s", batch, h_q, s_q, topk, context,
                  invariant_name(invariant).c_str());
    return buf;
  }
};

std::vector<SparseCase> batch_invariant_sparse_pairs() {
  std::vector<SparseCase> cases;
  for (int s_q : {1, 2})
    for (int h_q : {16, 64, 128})
      for (int invariant : {0, 1}) cases.push_back({128, h_q, s_q, 2048, 32768, invariant});
  return cases;
}

std::vector<SparseCase> sparse_cases() {
  std::vector<SparseCase> cases;
  for (int batch : {64, 128})
    for (int s_q : {1, 2})
      for (int h_q : {16, 64, 128}) cases.push_back({batch, h_q, s_q, 2048});
  cases.push_back({128, 8, 1, 2048});  // h_q = 8: a 64-head model at TP8
  return cases;
}

Result run_sparse_case(const SparseCase& c, const openmla::DeviceInfo& device, Timer& timer, int iters) {
  using namespace openmla;
  constexpr int kPage = 64;
  std::mt19937 rng(uint32_t(c.batch * 31 + c.h_q * 7 + c.s_q));
  // Each request owns its own context; indices are distinct tokens of it.
  const int pages_per_request = c.context / kPage;
  const int num_pages = c.batch * pages_per_request;
  std::vector<int32_t> indices(size_t(c.batch) * c.s_q * c.topk);  // [b, s_q, topk]
  std::vector<int32_t> tokens(static_cast<size_t>(c.context));
  for (int b = 0; b < c.batch; ++b) {
    for (int s = 0; s < c.s_q; ++s) {
      for (int i = 0; i < c.context; ++i) tokens[size_t(i)] = i;
      std::shuffle(tokens.begin(), tokens.end(), rng);
      for (int k = 0; k < c.topk; ++k) {
        indices[(size_t(b) * c.s_q + s) * c.topk + k] = b * c.context + tokens[size_t(k)];
      }
    }
  }
  SparseDecodeShape shape;
  shape.batch = c.batch;
  shape.s_q = c.s_q;
  shape.h_q = c.h_q;
  shape.topk = c.topk;
  shape.page_size = kPage;
  shape.num_pages = num_pages;
  DecodePlan plan;
  check(plan_sparse_decode(shape, device, &plan, plan_options_for(c.invariant)), "plan_sparse_decode");

  const size_t q_elems = size_t(c.batch) * c.s_q * c.h_q * kHeadDimQK;    // [b, s_q, h_q, 576]
  const size_t out_elems = size_t(c.batch) * c.s_q * c.h_q * kHeadDimV;   // [b, s_q, h_q, 512]
  const size_t cache_bytes = size_t(num_pages) * kPage * kSparseFp8TokenBytes;  // [pages, 64, 1, 656]
  __nv_bfloat16 *q, *out;
  uint8_t* cache;
  float* lse;
  int32_t* d_indices;
  void* workspace;
  BENCH_CUDA(cudaMalloc(&q, q_elems * 2));
  BENCH_CUDA(cudaMalloc(&out, out_elems * 2));
  BENCH_CUDA(cudaMalloc(&cache, cache_bytes));
  BENCH_CUDA(cudaMalloc(&lse, size_t(c.batch) * c.h_q * c.s_q * 4));
  BENCH_CUDA(cudaMalloc(&d_indices, indices.size() * 4));
  BENCH_CUDA(cudaMalloc(&workspace, std::max<size_t>(plan.workspace.total_bytes, 256)));
  fill_random_bf16<<<1024, 256>>>(q, q_elems, 3, 1.f);
  fill_sparse_fp8_tokens<<<1024, 256>>>(cache, size_t(num_pages) * kPage, 5);
  BENCH_CUDA(cudaGetLastError());
  BENCH_CUDA(cudaMemcpy(d_indices, indices.data(), indices.size() * 4, cudaMemcpyHostToDevice));

  SparseDecodeParams params;
  params.shape = shape;
  params.q = q;
  params.q_stride_h = kHeadDimQK;
  params.q_stride_s = int64_t(c.h_q) * kHeadDimQK;
  params.q_stride_b = c.s_q * params.q_stride_s;
  params.kv_cache = cache;
  params.kv_stride_page_bytes = int64_t(kPage) * kSparseFp8TokenBytes;
  params.indices = d_indices;
  params.indices_stride_s = c.topk;
  params.indices_stride_b = int64_t(c.s_q) * c.topk;
  params.out = out;
  params.out_stride_h = kHeadDimV;
  params.out_stride_s = int64_t(c.h_q) * kHeadDimV;
  params.out_stride_b = c.s_q * params.out_stride_s;
  params.lse = lse;
  params.lse_stride_h = c.s_q;
  params.lse_stride_b = int64_t(c.h_q) * c.s_q;
  params.softmax_scale = 1.f / std::sqrt(float(kHeadDimQK));
  const double us = timer.median_us(iters, [&] {
    check(sparse_decode_run(params, plan, workspace, plan.workspace.total_bytes, timer.stream), "sparse_decode_run");
  });
  BENCH_CUDA(cudaDeviceSynchronize());
  const double flops = double(c.batch) * c.s_q * c.h_q * c.topk * 2.0 * (kHeadDimQK + kHeadDimV);
  const double bytes = 2.0 * (double(q_elems) + double(out_elems)) + double(c.batch) * c.s_q * c.topk * kSparseFp8TokenBytes;
  for (void* p : {(void*)q, (void*)out, (void*)cache, (void*)lse, (void*)d_indices, workspace}) BENCH_CUDA(cudaFree(p));
  Result r{c.name(), us, flops / (us * 1e-6) / 1e12, bytes / (us * 1e-6) / 1e9};
  r.family = "sparse";
  r.dtype = "fp8";
  r.batch = c.batch, r.s_q = c.s_q, r.h_q = c.h_q, r.page = kPage, r.topk = c.topk, r.s_k = c.context;
  r.kernel = decode_kernel_name(plan.kernel);
  r.num_parts = plan.num_parts;
  r.flops = flops, r.bytes = bytes;
  return r;
}

// ---- --case SPEC --------------------------------------------------------------------
// "family=dense,b=4,s_q=1,h_q=128,s_k=4096,page=64,dtype=bf16" -> a case; false with a message on error.
bool parse_case(const std::string& spec, std::vector<DenseCase>* dense, std::vector<SparseCase>* sparse,
                std::string* error) {
  std::map<std::string, std::string> kv;
  std::stringstream items(spec);
  for (std::string item; std::getline(items, item, ',');) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      *error = "--case: expected key=value, got '" + item + "'";
      return false;
    }
    kv[item.substr(0, eq)] = item.substr(eq + 1);
  }
  auto take_int = [&](const char* key, int fallback, int* value) {
    auto it = kv.find(key);
    if (it == kv.end()) return (*value = fallback), true;
    char* end = nullptr;
    const long parsed = std::strtol(it->second.c_str(), &end, 10);
    kv.erase(it);
    if (*end != '\0' || parsed < 0 || parsed > (1 << 30)) {
      *error = std::string("--case: '") + key + "' must be a non-negative integer";
      return false;
    }
    return (*value = int(parsed)), true;
  };
  const std::string family = kv.count("family") ? kv["family"] : "dense";
  const std::string dtype = kv.count("dtype") ? kv["dtype"] : (family == "sparse" ? "fp8" : "bf16");
  kv.erase("family");
  kv.erase("dtype");
  int batch, s_q, h_q, graph, variable, invariant, chunk;
  if (!take_int("b", 1, &batch) || !take_int("s_q", 1, &s_q) || !take_int("h_q", 128, &h_q) ||
      !take_int("inv", 0, &invariant) || !take_int("chunk", 0, &chunk)) {
    return false;
  }
  const int invariant_field = invariant != 0 || chunk > 0 ? 1 + chunk : 0;
  if (family == "dense") {
    int s_k, page;
    if (!take_int("s_k", 4096, &s_k) || !take_int("page", 64, &page) || !take_int("graph", 0, &graph) ||
        !take_int("var", 0, &variable)) {
      return false;
    }
    if (dtype != "bf16" && dtype != "fp16" && dtype != "fp8") {
      *error = "--case: dense dtype must be bf16, fp16 or fp8, got '" + dtype + "'";
      return false;
    }
    DenseCase c{batch, h_q, s_q, s_k, variable != 0, graph != 0, page};
    c.dtype = dtype == "fp16" ? openmla::DType::kFP16 : dtype == "fp8" ? openmla::DType::kFP8E4M3 : openmla::DType::kBF16;
    c.invariant = invariant_field;
    dense->push_back(c);
  } else if (family == "sparse") {
    int topk, context;
    if (!take_int("topk", 2048, &topk) || !take_int("ctx", 32768, &context)) return false;
    if (dtype != "fp8") {
      *error = "--case: sparse dtype is fp8 (the 656-byte cache), got '" + dtype + "'";
      return false;
    }
    sparse->push_back({batch, h_q, s_q, topk, context, invariant_field});
  } else {
    *error = "--case: family must be dense or sparse, got '" + family + "'";
    return false;
  }
  if (!kv.empty()) {
    *error = "--case: unknown key '" + kv.begin()->first + "' for family " + family;
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, filter;
  bool flush_l2 = true, list_only = false, gather_ceiling = false;
  int iters = 30;
  int warmup_ms = -1;  // -1: Timer's default
  std::vector<DenseCase> custom_dense;
  std::vector<SparseCase> custom_sparse;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--list") list_only = true;
    else if (arg == "--case" && i + 1 < argc) {
      std::string error;
      if (!parse_case(argv[++i], &custom_dense, &custom_sparse, &error)) {
        std::fprintf(stderr, "%s\n", error.c_str());
        return 2;
      }
    } else if (arg == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (arg == "--iters" && i + 1 < argc) iters = std::max(20, std::atoi(argv[++i]));
    else if (arg == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (arg == "--min-part-cost" && i + 1 < argc) g_plan_options.min_part_cost = std::atoi(argv[++i]);
    else if (arg == "--cluster-split" && i + 1 < argc) g_plan_options.cluster_split = std::atoi(argv[++i]);
    else if (arg == "--schedule-placement" && i + 1 < argc) {
      g_plan_options.schedule_placement = static_cast<openmla::SchedulePlacement>(std::atoi(argv[++i]));
    }
    else if (arg == "--batch-invariant-pairs") {
      for (const DenseCase& c : batch_invariant_dense_pairs()) custom_dense.push_back(c);
      for (const SparseCase& c : batch_invariant_sparse_pairs()) custom_sparse.push_back(c);
    }
    else if (arg == "--no-flush") flush_l2 = false;
    else if (arg == "--gather-ceiling") gather_ceiling = true;
    else if (arg == "--warmup-ms" && i + 1 < argc) warmup_ms = std::max(0, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "openmla_bench: unknown or incomplete option '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  const bool custom = !custom_dense.empty() || !custom_sparse.empty();
  const std::vector<DenseCase> all_dense = custom ? custom_dense : dense_cases();
  const std::vector<SparseCase> all_sparse = custom ? custom_sparse : sparse_cases();
  auto selected = [&](const std::string& name) { return filter.empty() || name.find(filter) != std::string::npos; };
  if (list_only) {  // no GPU needed
    for (const DenseCase& c : all_dense)
      if (selected(c.name())) std::printf("%s\n", c.name().c_str());
    for (const SparseCase& c : all_sparse)
      if (selected(c.name())) std::printf("%s\n", c.name().c_str());
    return 0;
  }
  openmla::DeviceInfo device;
  check(openmla::query_device_info(0, &device), "query_device_info");
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  Timer timer;
  timer.flush_l2 = flush_l2;
  if (warmup_ms >= 0) timer.warmup_ms = warmup_ms;
  const double copy_gbps = measure_copy_gbps(timer, iters);
  const double copy_mhz = timer.last_mhz;
  const double gemm_tflops = measure_gemm_tflops(timer, iters);
  const double gemm_mhz = timer.last_mhz;
  std::printf("device: %s, %d SMs; ceilings this run: copy %.0f GB/s (SM %.0f MHz), bf16 GEMM %.0f TFLOP/s (SM %.0f MHz)\n",
              prop.name, device.num_sms, copy_gbps, copy_mhz, gemm_tflops, gemm_mhz);
  std::vector<GatherCeiling> gather_ceilings;
  if (gather_ceiling) gather_ceilings = measure_gather_ceilings(timer, iters, device.num_sms);
  for (const GatherCeiling& g : gather_ceilings) {
    std::printf("gather ceiling: %s: %.0f GB/s (%.1f%% of copy)\n", g.name.c_str(), g.gbps, 100.0 * g.gbps / copy_gbps);
  }
  std::printf("%-48s %10s %9s %9s %8s %8s %6s  %s\n", "case", "us", "TFLOP/s", "GB/s", "%copy", "%gemm", "MHz",
              "kernel (parts)");
  std::vector<Result> results;
  auto report = [&](Result r) {
    r.mhz = timer.last_mhz;
    std::printf("%-48s %10.1f %9.1f %9.0f %7.1f%% %7.1f%% %6.0f  %s (%d)\n", r.name.c_str(), r.us, r.tflops, r.gbps,
                100.0 * r.gbps / copy_gbps, 100.0 * r.tflops / gemm_tflops, r.mhz, r.kernel.c_str(), r.num_parts);
    std::fflush(stdout);
    results.push_back(r);
  };
  for (const DenseCase& c : all_dense) {
    if (selected(c.name())) report(run_dense_case(c, device, timer, iters));
  }
  for (const SparseCase& c : all_sparse) {
    if (selected(c.name())) report(run_sparse_case(c, device, timer, iters));
  }
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr) { std::perror(json_path.c_str()); return 1; }
    // format 2: the shape in fields (format 1 had only the "case" string).
    std::fprintf(f, "{\n  \"format\": 2, \"name\": \"OpenMLA\",\n");
    std::fprintf(f, "  \"device\": \"%s\", \"num_sms\": %d, \"copy_gbps\": %.1f, \"gemm_tflops\": %.1f,\n",
                 prop.name, device.num_sms, copy_gbps, gemm_tflops);
    std::fprintf(f, "  \"copy_sm_mhz\": %.0f, \"gemm_sm_mhz\": %.0f,\n", copy_mhz, gemm_mhz);
    std::fprintf(f, "  \"gather_ceilings\": [");
    for (size_t i = 0; i < gather_ceilings.size(); ++i) {
      std::fprintf(f, "%s{\"name\": \"%s\", \"gbps\": %.1f}", i ? ", " : "", gather_ceilings[i].name.c_str(),
                   gather_ceilings[i].gbps);
    }
    std::fprintf(f, "],\n");
    std::fprintf(f, "  \"iters\": %d, \"warmup_ms\": %d, \"l2_flush\": %s,\n  \"cases\": [\n", iters,
                 timer.warmup_ms, flush_l2 ? "true" : "false");
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(f,
                   "    {\"case\": \"%s\", \"family\": \"%s\", \"dtype\": \"%s\", \"b\": %d, \"s_q\": %d, "
                   "\"h_q\": %d, \"s_k\": %.1f, \"page\": %d, \"topk\": %d, \"graph\": %s, \"variable_lengths\": %s,\n"
                   "     \"kernel\": \"%s\", \"num_parts\": %d, \"cluster_size\": %d,\n"
                   "     \"us\": %.2f, \"tflops\": %.2f, \"gbps\": %.1f, \"flops\": %.6g, \"bytes\": %.6g, "
                   "\"copy_ratio\": %.4f, \"gemm_ratio\": %.4f, \"sm_mhz\": %.0f}%s\n",
                   r.name.c_str(), r.family.c_str(), r.dtype.c_str(), r.batch, r.s_q, r.h_q, r.s_k, r.page, r.topk,
                   r.graph ? "true" : "false", r.variable_lengths ? "true" : "false", r.kernel.c_str(), r.num_parts,
                   r.cluster_size, r.us, r.tflops, r.gbps, r.flops, r.bytes, r.gbps / copy_gbps,
                   r.tflops / gemm_tflops, r.mhz, i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  return 0;
}
