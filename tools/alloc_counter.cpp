// Counts heap allocations made in this process, so that the benchmark can show that a
// steady-state training step allocates nothing: every operator new, and (with glibc,
// outside sanitizer builds, whose runtimes own malloc) every malloc, calloc, realloc and
// aligned allocation, which is where Eigen, the graph's arena and the scratch buffers get
// their memory.
#include <atomic>
#include <cstdlib>
#include <new>

#include "ablate/sanitizer.hpp"
#include "alloc_counter.hpp"

namespace {
std::atomic<uint64_t> g_allocations{0};
void count() { g_allocations.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

uint64_t ablate::cli::allocation_count() { return g_allocations.load(std::memory_order_relaxed); }

#if defined(__GLIBC__) && !ABLATE_ASAN && !ABLATE_TSAN
#define ABLATE_COUNT_MALLOC 1
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);

void* malloc(size_t n) {
  count();
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t size) {
  count();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) {
  count();
  return __libc_realloc(p, n);
}
void* aligned_alloc(size_t align, size_t n) {
  count();
  return __libc_memalign(align, n);
}
void* memalign(size_t align, size_t n) {
  count();
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return 22;  // EINVAL
  count();
  void* p = __libc_memalign(align, n);
  if (!p && n) return 12;  // ENOMEM
  *out = p;
  return 0;
}
void free(void* p) { __libc_free(p); }
}
#endif

namespace {
void* counted_new(std::size_t n) {
#ifndef ABLATE_COUNT_MALLOC
  count();  // malloc is not counted: count here
#endif
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
}  // namespace

// Every variant that the deletes below may free: a nothrow new left to the library (or to a
// sanitizer's runtime, which replaces them all) would be freed here with free(), an
// alloc-dealloc mismatch (std::stable_sort's buffer comes from the nothrow new).
void* operator new(std::size_t n) { return counted_new(n); }
void* operator new[](std::size_t n) { return counted_new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
#ifndef ABLATE_COUNT_MALLOC
  count();
#endif
  return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
