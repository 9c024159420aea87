// SPDX-License-Identifier: MIT
// libcuda.so.1 of one simulated H200, for tests and CPU profiles without a GPU (stub_driver.h says what it
// simulates). Only what launchfit asks of a driver is here; every other entry point is reported missing by
// cuGetProcAddress, as an older driver's would be.

#include "stub_driver.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

// ---- the simulated device: an H200 SXM as the driver reports it ----

constexpr int sm_count = 132;
constexpr int max_threads_per_sm = 2048;
constexpr int max_blocks_per_sm = 32;
constexpr int regs_per_sm = 65536;
constexpr int smem_per_sm = 233472;
constexpr int smem_optin = 232448;
constexpr int smem_reserved = 1024;

int device_attribute(CUdevice_attribute a) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return smem_optin;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return smem_per_sm;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: return smem_reserved;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return regs_per_sm;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return regs_per_sm;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return sm_count;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return max_threads_per_sm;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return max_blocks_per_sm;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 60 * 1024 * 1024;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 6144;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 3201000;
    default: return 0;
  }
}

// ---- entry points: call counts and injected failures ----

#define STUB_ENTRIES(X)                                                                                     \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGet)                      \
  X(cuDeviceGetCount) X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDeviceGetUuid) X(cuCtxGetCurrent)      \
  X(cuCtxSetCurrent) X(cuCtxGetDevice) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)             \
  X(cuCtxGetId) X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuFuncGetName) X(cuFuncGetParamInfo)          \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) X(cuOccupancyMaxPotentialBlockSize)               \
  X(cuOccupancyMaxPotentialClusterSize) X(cuOccupancyMaxActiveClusters)                                    \
  X(cuLaunchKernelEx) X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime)         \
  X(cuEventDestroy) X(cuStreamSynchronize) X(cuCtxSynchronize) X(cuStreamIsCapturing) X(cuMemHostAlloc)     \
  X(cuMemHostGetDevicePointer) X(cuMemFreeHost) X(cuStreamWaitValue32) X(cuStreamGetCaptureInfo)            \
  X(cuGraphAddNode) X(cuGraphKernelNodeSetAttribute) X(cuGraphKernelNodeGetParams)                          \
  X(cuGraphKernelNodeSetParams) X(cuGraphExecKernelNodeSetParams) X(cuGraphGetNodes)                        \
  X(cuGraphNodeGetType) X(cuGraphDestroyNode) X(cuUserObjectCreate) X(cuUserObjectRelease)                  \
  X(cuGraphRetainUserObject) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamBeginCapture)                   \
  X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy)               \
  X(cuGraphDestroy)

enum entry_id {
#define STUB_ID(name) id_##name,
  STUB_ENTRIES(STUB_ID)
#undef STUB_ID
      entry_count
};

constexpr const char* entry_names[] = {
#define STUB_NAME(name) #name,
    STUB_ENTRIES(STUB_NAME)
#undef STUB_NAME
};

std::atomic<unsigned long long> calls[entry_count];
std::atomic<bool> any_failure{false};
// launchfit_stub_on_call: a test's function called at the start of one entry point (null: none), with its argument.
std::atomic<void (*)(void*)> hooks[entry_count];
std::atomic<void*> hook_args[entry_count];

struct failure {
  CUresult code = CUDA_SUCCESS;
  int skip = 0;   // calls that still succeed first
  int times = 0;  // < 0: until cleared
};

struct state {
  std::mutex m;
  failure failures[entry_count];
};

state& the_state() {
  static state& s = *new state;  // never destroyed: launchfit may call the driver from static destructors
  return s;
}

int entry_of(const char* name) {
  for (int i = 0; i < entry_count; ++i)
    if (std::strcmp(entry_names[i], name) == 0) return i;
  return -1;
}

// Counts the call; the injected failure of this entry point, if any.
CUresult enter(entry_id id) {
  calls[id].fetch_add(1, std::memory_order_relaxed);
  if (void (*hook)(void*) = hooks[id].load(std::memory_order_acquire))
    hook(hook_args[id].load(std::memory_order_relaxed));
  if (!any_failure.load(std::memory_order_relaxed)) return CUDA_SUCCESS;
  state& s = the_state();
  std::lock_guard<std::mutex> lock(s.m);
  failure& f = s.failures[id];
  if (f.times == 0) return CUDA_SUCCESS;
  if (f.skip > 0) {
    --f.skip;
    return CUDA_SUCCESS;
  }
  if (f.times > 0) --f.times;
  return f.code;
}

