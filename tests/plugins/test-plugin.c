/* Test plugins for the C ABI, one behaviour per build (LF_TEST_MODE). Written in C so plugin.h is also
 * checked as a C header. */
#include <launchfit/plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODE_GOOD 0     /* 64 threads, or block=N from the parameters */
#define MODE_BAD_ABI 1  /* built for ABI major + 1 */
#define MODE_SMALL 2    /* descriptor smaller than the ABI minimum */
#define MODE_ERROR 3    /* choose() fails */
#define MODE_INVALID 4  /* a 2048-thread block */
#define MODE_DECLINE 5  /* never decides */
#define MODE_NO_ENTRY 6 /* exports no entry symbol */

#ifndef LF_TEST_MODE
#error "define LF_TEST_MODE"
#endif
#ifndef LF_TEST_NAME
#error "define LF_TEST_NAME"
#endif

typedef struct state {
  int block;
  int bucketed;
  int feedback_calls; /* atomic: feedback() may run on several threads at once (plugin.h) */
} state;

static int create(const char* params, void** out, char* errbuf, size_t errbuf_size) {
  state* s = (state*)calloc(1, sizeof(state));
  const char* p = params;
  if (!s) return LAUNCHFIT_PLUGIN_ERROR;
  s->block = 64;
  while (p && *p) {
    int value = 0;
    int used = 0;
    if (sscanf(p, "block=%d%n", &value, &used) == 1) {
      s->block = value;
    } else if (sscanf(p, "bucketed=%d%n", &value, &used) == 1) {
      s->bucketed = value;
    } else {
      snprintf(errbuf, errbuf_size, "unknown parameter in '%s' (known: block, bucketed)", p);
      free(s);
      return LAUNCHFIT_PLUGIN_ERROR;
    }
    p += used;
    if (*p == ',') ++p;
  }
  *out = s;
  return LAUNCHFIT_PLUGIN_OK;
}

static int choose(void* st, const launchfit_query* q, launchfit_plan* plan, char* errbuf,
                  size_t errbuf_size) {
  const state* s = (const state*)st;
  switch (LF_TEST_MODE) {
    case MODE_ERROR:
      snprintf(errbuf, errbuf_size, "no tuning data for kernel %s", q->kernel->demangled);
      return LAUNCHFIT_PLUGIN_ERROR;
    case MODE_DECLINE:
      if (s->block != 64) snprintf(errbuf, errbuf_size, "no opinion on %d threads", s->block);
      return LAUNCHFIT_PLUGIN_DECLINE;
    case MODE_INVALID:
      plan->block_x = 2048;
      snprintf(plan->reason, sizeof plan->reason, "as large as possible");
      return LAUNCHFIT_PLUGIN_OK;
    default:
      break;
  }
  if (q->struct_size < sizeof(launchfit_query) || !LAUNCHFIT_HAS_FIELD(q, launchfit_query, time_plan)) {
    snprintf(errbuf, errbuf_size, "query too small");
    return LAUNCHFIT_PLUGIN_ERROR;
  }
  plan->block_x = (uint32_t)s->block;
  plan->blocks_per_sm = q->active_blocks(q->ctx, s->block, q->smem_for_block(q->ctx, s->block));
  /* The feedback count lets a test see which policy objects feedback reached. */
  snprintf(plan->reason, sizeof plan->reason, "always %d threads (%d blocks/SM on %s, %d SMs); feedback %d",
           s->block, plan->blocks_per_sm, q->device->name, q->device->sm_count,
           __atomic_load_n(&s->feedback_calls, __ATOMIC_RELAXED));
  return LAUNCHFIT_PLUGIN_OK;
}

static void feedback(void* st, const launchfit_plan* plan, double ms) {
  (void)plan;
  (void)ms;
  __atomic_fetch_add(&((state*)st)->feedback_calls, 1, __ATOMIC_RELAXED);
}

static void destroy(void* st) { free(st); }

static uint64_t work_bucket(void* st, uint32_t kind, uint64_t n, uint32_t per_thread) {
  uint64_t bucket = 0;
  (void)kind;
  (void)per_thread;
  if (!((const state*)st)->bucketed) return 0;
  while (n > 1) {
    n >>= 1;
    ++bucket;
  }
  return bucket + 1; /* 0 is reserved for "n does not matter" */
}

static const launchfit_plugin_descriptor descriptor = {
    LF_TEST_MODE == MODE_SMALL ? (uint32_t)offsetof(launchfit_plugin_descriptor, choose)
                               : (uint32_t)sizeof(launchfit_plugin_descriptor),
    LF_TEST_MODE == MODE_BAD_ABI ? ((uint32_t)(LAUNCHFIT_PLUGIN_ABI_MAJOR + 1) << 16)
                                 : LAUNCHFIT_PLUGIN_ABI_VERSION,
    LF_TEST_NAME,
    "1.0.0",
    create,
    choose,
    feedback,
    destroy,
    work_bucket,
};

#if LF_TEST_MODE == MODE_NO_ENTRY
LAUNCHFIT_PLUGIN_EXPORT const launchfit_plugin_descriptor* launchfit_plugin_entry_misspelled(void) {
  return &descriptor;
}
#else
LAUNCHFIT_PLUGIN_EXPORT const launchfit_plugin_descriptor* launchfit_plugin_entry(void) {
  return &descriptor;
}
#endif
