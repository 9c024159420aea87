// SPDX-License-Identifier: MIT
// A CUDA driver for tests without a GPU: libcuda.so.1 of one simulated H200 (sm_90, 132 SMs), built from
// tests/stub-driver/stub_driver.cpp. launchfit loads it as it loads the real driver (cuGetProcAddress_v2);
// a test links it (so its dlopen("libcuda.so.1") finds this one) and drives it through these functions.
//
// What it simulates: one device and one context; kernels the test makes (launchfit_stub_function), with their
// attributes and parameter sizes; occupancy by the CUDA occupancy rules (warps, registers, shared memory,
// blocks) and the most blocks a cluster may have; launches that run nothing but are counted and recorded with
// their attributes; events whose elapsed time is the simulated time of the launches between them
// (launchfit_stub_set_cost); stream captures into graphs of kernel nodes, executable graphs, node updates and
// user objects. Any entry point can be made to fail (launchfit_stub_fail). Everything is for one process and
// thread-safe.

#ifndef LAUNCHFIT_STUB_DRIVER_H
#define LAUNCHFIT_STUB_DRIVER_H

#include <cuda.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// A kernel of `param_count` parameters of the given sizes (copied), with these resources.
CUfunction launchfit_stub_function(const char* name, int regs_per_thread, int static_smem_bytes,
                                   int max_threads_per_block, const size_t* param_sizes, size_t param_count);
// Simulated run time of one launch of `f`: `best_ms` at block `best_block` threads, growing with the distance
// in powers of two from it (x (1 + 0.25 per doubling)); 0.001 ms at block 256 unless set.
void launchfit_stub_set_cost(CUfunction f, double best_ms, unsigned best_block);
// Whether cuFuncGetParamInfo answers for `f` (1, the default) or returns CUDA_ERROR_NOT_SUPPORTED (0), as a
// driver before CUDA 12.4, or a binary it cannot read the parameters of, does.
void launchfit_stub_report_params(CUfunction f, int reported);

// Calls of one entry point by its name in cuda.h ("cuLaunchKernelEx", "cuStreamGetCaptureInfo"), since the
// process started or the last reset.
unsigned long long launchfit_stub_calls(const char* entry);
// Calls of every entry point together (the control functions here are not driver calls).
unsigned long long launchfit_stub_total_calls(void);
// Sets every count to 0 and forgets the last cluster query.
void launchfit_stub_reset_calls(void);
// The last cuLaunchKernelEx of `f` (any kernel when null): its config, its attributes copied into `attrs`
// (up to `max_attrs`); 0 when there was none.
int launchfit_stub_last_launch(CUfunction f, CUlaunchConfig* config, CUlaunchAttribute* attrs, unsigned max_attrs);

// cuOccupancyMaxPotentialClusterSize answers at most `most` blocks (0: about as an H200 answers: 8, 16 where
// the function allows non-portable sizes, 0 where one block does not fit an SM).
void launchfit_stub_set_cluster_limit(int most);
// The function's compiled cluster dims (__cluster_dims__(x, y, z)), as CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_*
// report them; 0, 0, 0: none (the default).
void launchfit_stub_set_compiled_cluster(CUfunction f, unsigned x, unsigned y, unsigned z);
// The last cuOccupancyMaxPotentialClusterSize's config (numAttrs as asked, attrs null) since the process
// started or launchfit_stub_reset_calls(); 0 when none was asked.
int launchfit_stub_last_cluster_query(CUlaunchConfig* config);

// The identity cuCtxGetId answers for the one context (1 unless set), the handle staying the same: as a context
// destroyed and another made at its address (cudaDeviceReset, cuDevicePrimaryCtxReset) look to a program.
void launchfit_stub_set_context_id(unsigned long long id);
// Each cuMemHostAlloc takes this long (0: at once), as page-locking memory can in a virtual machine.
void launchfit_stub_set_host_alloc_ms(double ms);
// The next `times` calls of `entry` return `code` (times < 0: every call until set again with 0).
void launchfit_stub_fail(const char* entry, CUresult code, int times);
// The same once `skip` more calls of it have succeeded.
void launchfit_stub_fail_after(const char* entry, CUresult code, int skip, int times);
// `hook(arg)` is called at the start of every call of `entry`, on the calling thread, before it answers (null:
// none): a test holds a thread inside the driver there.
void launchfit_stub_on_call(const char* entry, void (*hook)(void*), void* arg);

// Stream capture: launches on `stream` become kernel nodes of a new graph, each depending on the one before,
// until end_capture returns the graph.
void launchfit_stub_begin_capture(CUstream stream);
CUgraph launchfit_stub_end_capture(CUstream stream);
// An executable graph with a copy of each kernel node's parameters; destroying the graph releases its user
// objects (their destroy callbacks run) once no executable graph of it is left either.
CUgraphExec launchfit_stub_instantiate(CUgraph graph);
void launchfit_stub_destroy_exec(CUgraphExec exec);
void launchfit_stub_destroy_graph(CUgraph graph);
// On: the handle of a graph destroyed (and released) is the next capture's graph handle, and its nodes' handles
// the next captured nodes', in the order it made them, as a driver's allocator may hand them out again. Off (the
// default) frees those kept for reuse.
void launchfit_stub_reuse_graph_handles(int on);
// Instantiations of any graph so far.
unsigned long long launchfit_stub_instantiations(void);
// Instantiations of this graph so far.
unsigned long long launchfit_stub_instantiations_of(CUgraph graph);
// Graphs and executable graphs alive (made and not yet destroyed), streams made by cuStreamCreate alive,
// graph launches so far, and streams being captured now.
size_t launchfit_stub_live_graphs(void);
size_t launchfit_stub_live_streams(void);
unsigned long long launchfit_stub_graph_launches(void);
size_t launchfit_stub_active_captures(void);
// The graph's nodes (up to `max` into `out`); how many it has.
size_t launchfit_stub_graph_nodes(CUgraph graph, CUgraphNode* out, size_t max);
// What the graph's `node` runs (its kernel parameters point at the node's copies); 0 when not a kernel node.
int launchfit_stub_graph_node(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* out);
// What `exec` runs for `node` (func, grid, block, smem); 0 when the node is not one of its kernel nodes.
int launchfit_stub_exec_node(CUgraphExec exec, CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* out);

#ifdef __cplusplus
}
#endif

#endif  // LAUNCHFIT_STUB_DRIVER_H
