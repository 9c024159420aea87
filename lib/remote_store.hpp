// SPDX-License-Identifier: MIT
#pragma once
// Internal: the process's remote plan store, the layer below the local file (store/chain.hpp). Off by
// default; LAUNCHFIT_REMOTE=redis://host:port[/db] or set_remote_store() turns it on. The layer itself is
// store/remote_layer.hpp (its bounds and failure rule are stated there), its keys and values
// store/kv_scheme.hpp.

#include "store/kv_scheme.hpp"  // the URL and TTL rules (remote_default_ttl_s) settings read
#include "store/layer.hpp"

namespace launchfit::detail {

// The process's remote layer, or nullptr while none is configured (the default, a refused URL, or after
// close_remote_store()). The first call reads LAUNCHFIT_REMOTE (and LAUNCHFIT_REMOTE_TTL) unless
// set_remote_store() or close_remote_store() came first; later calls are one atomic load. A pointer it
// returned stays valid for the life of the process: a store replaced or closed since answers nothing and
// drops what it is given. Its entries come back validated, with plan.match == "remote".
//
// How the plan store uses it: find_stored_plan() asks remote_layer()->find(key) only when memory and the
// file have no plan for the key (never on the hit path: find() may do I/O, bounded by the operation bound),
// picks the best entry as for the file (best_stored_plan(..., "remote")) and validates it for the launch;
// store_plan() hands every plan it records to put() as well (it queues; a plan that came from a store
// need not be put back). flush_remote_store() and the exit handler flush the queue.
plan_store_layer* remote_layer() noexcept;

// Tests only: the connect and operation bounds (ms) of the stores set_remote_store() and LAUNCHFIT_REMOTE
// make from now on, instead of 100 and 200 ms. A test of what stores share, on a host loaded enough to
// starve a process for 200 ms, must not see its store fail open or dropped as slow.
void set_remote_bounds_for_tests(unsigned connect_ms, unsigned op_ms) noexcept;

}  // namespace launchfit::detail
