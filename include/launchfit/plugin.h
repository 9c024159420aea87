// SPDX-License-Identifier: MIT
/* \file
 * \ingroup plugin_abi
 * launchfit plugin ABI — a policy in a shared object, behind a small versioned C interface.
 *
 * A plugin exports one symbol:
 *
 *     const launchfit_plugin_descriptor* launchfit_plugin_entry(void);
 *
 * and launchfit loads it with launchfit::load_plugin(path) or from LAUNCHFIT_PLUGINS=path1:path2. The
 * plugin is then a policy like any other, selected by name: "autotune(max_trials=40)".
 *
 * Versioning. Every struct starts with `uint32_t struct_size; uint32_t abi_version;` filled in by whoever
 * allocates it, so either side may be older:
 *   - abi_version is (major << 16) | minor. launchfit refuses a plugin whose major differs from its own.
 *   - Minor versions only append fields. Before reading a field newer than the oldest ABI you support, check
 *     that the struct is large enough: LAUNCHFIT_HAS_FIELD(q, launchfit_query, some_new_field).
 *   - launchfit refuses a descriptor smaller than LAUNCHFIT_PLUGIN_DESCRIPTOR_MIN_SIZE.
 *
 * Paths. A plugin path is always a file path: relative ones (a bare name included) are resolved against the
 * current directory, never searched in the library path; symlinks are resolved and the file must be a
 * regular file (checked before dlopen). One file loaded under several paths (symlinks, hard links) is one
 * plugin.
 *
 * Ownership. The descriptor and its strings are static data of the plugin and must stay valid while the
 * library is loaded. launchfit keeps it loaded while the plugin is registered and while any policy made
 * from it lives; after unregister_policy(<name>) and the last such policy, it closes the library (dlclose).
 * Everything launchfit passes in (query, device, kernel, plan, strings) is owned by launchfit and valid
 * only during the call. `state` is owned by the plugin: created by create(), released by destroy();
 * launchfit creates one state per policy object (one per distinct parameter string, typically) and calls
 * destroy() exactly once when that policy is dropped.
 *
 * Threads. create() and destroy() may be called from any thread. choose() and feedback() may be called
 * concurrently on the same state (for different kernels or devices); protect shared state inside the
 * plugin. launchfit calls choose() once per plan-cache miss, never per launch. The entry may be called more
 * than once (once per load, also when two threads load one file at once): return the same static data.
 *
 * Calling back. launchfit holds none of its locks while plugin code runs (static constructors during
 * dlopen, the entry, every function here), so a plugin may call launchfit from any of them. A call made
 * while LAUNCHFIT_PLUGINS is being loaded, from the loading thread, sees the registry as it stands (the
 * plugins loaded so far). A plugin loading its own file from its entry or a constructor is refused, and
 * plugin calls nested more than 4 deep on one thread (a plugin creating itself from create(), say) are
 * refused with an error instead of recursing. One plan is made once: while choose() runs for a kernel and
 * policy, every other thread that launches the same kernel with the same policy and work bucket waits for it.
 * choose() may launch that kernel itself on its own thread (the call plans for itself, uncached), but must
 * never wait for another thread that does: the two would wait for each other for good.
 *
 * Decisions. choose() writes its plan and returns:
 *   LAUNCHFIT_PLUGIN_OK       the plan is used after launchfit validates it (block within the kernel's
 *                             launch bounds and the device, smem within the opt-in limit, cooperative grid
 *                             co-resident); an invalid plan is an error that names the violated limit;
 *   LAUNCHFIT_PLUGIN_DECLINE  the plugin has no opinion: the policy given as `fallback=<name>` in the policy
 *                             string decides, or max_occupancy; the plan's reason reads "declined by
 *                             <name> (<errbuf, else the plan's reason>); <fallback>: <its reason>";
 *   LAUNCHFIT_PLUGIN_ERROR    the plugin failed: launchfit throws launchfit::error carrying errbuf, unless
 *                             the policy string has `fallback=<name>` or LAUNCHFIT_PLUGIN_FALLBACK=1 is set,
 *                             in which case the fallback decides and the error is logged once.
 * `fallback` names a built-in or C++ policy (not a plugin), used with its default parameters; it is
 * handled by launchfit and never passed to the plugin. Error messages go to errbuf
 * (NUL-terminated, at most errbuf_size bytes including the NUL). Any other status is treated as ERROR.
 * A negative blocks_per_sm is an invalid plan (0 means as many as fit); a negative trials, and a tuning_ms
 * that is negative or not finite, read as 0.
 *
 * Text. errbuf and the plan's reason are untrusted: launchfit reads them up to their buffer size (a missing
 * NUL is tolerated), keeps at most 1 KB of each, escapes control characters (a newline reads "\n"),
 * bidirectional overrides and line separators, and replaces invalid UTF-8 with U+FFFD before they reach a
 * message, a plan or a log line. The version string is kept to 64 bytes, escaped the same way.
 *
 * Exceptions must not cross this interface: a C++ plugin catches everything inside its functions. launchfit
 * catches any that do: from the entry, a refused load; from create(), an error; from choose(), a plugin
 * error (LAUNCHFIT_PLUGIN_ERROR, taking the fallback path like LAUNCHFIT_PLUGIN_ERROR); from destroy(),
 * feedback() and work_bucket() (then 0), an error line in the log. The process never terminates for it.
 */
