// Whether this translation unit is built with a sanitizer: ABLATE_ASAN (AddressSanitizer) and
// ABLATE_TSAN (ThreadSanitizer), 1 or 0, under GCC (which defines __SANITIZE_ADDRESS__) and
// clang (which answers __has_feature) alike.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define ABLATE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ABLATE_ASAN 1
#endif
#endif
#ifndef ABLATE_ASAN
#define ABLATE_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define ABLATE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ABLATE_TSAN 1
#endif
#endif
#ifndef ABLATE_TSAN
#define ABLATE_TSAN 0
#endif
