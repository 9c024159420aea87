// SPDX-License-Identifier: MIT
#pragma once
// Internal: the kernels a module has handed out, so unloading it forgets their cached plans.

#include <atomic>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace launchfit::detail {

// Thread-safe and lock-free (a list nodes are only pushed onto, each id once): a child of fork() forked while
// another thread was inside insert() finds the set whole and takes no lock of a thread that is gone, its module's
// destructor at the child's exit included. Bounded by the kernels in the module however often get() runs.
class kernel_id_set {
 public:
  kernel_id_set() = default;
  kernel_id_set(const kernel_id_set&) = delete;
  kernel_id_set& operator=(const kernel_id_set&) = delete;
  ~kernel_id_set() {
    for (node* n = head_.load(std::memory_order_acquire); n;) delete std::exchange(n, n->next);
  }
  void insert(std::uintptr_t id) {
    node* seen = head_.load(std::memory_order_acquire);
    for (const node* n = seen; n; n = n->next)
      if (n->id == id) return;
    auto* made = new node{id, seen};
    while (!head_.compare_exchange_weak(made->next, made, std::memory_order_release, std::memory_order_acquire)) {
      // Pushed by others since `seen`: this id may be among them.
      for (const node* n = made->next; n != seen; n = n->next) {
        if (n->id == id) {
          delete made;
          return;
        }
      }
      seen = made->next;
    }
  }
  std::vector<std::uintptr_t> ids() const {
    std::vector<std::uintptr_t> out;
    for (const node* n = head_.load(std::memory_order_acquire); n; n = n->next) out.push_back(n->id);
    return out;
  }
  std::size_t size() const {
    std::size_t count = 0;
    for (const node* n = head_.load(std::memory_order_acquire); n; n = n->next) ++count;
    return count;
  }

 private:
  struct node {
    std::uintptr_t id;
    node* next;  // set before the node is published, never changed
  };
  std::atomic<node*> head_{nullptr};

 public:
  // A module loaded from PTX: its entries that never execute griddepcontrol.wait (ptx_scan.hpp). Empty
  // optional for a cubin or fatbin (launchfit does not read their machine code).
  std::optional<std::set<std::string>> entries_without_wait;
};

}  // namespace launchfit::detail