#ifndef LAUNCHFIT_PLUGIN_H
#define LAUNCHFIT_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI's major version: launchfit refuses a plugin built for another one. */
#define LAUNCHFIT_PLUGIN_ABI_MAJOR 1
/* The ABI's minor version: a minor version only appends fields. */
#define LAUNCHFIT_PLUGIN_ABI_MINOR 3
/* (major << 16) | minor: what the abi_version of every struct carries. */
#define LAUNCHFIT_PLUGIN_ABI_VERSION \
  ((uint32_t)(((uint32_t)LAUNCHFIT_PLUGIN_ABI_MAJOR << 16) | (uint32_t)LAUNCHFIT_PLUGIN_ABI_MINOR))
/* The major version of an abi_version value. */
#define LAUNCHFIT_PLUGIN_ABI_MAJOR_OF(v) ((uint32_t)(v) >> 16)
/* The minor version of an abi_version value. */
#define LAUNCHFIT_PLUGIN_ABI_MINOR_OF(v) ((uint32_t)(v)&0xffffu)

/* Nonzero when the struct behind `ptr` (as sized by its producer) contains `field`. */
#define LAUNCHFIT_HAS_FIELD(ptr, type, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof(((const type*)0)->field))

/* The name of the one symbol a plugin exports (a launchfit_plugin_entry_fn). */
#define LAUNCHFIT_PLUGIN_ENTRY_SYMBOL "launchfit_plugin_entry"
/* Bytes of a plan's reason, its terminating NUL included. */
#define LAUNCHFIT_PLAN_REASON_SIZE 256
/* dynamic_smem_bytes in a plan: use the query's smem rule (dynamic_smem_bytes or smem_for_block). */
#define LAUNCHFIT_SMEM_FROM_QUERY UINT64_MAX

/* What choose() returns (see "Decisions" above). */
typedef enum launchfit_plugin_status {
  LAUNCHFIT_PLUGIN_OK = 0,      /* the plan is used, once launchfit has validated it */
  LAUNCHFIT_PLUGIN_DECLINE = 1, /* no opinion: the fallback policy decides */
  LAUNCHFIT_PLUGIN_ERROR = 2    /* the plugin failed: an error, or the fallback where one is asked for */
} launchfit_plugin_status;

/* How the launch's work is given (the query's work_kind). */
typedef enum launchfit_work_kind {
  LAUNCHFIT_WORK_NONE = 0,       /* no work given: one full wave of resident blocks */
  LAUNCHFIT_WORK_ITEMS = 1,      /* grid = ceil(n / (block x per_thread)) */
  LAUNCHFIT_WORK_GRID_STRIDE = 2 /* the kernel loops: grid capped at the resident blocks */
} launchfit_work_kind;

/* The device of the current context (from the driver on a GPU, from the built-in table in tests). */
typedef struct launchfit_device {
  uint32_t struct_size; /* sizeof the struct as its producer compiled it (fields may be added at the end) */
  uint32_t abi_version; /* LAUNCHFIT_PLUGIN_ABI_VERSION as its producer compiled it */
  const char* name; /* "NVIDIA H200" */
  const char* uuid; /* "GPU-..." (with MIG instance), "" for a table entry */
  int32_t cc_major; /* compute capability, major */
  int32_t cc_minor; /* compute capability, minor */
  int32_t sm_count; /* SMs usable by the current context */
  int32_t regs_per_sm;                    /* 32-bit registers per SM */
  int32_t regs_per_block;                 /* registers one block may use */
  int32_t max_regs_per_thread;            /* registers one thread may use */
  int32_t max_threads_per_sm;             /* resident threads per SM */
  int32_t max_warps_per_sm;               /* resident warps per SM */
  int32_t max_blocks_per_sm;              /* resident blocks per SM */
  int32_t max_threads_per_block;          /* largest block */
  int32_t warp_size;                      /* threads per warp */
  uint64_t smem_per_sm_bytes;             /* shared memory per SM available to blocks */
  uint64_t smem_per_block_bytes;          /* per block without opt-in (48 KB) */
  uint64_t smem_per_block_optin_bytes;    /* per block with the opt-in */
  uint64_t smem_reserved_per_block_bytes; /* system reserve per block (1 KB on cc >= 8.0) */
  int32_t max_block_dim[3];               /* largest block per dimension */
  int32_t max_grid_dim[3];                /* largest grid per dimension */
  uint64_t l2_bytes;                      /* L2 cache size */
  double peak_bandwidth_bytes_per_s; /* 0 when unknown */
  int32_t cooperative_launch;        /* nonzero: cooperative launches possible */
  int32_t cluster_launch;            /* nonzero: cluster launches possible (sm_90+) */
} launchfit_device;

