#include "core/math/progress.h"

#include <omp.h>

#include <chrono>

namespace gf::progress {

namespace {

struct State {
  const std::function<void()>* hook;
  double interval_s;
  std::chrono::steady_clock::time_point last;
  bool inside;  // the hook itself may reach a point (it must not run again from there)
};

thread_local State tl_state{};

}  // namespace

namespace detail {

thread_local const void* tl_scope = nullptr;

void call() {
  State& s = tl_state;
  if (s.inside || omp_in_parallel()) return;
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - s.last).count() < s.interval_s) return;
  s.inside = true;
  (*s.hook)();
  s.inside = false;
  s.last = std::chrono::steady_clock::now();
}

}  // namespace detail

Scope::Scope(std::function<void()> hook, double min_interval_s) : hook_(std::move(hook)), interval_s_(min_interval_s), prev_(detail::tl_scope) {
  // A nested scope replaces the outer one's hook until it ends; then the outer's is back.
  tl_state = State{&hook_, min_interval_s, std::chrono::steady_clock::now(), false};
  detail::tl_scope = this;
}

Scope::~Scope() {
  detail::tl_scope = prev_;
  if (prev_ != nullptr) {
    const auto* outer = static_cast<const Scope*>(prev_);
    tl_state = State{&outer->hook_, outer->interval_s_, std::chrono::steady_clock::now(), false};
  } else {
    tl_state = State{};
  }
}

}  // namespace gf::progress