#define ENTER(name)                                     \
  if (const CUresult failed = enter(id_##name); failed) \
  return failed

// ---- kernels ----

// A launch as cuLaunchKernelEx was given it (no allocation: the stub's launch stays cheap beside launchfit's).
struct recorded_launch {
  CUlaunchConfig config{};
  CUlaunchAttribute attrs[8]{};
  unsigned attr_count = 0;

  void take(const CUlaunchConfig& c) {
    config = c;
    attr_count = std::min(c.numAttrs, 8u);
    for (unsigned i = 0; i < attr_count; ++i) attrs[i] = c.attrs[i];
    config.attrs = nullptr;
  }
};

struct stub_function {
  recorded_launch last;  // under the launches' lock
  std::string name;
  int regs = 32;
  int static_smem = 0;
  int max_threads = 1024;
  std::atomic<int> max_dynamic_smem{49152};  // cuFuncSetAttribute, while another thread may launch
  std::atomic<bool> non_portable_cluster{false};  // CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
  unsigned required_cluster[3] = {0, 0, 0};        // __cluster_dims__ (launchfit_stub_set_compiled_cluster)
  std::vector<size_t> param_sizes;
  std::atomic<bool> params_reported{true};  // cuFuncGetParamInfo answers (launchfit_stub_report_params)
  double best_ms = 0.001;
  unsigned best_block = 256;
};

stub_function* fn(CUfunction f) { return reinterpret_cast<stub_function*>(f); }

// Resident blocks per SM by the occupancy rules of sm_90 (warps, registers in 256-register units per warp,
// shared memory in 128-byte units plus the reserved kilobyte, blocks).
int resident_blocks(const stub_function& k, int block, size_t dynamic_smem) {
  if (block <= 0 || block > k.max_threads) return 0;
  const int warps = (block + 31) / 32;
  int n = std::min(max_blocks_per_sm, (max_threads_per_sm / 32) / warps);
  const int regs_per_warp = ((k.regs * 32 + 255) / 256) * 256;
  if (regs_per_warp > 0) {
    const int warps_by_regs = (regs_per_sm / regs_per_warp) / 4 * 4;  // warp allocation granularity 4
    n = std::min(n, warps_by_regs / warps);
  }
  const size_t smem = static_cast<size_t>(k.static_smem) + dynamic_smem;
  if (smem > static_cast<size_t>(smem_optin)) return 0;
  const size_t per_block = (smem + smem_reserved + 127) / 128 * 128;
  n = std::min<long long>(n, static_cast<long long>(smem_per_sm / per_block));
  return std::max(n, 0);
}

// ---- launches, events, the simulated clock ----

struct launches {
  std::mutex m;
  double clock_ms = 0;  // the simulated time of every launch outside a capture
  recorded_launch any;
};

launches& the_launches() {
  static launches& l = *new launches;
  return l;
}

double cost_ms(const stub_function& k, unsigned block_threads) {
  const double doublings = std::fabs(std::log2(static_cast<double>(std::max(block_threads, 1u)) /
                                               static_cast<double>(std::max(k.best_block, 1u))));
  return k.best_ms * (1.0 + 0.25 * doublings);
}

struct stub_event {
  bool recorded = false;
  double at_ms = 0;
};

// ---- graphs ----

struct stub_user_object {
  void* ptr = nullptr;
  CUhostFn destroy = nullptr;
  unsigned refs = 0;
};

struct stub_graph;

struct stub_node {
  stub_graph* graph = nullptr;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_KERNEL;
  CUDA_KERNEL_NODE_PARAMS params{};
  std::vector<std::vector<unsigned char>> arg_values;  // the node's copies of its arguments
  std::vector<void*> arg_ptrs;
  std::vector<CUlaunchAttribute> attrs;

  void set(const CUDA_KERNEL_NODE_PARAMS& p) {
    // Copied before the old copies go: the arguments given may be this node's own (read back from it).
    std::vector<std::vector<unsigned char>> values;
    const stub_function* k = fn(p.func);
    if (k && p.kernelParams) {
      for (size_t i = 0; i < k->param_sizes.size(); ++i) {
        const auto* from = static_cast<const unsigned char*>(p.kernelParams[i]);
        values.emplace_back(from, from + k->param_sizes[i]);
      }
    }
    params = p;
    arg_values.swap(values);
    arg_ptrs.clear();
    for (auto& v : arg_values) arg_ptrs.push_back(v.data());
    arg_ptrs.push_back(nullptr);
    params.kernelParams = arg_ptrs.data();
    params.extra = nullptr;
  }
};

struct stub_graph {
  std::vector<std::unique_ptr<stub_node>> nodes;
  unsigned long long instantiated = 0;            // executable graphs made of it
  std::map<stub_user_object*, unsigned> objects;  // references this graph holds
  int execs = 0;
  bool destroyed = false;
  bool released = false;  // claimed by the one caller that frees it
};

struct stub_exec {
  stub_graph* graph = nullptr;
  std::map<stub_node*, CUDA_KERNEL_NODE_PARAMS> params;
};

struct stub_capture {
  stub_graph* graph = nullptr;
  unsigned long long id = 0;
  CUgraphNode last = nullptr;
  CUgraphNode deps = nullptr;  // what cuStreamGetCaptureInfo hands out: valid until the capture's next change
};

struct graphs {
  std::mutex m;
  // Every graph and executable graph not destroyed yet, as a driver holds them (reachable until destroyed).
  std::set<stub_graph*> live_graphs;
  std::set<stub_exec*> live_execs;
  std::map<CUstream, stub_capture> captures;
  std::atomic<int> capturing{0};
  unsigned long long next_capture = 1;
  unsigned long long instantiations = 0;
  unsigned long long graph_launches = 0;
  std::set<void*> live_streams;  // made by cuStreamCreate, not destroyed yet
  // launchfit_stub_reuse_graph_handles(1): a destroyed graph's handle is the next capture's, as a driver's
  // allocator may hand it out again.
  bool reuse_handles = false;
  std::vector<stub_graph*> free_graphs;
  std::vector<std::unique_ptr<stub_node>> free_nodes;  // the last is the next capture's first node
};

// A node for a capture: a destroyed graph's, in the order that graph made them, while handles are reused.
std::unique_ptr<stub_node> new_node_locked(graphs& g) {
  if (!g.reuse_handles || g.free_nodes.empty()) return std::make_unique<stub_node>();
  std::unique_ptr<stub_node> n = std::move(g.free_nodes.back());
  g.free_nodes.pop_back();
  *n = stub_node{};
  return n;
}

graphs& the_graphs() {
  static graphs& g = *new graphs;
  return g;
}

// Releases `count` references of `o`; its destroy callback runs (without any lock) at the last one.
void release_object(stub_user_object* o, unsigned count) {
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(the_graphs().m);
    o->refs = o->refs > count ? o->refs - count : 0;
    last = o->refs == 0;
  }
  if (!last) return;
  if (o->destroy) o->destroy(o->ptr);
  delete o;
}

// The graph's references, released once the graph is destroyed and no executable graph of it is left.
void release_graph_if_done(stub_graph* g) {
  std::map<stub_user_object*, unsigned> objects;
  {
    std::lock_guard<std::mutex> lock(the_graphs().m);
    if (!g->destroyed || g->execs > 0 || g->released) return;
    g->released = true;
    the_graphs().live_graphs.erase(g);
    objects.swap(g->objects);
  }
  for (auto& [o, n] : objects) release_object(o, n);
  {
    std::lock_guard<std::mutex> lock(the_graphs().m);
    if (the_graphs().reuse_handles) {
      auto& free_nodes = the_graphs().free_nodes;
      for (auto it = g->nodes.rbegin(); it != g->nodes.rend(); ++it) free_nodes.push_back(std::move(*it));
      *g = stub_graph{};
      the_graphs().free_graphs.push_back(g);
      return;
    }
  }
  delete g;
}

int stub_context_object;
const CUcontext the_context = reinterpret_cast<CUcontext>(&stub_context_object);

// ---- the entry points ----

CUresult CUDAAPI stub_cuInit(unsigned int) {
  ENTER(cuInit);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuDriverGetVersion(int* v) {
  ENTER(cuDriverGetVersion);
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuGetErrorName(CUresult e, const char** s) {
  ENTER(cuGetErrorName);
  switch (e) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case CUDA_ERROR_INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; break;
    case CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE: *s = "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"; break;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: *s = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"; break;
    case CUDA_ERROR_INVALID_CLUSTER_SIZE: *s = "CUDA_ERROR_INVALID_CLUSTER_SIZE"; break;
    case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: *s = "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"; break;
    default: *s = "CUDA_ERROR_UNKNOWN"; break;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuGetErrorString(CUresult e, const char** s) {
  ENTER(cuGetErrorString);
  *s = e == CUDA_SUCCESS ? "no error" : "an error the stub driver was told to return";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuDeviceGet(CUdevice* d, int ordinal) {
  ENTER(cuDeviceGet);
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuDeviceGetCount(int* n) {
  ENTER(cuDeviceGetCount);
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  ENTER(cuDeviceGetAttribute);
  *v = device_attribute(a);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuDeviceGetName(char* name, int len, CUdevice) {
  ENTER(cuDeviceGetName);
  if (len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::strncpy(name, "NVIDIA H200", static_cast<size_t>(len) - 1);
  name[len - 1] = '\0';
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuDeviceGetUuid(CUuuid* u, CUdevice) {
  ENTER(cuDeviceGetUuid);
  for (int i = 0; i < 16; ++i) u->bytes[i] = static_cast<char>(0x50 + i);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuCtxGetCurrent(CUcontext* c) {
  ENTER(cuCtxGetCurrent);
  *c = the_context;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuCtxSetCurrent(CUcontext) {
  ENTER(cuCtxSetCurrent);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuCtxGetDevice(CUdevice* d) {
  ENTER(cuCtxGetDevice);
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice) {
  ENTER(cuDevicePrimaryCtxRetain);
  *c = the_context;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuDevicePrimaryCtxRelease(CUdevice) {
  ENTER(cuDevicePrimaryCtxRelease);
  return CUDA_SUCCESS;
}
std::atomic<unsigned long long> context_id{1};  // launchfit_stub_set_context_id()
// The context given, or the current one where it is null (there is always one current here).
CUresult CUDAAPI stub_cuCtxGetId(CUcontext c, unsigned long long* id) {
  ENTER(cuCtxGetId);
  if (c && c != the_context) return CUDA_ERROR_INVALID_CONTEXT;
  *id = context_id.load();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuFuncGetAttribute(int* v, CUfunction_attribute a, CUfunction f) {
  ENTER(cuFuncGetAttribute);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  const stub_function& k = *fn(f);
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = k.max_threads; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = k.static_smem; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = k.regs; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *v = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = k.max_dynamic_smem; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: *v = static_cast<int>(k.required_cluster[0]); break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT: *v = static_cast<int>(k.required_cluster[1]); break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *v = static_cast<int>(k.required_cluster[2]); break;
    default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  ENTER(cuFuncSetAttribute);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (v < 0 || v + fn(f)->static_smem > smem_optin) return CUDA_ERROR_INVALID_VALUE;
    fn(f)->max_dynamic_smem = v;
  }
  if (a == CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED) fn(f)->non_portable_cluster = v != 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuFuncGetName(const char** name, CUfunction f) {
  ENTER(cuFuncGetName);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  *name = fn(f)->name.c_str();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  ENTER(cuFuncGetParamInfo);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  const stub_function& k = *fn(f);
  if (!k.params_reported.load()) return CUDA_ERROR_NOT_SUPPORTED;
  if (index >= k.param_sizes.size()) return CUDA_ERROR_INVALID_VALUE;
  size_t at = 0;
  for (size_t i = 0; i < index; ++i) at = (at + k.param_sizes[i] + 7) / 8 * 8;
  if (offset) *offset = at;
  if (size) *size = k.param_sizes[index];
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, CUfunction f, int block,
                                                                          size_t smem, unsigned int) {
  ENTER(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  *n = resident_blocks(*fn(f), block, smem);
  return CUDA_SUCCESS;
}
// The last cuOccupancyMaxPotentialClusterSize's config (its attributes counted, not kept), and the most blocks
// a cluster may have (launchfit_stub_set_cluster_limit; 0: as an H200 answers).
struct cluster_queries {
  std::mutex m;
  CUlaunchConfig last{};
  bool asked = false;
  int limit = 0;
};
cluster_queries& the_cluster_queries() {
  static cluster_queries& q = *new cluster_queries;
  return q;
}
// An approximation of an H200's answer: 8 blocks (portable), 16 where the function allows non-portable sizes;
// 0 where one block does not fit an SM, or asks more dynamic smem than the function's current limit (as the
// driver's occupancy queries count nothing above it). It ignores a compiled-in cluster size.
CUresult CUDAAPI stub_cuOccupancyMaxPotentialClusterSize(int* most, CUfunction f, const CUlaunchConfig* config) {
  ENTER(cuOccupancyMaxPotentialClusterSize);
  if (!most || !config) return CUDA_ERROR_INVALID_VALUE;
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  const stub_function& k = *fn(f);
  const int block = static_cast<int>(config->blockDimX * config->blockDimY * config->blockDimZ);
  int n = std::min(k.non_portable_cluster ? 16 : 8, 16 * resident_blocks(k, block, config->sharedMemBytes));
  if (config->sharedMemBytes > static_cast<size_t>(k.max_dynamic_smem.load())) n = 0;
  cluster_queries& q = the_cluster_queries();
  std::lock_guard<std::mutex> lock(q.m);
  if (q.limit > 0) n = std::min(n, q.limit);
  q.last = *config;
  q.last.attrs = nullptr;
  q.asked = true;
  *most = n;
  return CUDA_SUCCESS;
}
// With LAUNCHFIT_STUB_ACTIVE_CLUSTERS=1 (read when launchfit looks the entry point up; without it the entry is
// absent, as on a driver before 11.8): co-resident clusters as a GPU places them, each within one of 8 GPCs of
// 18, 18 and six of 16 SMs (132), none of blocks above the function's smem limit; cooperative launches of
// clusters beyond that many are refused at launch (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE).
bool active_clusters_modelled() {
  const char* v = std::getenv("LAUNCHFIT_STUB_ACTIVE_CLUSTERS");
  return v && std::strcmp(v, "1") == 0;
}
unsigned config_cluster_size(const CUlaunchConfig& c) {
  for (unsigned i = 0; c.attrs && i < c.numAttrs; ++i)
    if (c.attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
      return c.attrs[i].value.clusterDim.x * c.attrs[i].value.clusterDim.y * c.attrs[i].value.clusterDim.z;
  return 1;
}
bool config_cooperative(const CUlaunchConfig& c) {
  for (unsigned i = 0; c.attrs && i < c.numAttrs; ++i)
    if (c.attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && c.attrs[i].value.cooperative) return true;
  return false;
}
int gpc_clusters(const stub_function& k, const CUlaunchConfig& c) {
  const unsigned size = config_cluster_size(c);
  if (size == 0 || c.sharedMemBytes > static_cast<size_t>(k.max_dynamic_smem.load())) return 0;
  const int per_sm = resident_blocks(k, static_cast<int>(c.blockDimX * c.blockDimY * c.blockDimZ), c.sharedMemBytes);
  int n = 0;
  for (const int sms : {18, 18, 16, 16, 16, 16, 16, 16}) n += sms * per_sm / static_cast<int>(size);
  return n;
}
CUresult CUDAAPI stub_cuOccupancyMaxActiveClusters(int* n, CUfunction f, const CUlaunchConfig* config) {
  ENTER(cuOccupancyMaxActiveClusters);
  if (!n || !config) return CUDA_ERROR_INVALID_VALUE;
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  *n = gpc_clusters(*fn(f), *config);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuOccupancyMaxPotentialBlockSize(int* min_grid, int* block_out, CUfunction f,
                                                       CUoccupancyB2DSize smem_of, size_t smem, int limit) {
  ENTER(cuOccupancyMaxPotentialBlockSize);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  const stub_function& k = *fn(f);
  int best = 0, best_threads = -1, best_blocks = 0;
  const int most = std::min(limit > 0 ? limit : 1024, k.max_threads);
  for (int b = most / 32 * 32; b >= 32; b -= 32) {
    const size_t s = smem_of ? smem_of(b) : smem;
    const int n = resident_blocks(k, b, s);
    if (n * b > best_threads) {
      best_threads = n * b;
      best = b;
      best_blocks = n;
    }
  }
  *block_out = best;
  *min_grid = best_blocks * sm_count;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI stub_cuLaunchKernelEx(const CUlaunchConfig* cfg, CUfunction f, void** args, void**) {
  ENTER(cuLaunchKernelEx);
  if (!cfg || !f) return CUDA_ERROR_INVALID_VALUE;
  const stub_function& k = *fn(f);
  const unsigned threads = cfg->blockDimX * cfg->blockDimY * cfg->blockDimZ;
  if (threads == 0 || threads > static_cast<unsigned>(k.max_threads) || cfg->gridDimX == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (cfg->sharedMemBytes > static_cast<unsigned>(k.max_dynamic_smem.load())) return CUDA_ERROR_INVALID_VALUE;
  if (!k.param_sizes.empty() && !args) return CUDA_ERROR_INVALID_VALUE;
  if (active_clusters_modelled() && config_cooperative(*cfg) && config_cluster_size(*cfg) > 1 &&
      static_cast<long long>(cfg->gridDimX) * cfg->gridDimY * cfg->gridDimZ >
          static_cast<long long>(gpc_clusters(k, *cfg)) * config_cluster_size(*cfg))
    return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  graphs& g = the_graphs();
  if (g.capturing.load(std::memory_order_acquire) > 0) {
    std::lock_guard<std::mutex> lock(g.m);
    const auto it = g.captures.find(cfg->hStream);
    if (it != g.captures.end()) {
      auto node = new_node_locked(g);
      node->graph = it->second.graph;
      CUDA_KERNEL_NODE_PARAMS p{};
      p.func = f;
      p.gridDimX = cfg->gridDimX;
      p.gridDimY = cfg->gridDimY;
      p.gridDimZ = cfg->gridDimZ;
      p.blockDimX = cfg->blockDimX;
      p.blockDimY = cfg->blockDimY;
      p.blockDimZ = cfg->blockDimZ;
      p.sharedMemBytes = cfg->sharedMemBytes;
      p.kernelParams = args;
      node->set(p);
      node->attrs.assign(cfg->attrs, cfg->attrs + cfg->numAttrs);
      it->second.last = reinterpret_cast<CUgraphNode>(node.get());
      it->second.graph->nodes.push_back(std::move(node));
      return CUDA_SUCCESS;
    }
  }
  launches& l = the_launches();
  std::lock_guard<std::mutex> lock(l.m);
  l.clock_ms += cost_ms(k, threads);
  fn(f)->last.take(*cfg);
  l.any = fn(f)->last;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI stub_cuEventCreate(CUevent* e, unsigned int) {
  ENTER(cuEventCreate);
  *e = reinterpret_cast<CUevent>(new stub_event);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuEventRecord(CUevent e, CUstream) {
  ENTER(cuEventRecord);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  launches& l = the_launches();
  std::lock_guard<std::mutex> lock(l.m);
  auto* ev = reinterpret_cast<stub_event*>(e);
  ev->recorded = true;
  ev->at_ms = l.clock_ms;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuEventSynchronize(CUevent e) {
  ENTER(cuEventSynchronize);
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult CUDAAPI stub_cuEventElapsedTime(float* ms, CUevent a, CUevent b) {
  ENTER(cuEventElapsedTime);
  if (!a || !b) return CUDA_ERROR_INVALID_HANDLE;
  launches& l = the_launches();
  std::lock_guard<std::mutex> lock(l.m);
  const auto* x = reinterpret_cast<stub_event*>(a);
  const auto* y = reinterpret_cast<stub_event*>(b);
  if (!x->recorded || !y->recorded) return CUDA_ERROR_INVALID_HANDLE;
  *ms = static_cast<float>(y->at_ms - x->at_ms);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuEventDestroy(CUevent e) {
  ENTER(cuEventDestroy);
  delete reinterpret_cast<stub_event*>(e);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuStreamSynchronize(CUstream) {
  ENTER(cuStreamSynchronize);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuCtxSynchronize() {
  ENTER(cuCtxSynchronize);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  ENTER(cuStreamIsCapturing);
  graphs& g = the_graphs();
  std::lock_guard<std::mutex> lock(g.m);
  *status = g.captures.count(s) ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
std::atomic<double> host_alloc_ms{0};
CUresult CUDAAPI stub_cuMemHostAlloc(void** p, size_t bytes, unsigned int) {
  ENTER(cuMemHostAlloc);
  if (const double ms = host_alloc_ms.load(); ms > 0)
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
  *p = std::calloc(1, bytes ? bytes : 1);
  return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult CUDAAPI stub_cuMemHostGetDevicePointer(CUdeviceptr* d, void* p, unsigned int) {
  ENTER(cuMemHostGetDevicePointer);
  *d = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuMemFreeHost(void* p) {
  ENTER(cuMemFreeHost);
  std::free(p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuStreamWaitValue32(CUstream, CUdeviceptr, cuuint32_t, unsigned int) {
  ENTER(cuStreamWaitValue32);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                             CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges,
                                             size_t* n) {
  ENTER(cuStreamGetCaptureInfo);
  graphs& g = the_graphs();
  std::lock_guard<std::mutex> lock(g.m);
  const auto it = g.captures.find(s);
  if (status) *status = it != g.captures.end() ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  if (it == g.captures.end()) return CUDA_SUCCESS;
  if (id) *id = it->second.id;
  if (graph) *graph = reinterpret_cast<CUgraph>(it->second.graph);
  it->second.deps = it->second.last;
  if (deps) *deps = it->second.last ? &it->second.deps : nullptr;
  if (edges) *edges = nullptr;
  if (n) *n = it->second.last ? 1 : 0;
  return CUDA_SUCCESS;
}

stub_node* node_of(CUgraphNode n) { return reinterpret_cast<stub_node*>(n); }

CUresult CUDAAPI stub_cuGraphAddNode(CUgraphNode* out, CUgraph graph, const CUgraphNode*, const CUgraphEdgeData*,
                                     size_t, CUgraphNodeParams* params) {
  ENTER(cuGraphAddNode);
  if (!out || !graph || !params || params->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  auto node = std::make_unique<stub_node>();
  auto* g = reinterpret_cast<stub_graph*>(graph);
  node->graph = g;
  const CUDA_KERNEL_NODE_PARAMS_v3& k = params->kernel;
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = k.func;
  p.gridDimX = k.gridDimX;
  p.gridDimY = k.gridDimY;
  p.gridDimZ = k.gridDimZ;
  p.blockDimX = k.blockDimX;
  p.blockDimY = k.blockDimY;
  p.blockDimZ = k.blockDimZ;
  p.sharedMemBytes = k.sharedMemBytes;
  p.kernelParams = k.kernelParams;
  node->set(p);
  std::lock_guard<std::mutex> lock(the_graphs().m);
  *out = reinterpret_cast<CUgraphNode>(node.get());
  g->nodes.push_back(std::move(node));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuGraphKernelNodeSetAttribute(CUgraphNode n, CUkernelNodeAttrID id,
                                                    const CUkernelNodeAttrValue* value) {
  ENTER(cuGraphKernelNodeSetAttribute);
  if (!n || !value) return CUDA_ERROR_INVALID_VALUE;
  CUlaunchAttribute a{};
  a.id = id;
  a.value = *value;
  std::lock_guard<std::mutex> lock(the_graphs().m);
  node_of(n)->attrs.push_back(a);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuGraphKernelNodeGetParams(CUgraphNode n, CUDA_KERNEL_NODE_PARAMS* p) {
  ENTER(cuGraphKernelNodeGetParams);
  if (!n || !p) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(the_graphs().m);
  *p = node_of(n)->params;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuGraphKernelNodeSetParams(CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS* p) {
  ENTER(cuGraphKernelNodeSetParams);
  if (!n || !p) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(the_graphs().m);
  node_of(n)->set(*p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuGraphExecKernelNodeSetParams(CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS* p) {
  ENTER(cuGraphExecKernelNodeSetParams);
  if (!e || !n || !p) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(the_graphs().m);
  auto* exec = reinterpret_cast<stub_exec*>(e);
  const auto it = exec->params.find(node_of(n));
  if (it == exec->params.end()) return CUDA_ERROR_INVALID_VALUE;
  if (!p->func) return CUDA_ERROR_INVALID_VALUE;  // one context here: any kernel of it may replace the node's
  it->second = *p;
  it->second.kernelParams = nullptr;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  ENTER(cuGraphGetNodes);
  if (!graph || !count) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(the_graphs().m);
  const auto* g = reinterpret_cast<stub_graph*>(graph);
  if (nodes) {
    for (size_t i = 0; i < std::min(*count, g->nodes.size()); ++i)
      nodes[i] = reinterpret_cast<CUgraphNode>(g->nodes[i].get());
  }
  *count = g->nodes.size();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuGraphNodeGetType(CUgraphNode n, CUgraphNodeType* type) {
  ENTER(cuGraphNodeGetType);
  if (!n || !type) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(the_graphs().m);
  *type = node_of(n)->type;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuGraphDestroyNode(CUgraphNode n) {
  ENTER(cuGraphDestroyNode);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  graphs& g = the_graphs();
  std::lock_guard<std::mutex> lock(g.m);
  for (auto& [stream, c] : g.captures) {
    if (c.last == n) c.last = nullptr;  // the capture's next node has no dependency left
  }
  auto& nodes = node_of(n)->graph->nodes;
  nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [n](const auto& p) { return p.get() == node_of(n); }),
              nodes.end());
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuUserObjectCreate(CUuserObject* out, void* ptr, CUhostFn destroy, unsigned int refs,
                                         unsigned int) {
  ENTER(cuUserObjectCreate);
  if (!out || refs == 0) return CUDA_ERROR_INVALID_VALUE;
  auto* o = new stub_user_object{ptr, destroy, refs};
  *out = reinterpret_cast<CUuserObject>(o);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuUserObjectRelease(CUuserObject o, unsigned int count) {
  ENTER(cuUserObjectRelease);
  if (!o) return CUDA_ERROR_INVALID_VALUE;
  release_object(reinterpret_cast<stub_user_object*>(o), count);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuGraphRetainUserObject(CUgraph graph, CUuserObject o, unsigned int count, unsigned int flags) {
  ENTER(cuGraphRetainUserObject);
  if (!graph || !o) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(the_graphs().m);
  auto* obj = reinterpret_cast<stub_user_object*>(o);
  if (!(flags & CU_GRAPH_USER_OBJECT_MOVE)) obj->refs += count;
  reinterpret_cast<stub_graph*>(graph)->objects[obj] += count;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI stub_cuStreamCreate(CUstream* s, unsigned int) {
  ENTER(cuStreamCreate);
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  void* token = new char;
  std::lock_guard<std::mutex> lock(the_graphs().m);
  the_graphs().live_streams.insert(token);
  *s = reinterpret_cast<CUstream>(token);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuStreamDestroy(CUstream s) {
  ENTER(cuStreamDestroy);
  {
    std::lock_guard<std::mutex> lock(the_graphs().m);
    if (the_graphs().live_streams.erase(s) == 0) return CUDA_ERROR_INVALID_HANDLE;
  }
  delete reinterpret_cast<char*>(s);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuStreamBeginCapture(CUstream s, CUstreamCaptureMode) {
  ENTER(cuStreamBeginCapture);
  if (!s) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the legacy default stream
  {
    std::lock_guard<std::mutex> lock(the_graphs().m);
    if (the_graphs().captures.count(s)) return CUDA_ERROR_ILLEGAL_STATE;
  }
  launchfit_stub_begin_capture(s);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuStreamEndCapture(CUstream s, CUgraph* out) {
  ENTER(cuStreamEndCapture);
  const CUgraph g = launchfit_stub_end_capture(s);
  if (out) *out = g;
  return g ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_STATE;
}
CUresult CUDAAPI stub_cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph g, unsigned long long) {
  ENTER(cuGraphInstantiateWithFlags);
  if (!out || !g) return CUDA_ERROR_INVALID_VALUE;
  *out = launchfit_stub_instantiate(g);
  return CUDA_SUCCESS;
}
// Runs the executable graph's kernel nodes on the simulated clock, as their launches would.
CUresult CUDAAPI stub_cuGraphLaunch(CUgraphExec e, CUstream) {
  ENTER(cuGraphLaunch);
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUDA_KERNEL_NODE_PARAMS> run;
  {
    std::lock_guard<std::mutex> lock(the_graphs().m);
    for (const auto& [node, p] : reinterpret_cast<stub_exec*>(e)->params) run.push_back(p);
    ++the_graphs().graph_launches;
  }
  launches& l = the_launches();
  std::lock_guard<std::mutex> lock(l.m);
  for (const CUDA_KERNEL_NODE_PARAMS& p : run)
    l.clock_ms += cost_ms(*fn(p.func), p.blockDimX * p.blockDimY * p.blockDimZ);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuGraphExecDestroy(CUgraphExec e) {
  ENTER(cuGraphExecDestroy);
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  launchfit_stub_destroy_exec(e);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stub_cuGraphDestroy(CUgraph g) {
  ENTER(cuGraphDestroy);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  launchfit_stub_destroy_graph(g);
  return CUDA_SUCCESS;
}

// The prototypes launchfit declares (cuda.h's, macros resolved) are the stub's.
#define STUB_SAME_TYPE(name) \
  static_assert(std::is_same_v<decltype(&stub_##name), decltype(&::name)>, #name " has another prototype");
STUB_ENTRIES(STUB_SAME_TYPE)
#undef STUB_SAME_TYPE

void* lookup(const char* name) {
  if (std::strcmp(name, "cuOccupancyMaxActiveClusters") == 0 && !active_clusters_modelled()) return nullptr;
#define STUB_LOOKUP(entry) \
  if (std::strcmp(name, #entry) == 0) return reinterpret_cast<void*>(&stub_##entry);
  STUB_ENTRIES(STUB_LOOKUP)
#undef STUB_LOOKUP
  return nullptr;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** fn_out, int, cuuint64_t,
                                     CUdriverProcAddressQueryResult* status) {
  void* f = symbol ? lookup(symbol) : nullptr;
  if (fn_out) *fn_out = f;
  if (status) *status = f ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return f ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUfunction launchfit_stub_function(const char* name, int regs_per_thread, int static_smem_bytes,
                                   int max_threads_per_block, const size_t* param_sizes, size_t param_count) {
  // Kept for the process (reachable from an immortal list): launchfit may plan and launch it at any time.
  static std::vector<std::unique_ptr<stub_function>>& all = *new std::vector<std::unique_ptr<stub_function>>;
  static std::mutex m;
  auto* k = new stub_function;
  {
    std::lock_guard<std::mutex> lock(m);
    all.emplace_back(k);
  }
  k->name = name ? name : "stub_kernel";
  k->regs = regs_per_thread;
  k->static_smem = static_smem_bytes;
  k->max_threads = max_threads_per_block > 0 ? max_threads_per_block : 1024;
  k->max_dynamic_smem = 49152 - static_smem_bytes;
  if (param_sizes) k->param_sizes.assign(param_sizes, param_sizes + param_count);
  return reinterpret_cast<CUfunction>(k);
}

void launchfit_stub_report_params(CUfunction f, int reported) { fn(f)->params_reported.store(reported != 0); }

void launchfit_stub_set_cost(CUfunction f, double best_ms, unsigned best_block) {
  std::lock_guard<std::mutex> lock(the_launches().m);
  fn(f)->best_ms = best_ms;
  fn(f)->best_block = best_block;
}

unsigned long long launchfit_stub_calls(const char* entry) {
  const int id = entry_of(entry);
  return id < 0 ? 0 : calls[id].load(std::memory_order_relaxed);
}

unsigned long long launchfit_stub_total_calls(void) {
  unsigned long long all = 0;
  for (const auto& c : calls) all += c.load(std::memory_order_relaxed);
  return all;
}

void launchfit_stub_reset_calls(void) {
  for (auto& c : calls) c.store(0, std::memory_order_relaxed);
  cluster_queries& q = the_cluster_queries();
  std::lock_guard<std::mutex> lock(q.m);
  q.asked = false;
  q.last = CUlaunchConfig{};
}

void launchfit_stub_set_host_alloc_ms(double ms) { host_alloc_ms.store(ms); }

void launchfit_stub_set_context_id(unsigned long long id) { context_id.store(id); }

void launchfit_stub_set_compiled_cluster(CUfunction f, unsigned x, unsigned y, unsigned z) {
  stub_function& k = *fn(f);
  k.required_cluster[0] = x;
  k.required_cluster[1] = y;
  k.required_cluster[2] = z;
}

void launchfit_stub_set_cluster_limit(int most) {
  cluster_queries& q = the_cluster_queries();
  std::lock_guard<std::mutex> lock(q.m);
  q.limit = most;
}

int launchfit_stub_last_cluster_query(CUlaunchConfig* config) {
  cluster_queries& q = the_cluster_queries();
  std::lock_guard<std::mutex> lock(q.m);
  if (!q.asked) return 0;
  if (config) *config = q.last;
  return 1;
}

int launchfit_stub_last_launch(CUfunction f, CUlaunchConfig* config, CUlaunchAttribute* attrs, unsigned max_attrs) {
  launches& l = the_launches();
  std::lock_guard<std::mutex> lock(l.m);
  const recorded_launch* r = f ? &fn(f)->last : &l.any;
  if (!r->config.blockDimX) return 0;
  if (config) *config = r->config;
  for (unsigned i = 0; attrs && i < std::min(max_attrs, r->attr_count); ++i) attrs[i] = r->attrs[i];
  return 1;
}

void launchfit_stub_fail(const char* entry, CUresult code, int times) { launchfit_stub_fail_after(entry, code, 0, times); }

void launchfit_stub_fail_after(const char* entry, CUresult code, int skip, int times) {
  const int id = entry_of(entry);
  if (id < 0) std::abort();  // a test's typo: never a failure silently not injected
  state& s = the_state();
  std::lock_guard<std::mutex> lock(s.m);
  s.failures[id] = failure{code, skip, times};
  bool any = false;
  for (const failure& f : s.failures) any = any || f.times != 0;
  any_failure.store(any, std::memory_order_relaxed);
}

void launchfit_stub_on_call(const char* entry, void (*hook)(void*), void* arg) {
  const int id = entry_of(entry);
  if (id < 0) std::abort();  // a test's typo: never a hook silently not installed
  hook_args[id].store(arg, std::memory_order_relaxed);
  hooks[id].store(hook, std::memory_order_release);
}

void launchfit_stub_begin_capture(CUstream stream) {
  graphs& g = the_graphs();
  std::lock_guard<std::mutex> lock(g.m);
  stub_capture& c = g.captures[stream];
  if (g.reuse_handles && !g.free_graphs.empty()) {
    c.graph = g.free_graphs.back();
    g.free_graphs.pop_back();
  } else {
    c.graph = new stub_graph;
  }
  g.live_graphs.insert(c.graph);
  c.id = g.next_capture++;
  c.last = nullptr;
  g.capturing.fetch_add(1, std::memory_order_release);
}

CUgraph launchfit_stub_end_capture(CUstream stream) {
  graphs& g = the_graphs();
  std::lock_guard<std::mutex> lock(g.m);
  const auto it = g.captures.find(stream);
  if (it == g.captures.end()) return nullptr;
  stub_graph* graph = it->second.graph;
  g.captures.erase(it);
  g.capturing.fetch_sub(1, std::memory_order_release);
  return reinterpret_cast<CUgraph>(graph);
}

CUgraphExec launchfit_stub_instantiate(CUgraph graph) {
  graphs& g = the_graphs();
  std::lock_guard<std::mutex> lock(g.m);
  auto* gr = reinterpret_cast<stub_graph*>(graph);
  auto* e = new stub_exec;
  g.live_execs.insert(e);
  e->graph = gr;
  for (const auto& n : gr->nodes) {
    if (n->type != CU_GRAPH_NODE_TYPE_KERNEL) continue;
    CUDA_KERNEL_NODE_PARAMS p = n->params;
    p.kernelParams = nullptr;
    e->params[n.get()] = p;
  }
  ++gr->execs;
  ++gr->instantiated;
  ++g.instantiations;
  return reinterpret_cast<CUgraphExec>(e);
}

void launchfit_stub_destroy_exec(CUgraphExec exec) {
  auto* e = reinterpret_cast<stub_exec*>(exec);
  stub_graph* gr = e->graph;
  {
    std::lock_guard<std::mutex> lock(the_graphs().m);
    --gr->execs;
    the_graphs().live_execs.erase(e);
  }
  delete e;
  release_graph_if_done(gr);
}

void launchfit_stub_reuse_graph_handles(int on) {
  std::vector<stub_graph*> freed;
  std::vector<std::unique_ptr<stub_node>> freed_nodes;
  {
    std::lock_guard<std::mutex> lock(the_graphs().m);
    the_graphs().reuse_handles = on != 0;
    if (!on) {
      freed.swap(the_graphs().free_graphs);
      freed_nodes.swap(the_graphs().free_nodes);
    }
  }
  for (stub_graph* g : freed) delete g;
}

void launchfit_stub_destroy_graph(CUgraph graph) {
  auto* gr = reinterpret_cast<stub_graph*>(graph);
  {
    std::lock_guard<std::mutex> lock(the_graphs().m);
    gr->destroyed = true;
  }
  release_graph_if_done(gr);
}

unsigned long long launchfit_stub_instantiations(void) {
  std::lock_guard<std::mutex> lock(the_graphs().m);
  return the_graphs().instantiations;
}

unsigned long long launchfit_stub_instantiations_of(CUgraph graph) {
  std::lock_guard<std::mutex> lock(the_graphs().m);
  return reinterpret_cast<stub_graph*>(graph)->instantiated;
}

size_t launchfit_stub_live_graphs(void) {
  std::lock_guard<std::mutex> lock(the_graphs().m);
  return the_graphs().live_graphs.size() + the_graphs().live_execs.size();
}

size_t launchfit_stub_live_streams(void) {
  std::lock_guard<std::mutex> lock(the_graphs().m);
  return the_graphs().live_streams.size();
}

unsigned long long launchfit_stub_graph_launches(void) {
  std::lock_guard<std::mutex> lock(the_graphs().m);
  return the_graphs().graph_launches;
}

size_t launchfit_stub_active_captures(void) {
  std::lock_guard<std::mutex> lock(the_graphs().m);
  return the_graphs().captures.size();
}

// (Not driver calls: neither counted nor failed on request.)
size_t launchfit_stub_graph_nodes(CUgraph graph, CUgraphNode* out, size_t max) {
  if (!graph) return 0;
  std::lock_guard<std::mutex> lock(the_graphs().m);
  const auto* g = reinterpret_cast<stub_graph*>(graph);
  for (size_t i = 0; out && i < std::min(max, g->nodes.size()); ++i)
    out[i] = reinterpret_cast<CUgraphNode>(g->nodes[i].get());
  return g->nodes.size();
}

int launchfit_stub_graph_node(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* out) {
  if (!node) return 0;
  std::lock_guard<std::mutex> lock(the_graphs().m);
  if (out) *out = node_of(node)->params;
  return 1;
}

int launchfit_stub_exec_node(CUgraphExec exec, CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* out) {
  std::lock_guard<std::mutex> lock(the_graphs().m);
  const auto* e = reinterpret_cast<stub_exec*>(exec);
  const auto it = e->params.find(node_of(node));
  if (it == e->params.end()) return 0;
  if (out) *out = it->second;
  return 1;
}

}  // extern "C"