/* What the kernel uses. */
typedef struct launchfit_kernel {
  uint32_t struct_size;  /* sizeof the struct as its producer compiled it (fields may be added at the end) */
  uint32_t abi_version;  /* LAUNCHFIT_PLUGIN_ABI_VERSION as its producer compiled it */
  const char* name;      /* mangled, as the driver reports it */
  const char* demangled; /* readable */
  int32_t regs_per_thread;       /* registers per thread, as compiled */
  int32_t max_threads_per_block; /* reflects __launch_bounds__ and register use */
  uint64_t static_smem_bytes;    /* fixed-size __shared__ per block */
  uint64_t local_bytes_per_thread; /* local memory per thread: stack frame and spills */
  uint64_t const_bytes;            /* __constant__ memory used */
  uint64_t max_dynamic_smem_bytes; /* the function's dynamic smem limit as the program set it (launchfit's
                                      own raises for other plans not counted) */
  int32_t ptx_version;             /* PTX ISA the kernel was compiled for, e.g. 90 */
  int32_t binary_version;          /* SASS architecture of the loaded code, e.g. 90 */
} launchfit_kernel;

/* A decision (defined below). */
typedef struct launchfit_plan launchfit_plan;

/* Everything a plugin may look at. Callbacks receive `ctx` as their first argument. */
typedef struct launchfit_query {
  uint32_t struct_size; /* sizeof the struct as its producer compiled it (fields may be added at the end) */
  uint32_t abi_version; /* LAUNCHFIT_PLUGIN_ABI_VERSION as its producer compiled it */
  const launchfit_device* device; /* the device of the launch's context */
  const launchfit_kernel* kernel; /* the kernel launched */
  uint64_t dynamic_smem_bytes; /* fixed dynamic smem; when has_smem_rule, ask smem_for_block instead */
  int32_t has_smem_rule;       /* nonzero: dynamic smem depends on the block size */
  int32_t max_block_threads;   /* largest legal block: min(kernel launch bounds, device max) */
  uint32_t work_kind;          /* launchfit_work_kind of the launch that missed the cache */
  uint32_t work_per_thread;    /* items per thread of that launch */
  uint64_t work_n;             /* its items: all of them (nx x ny x nz) for 2-D and 3-D work */
  uint64_t bytes_in_flight_per_sm; /* device default target (per-arch table or calibration) */
  void* ctx;                       /* launchfit's, for the callbacks below */
  /* Resident blocks per SM for (block threads, dynamic smem); 0 when that configuration cannot run, and for a
     block size the launch's block rule or block shape (block_y, x multiple) does not allow. A plan's block_x
     alone (block_y = block_z = 1) is given the launch's shape by launchfit, for trials and for the plan. */
  int (*active_blocks)(void* ctx, int block_threads, size_t dynamic_smem_bytes);
  /* Dynamic smem bytes for a block size under the launch's smem rule. */
  size_t (*smem_for_block)(void* ctx, int block_threads);
  /* Runs the kernel once with `plan` on the real arguments and returns milliseconds, or a negative value
     when that plan cannot run. NULL unless the launch allows re-running the kernel. */
  double (*time_plan)(void* ctx, const launchfit_plan* plan);
  /* ABI 1.2. The work's rank (1, 2 or 3) and its items per dimension (work_n is their product). */
  uint32_t work_rank;
  /* Nonzero for 2-D and 3-D work whose launch lets the block widen along x (spec block_x_free(): a kernel
     that indexes with blockDim and sizes nothing by the block's shape) and fixes neither y nor z: a plan,
     and a plan given to time_plan, may then set its own block_x x block_y (block_x a multiple of
     block_x_step, block_y at least 2, block_z 1), which launchfit keeps and the grid follows. Either way a
     plan of block_x alone (block_y = block_z = 1) is given the launch's shape ({32, threads / 32} by
     default), and a plan may give that shape itself; any other block is an invalid plan (since ABI 1.2:
     before, a plugin's own 2-D block was launched as given, which a kernel sized for the launch's shape
     could not survive). */
  int32_t block_shape_free;
  uint64_t work_nx; /* items along x */
  uint64_t work_ny; /* along y, 1 for 1-D work */
  uint64_t work_nz; /* along z, 1 for 1-D and 2-D work */
  uint32_t block_x_step; /* block x is a multiple of this (block_x_multiple, 32 by default) */
  uint32_t reserved3;    /* 0; makes the tail padding explicit */
  /* ABI 1.3. Milliseconds that this query's time_plan calls have spent so far on launchfit's own one-off work
     rather than on trials: taking the fleet's tuning lease (a lock file, a remote store's round trip, a
     re-read of the plan store), reading the GPU's conditions through NVML, making the trials' stream gate.
     All of it happens inside the first call (the first calls, where several threads time). Cumulative over the
     query: a policy asked again with the same query subtracts what it read when it began. A time budget
     should not count it. May be NULL (an older launchfit, or a launch that offers no trials). */
  double (*setup_ms)(void* ctx);
} launchfit_query;

