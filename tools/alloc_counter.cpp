// Counts heap allocations made through operator new in this process, so that the
// benchmark can show that a steady-state training step allocates nothing.
#include <atomic>
#include <cstdlib>
#include <new>

#include "alloc_counter.hpp"

namespace {
std::atomic<uint64_t> g_allocations{0};
}

uint64_t ablate::cli::allocation_count() { return g_allocations.load(std::memory_order_relaxed); }

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
