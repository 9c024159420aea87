// SPDX-License-Identifier: MIT
#pragma once
// Internal: a copyable function object of one signature, as std::function, without <functional> (which
// brings <unordered_map>, <vector> and the standard searchers into every file that launches). Small
// function objects (a lambda capturing up to three pointers) are held in place: no allocation.

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace launchfit::detail {

template <class Signature>
class callable;

template <class R, class... A>
class callable<R(A...)> {
 public:
  callable() noexcept = default;
  callable(std::nullptr_t) noexcept {}  // NOLINT(google-explicit-constructor): as std::function
  // Holds a copy of f (moved when given an rvalue).
  template <class F, class T = std::decay_t<F>,
            class = std::enable_if_t<!std::is_same_v<T, callable> && std::is_invocable_r_v<R, T&, A...>>>
  callable(F&& f) : ops_(&ops_for<T>) {  // NOLINT(google-explicit-constructor): as std::function
    if constexpr (in_place<T>) {
      obj_ = ::new (static_cast<void*>(buf_)) T(std::forward<F>(f));
    } else {
      obj_ = new T(std::forward<F>(f));
    }
  }
  callable(const callable& o) : ops_(o.ops_) {
    if (ops_) obj_ = ops_->copy(o.obj_, buf_);
  }
  callable(callable&& o) noexcept : ops_(o.ops_) {
    if (ops_) obj_ = ops_->move(o.obj_, buf_);
    o.ops_ = nullptr;
    o.obj_ = nullptr;
  }
  callable& operator=(const callable& o) {
    if (this != &o) *this = callable(o);
    return *this;
  }
  callable& operator=(callable&& o) noexcept {
    if (this != &o) {
      clear();
      ops_ = o.ops_;
      if (ops_) obj_ = ops_->move(o.obj_, buf_);
      o.ops_ = nullptr;
      o.obj_ = nullptr;
    }
    return *this;
  }
  ~callable() { clear(); }

  // Holds a function object.
  explicit operator bool() const noexcept { return ops_ != nullptr; }
  // Calls it (as std::function, a const call of the held object, which may change its own state).
  R operator()(A... a) const { return ops_->call(obj_, std::forward<A>(a)...); }

 private:
  struct ops {
    R (*call)(void* self, A&&... a);
    void* (*copy)(const void* from, void* buf);
    void* (*move)(void* from,
                  void* buf) noexcept;  // from is left destroyed (in place) or taken (on the heap)
    void (*destroy)(void* self) noexcept;
  };
  static constexpr std::size_t buf_size = 3 * sizeof(void*);
  template <class T>
  static constexpr bool in_place =
      sizeof(T) <= buf_size &&
      alignof(T) <= alignof(std::max_align_t) && std::is_nothrow_move_constructible_v<T>;
  template <class T>
  static R call_of(void* self, A&&... a) {
    return (*static_cast<T*>(self))(std::forward<A>(a)...);
  }
  template <class T>
  static void* copy_of(const void* from, void* buf) {
    if constexpr (in_place<T>) {
      return ::new (buf) T(*static_cast<const T*>(from));
    } else {
      return new T(*static_cast<const T*>(from));
    }
  }
  template <class T>
  static void* move_of(void* from, void* buf) noexcept {
    if constexpr (in_place<T>) {
      T* t = ::new (buf) T(std::move(*static_cast<T*>(from)));
      static_cast<T*>(from)->~T();
      return t;
    } else {
      return from;
    }
  }
  template <class T>
  static void destroy_of(void* self) noexcept {
    if constexpr (in_place<T>) {
      static_cast<T*>(self)->~T();
    } else {
      delete static_cast<T*>(self);
    }
  }
  template <class T>
  static constexpr ops ops_for{&call_of<T>, &copy_of<T>, &move_of<T>, &destroy_of<T>};

  void clear() noexcept {
    if (ops_) ops_->destroy(obj_);
    ops_ = nullptr;
    obj_ = nullptr;
  }

  const ops* ops_ = nullptr;
  void* obj_ = nullptr;
  alignas(std::max_align_t) unsigned char buf_[buf_size];
};

}  // namespace launchfit::detail