/* A decision. launchfit fills every field with a default before choose(); the plugin sets what it decides. */
struct launchfit_plan {
  uint32_t struct_size; /* sizeof the struct as its producer compiled it (fields may be added at the end) */
  uint32_t abi_version; /* LAUNCHFIT_PLUGIN_ABI_VERSION as its producer compiled it */
  uint32_t block_x;     /* block threads along x; default 0: set it */
  uint32_t block_y;     /* along y, default 1 */
  uint32_t block_z;     /* along z, default 1 */
  int32_t blocks_per_sm;                   /* resident blocks per SM to plan for; 0: as many as fit */
  uint64_t dynamic_smem_bytes;             /* default LAUNCHFIT_SMEM_FROM_QUERY */
  uint32_t grid_x;                         /* 0: computed from the work per launch (default) */
  uint32_t grid_y;                         /* fixed grid along y, default 1 */
  uint32_t grid_z;                         /* fixed grid along z, default 1 */
  int32_t cooperative;                     /* nonzero: cooperative launch (grid must co-reside) */
  int32_t trials;                          /* timings made to reach this decision (plans, re-timings) */
  uint32_t reserved;                       /* 0; makes the padding before tuning_ms explicit */
  double tuning_ms;                        /* time spent doing so */
  char reason[LAUNCHFIT_PLAN_REASON_SIZE]; /* one sentence, NUL-terminated */
  /* ABI 1.1. Nonzero: grid_stride work launches the full grid (one loop iteration per thread) instead of
     blocks_per_sm x SMs; a spec's waves(k) or sms(k) still caps it. For a plan that measured it: a static policy never
     sets it, since more blocks cost more where a block ends in costly work (global atomics). */
  int32_t full_grid;
  uint32_t reserved2; /* 0; makes the tail padding explicit, so a later field never lands in it */
};

/* What a plugin's entry function (LAUNCHFIT_PLUGIN_ENTRY_SYMBOL) returns: its name, version and functions. */
typedef struct launchfit_plugin_descriptor {
  uint32_t struct_size; /* sizeof(launchfit_plugin_descriptor) as the plugin was compiled */
  uint32_t abi_version; /* LAUNCHFIT_PLUGIN_ABI_VERSION as the plugin was compiled */
  const char* name;     /* policy name: [A-Za-z_][A-Za-z0-9_]*, unique among loaded policies */
  const char* version;  /* plugin version, part of every cache key: "1.2.0" */
  /* Parses `params` ("k=v,k=v" in key order, possibly "") into a new state. */
  int (*create)(const char* params, void** state, char* errbuf, size_t errbuf_size);
  /* Decides a plan for the query (launchfit_plugin_status); on an error, says why in errbuf. */
  int (*choose)(void* state, const launchfit_query* query, launchfit_plan* plan, char* errbuf,
                size_t errbuf_size);
  /* Optional (may be NULL): the measured time of a plan this plugin chose. */
  void (*feedback)(void* state, const launchfit_plan* plan, double ms);
  /* Frees a state made by create(). */
  void (*destroy)(void* state);
  /* Optional (may be NULL): extra cache-key component from the work shape (e.g. a size bucket), so
     plans for different sizes are chosen and cached separately; 0 means n is irrelevant. */
  uint64_t (*work_bucket)(void* state, uint32_t work_kind, uint64_t work_n, uint32_t work_per_thread);
} launchfit_plugin_descriptor;

/* The smallest descriptor launchfit accepts: everything up to destroy. */
#define LAUNCHFIT_PLUGIN_DESCRIPTOR_MIN_SIZE \
  (offsetof(launchfit_plugin_descriptor, destroy) + sizeof(void (*)(void*)))

/* The type of launchfit_plugin_entry, the symbol a plugin exports. */
typedef const launchfit_plugin_descriptor* (*launchfit_plugin_entry_fn)(void);

/* Put before the definition of launchfit_plugin_entry so it is exported even with -fvisibility=hidden. */
#if defined(_WIN32)
#define LAUNCHFIT_PLUGIN_EXPORT __declspec(dllexport)
#else
#define LAUNCHFIT_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
}
#endif

#endif /* LAUNCHFIT_PLUGIN_H */
