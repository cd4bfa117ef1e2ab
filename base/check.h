// Invariant checks. Boundaries return absl::Status; inside a component a broken
// invariant is a bug, so it aborts with the condition and a formatted message.
// DCHECK runs only in builds with KVSERVE_DEBUG_CHECKS (debug/asan presets).
#pragma once

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace kvserve::base::internal {
[[noreturn]] inline void CheckFailed(const char* file, int line, const char* cond,
                                     const std::string& msg) {
  std::fprintf(stderr, "FATAL %s:%d: check failed: %s %s\n", file, line, cond, msg.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace kvserve::base::internal

#define KVS_CHECK(cond, ...)                                                       \
  do {                                                                             \
    if (!(cond)) [[unlikely]] {                                                    \
      ::kvserve::base::internal::CheckFailed(__FILE__, __LINE__, #cond,            \
                                             ::absl::StrCat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                              \
  } while (0)

#if defined(KVSERVE_DEBUG_CHECKS)
#define KVS_DCHECK(cond, ...) KVS_CHECK(cond __VA_OPT__(, ) __VA_ARGS__)
#else
#define KVS_DCHECK(cond, ...) \
  do {                        \
  } while (0)
#endif

// Propagates a non-OK absl::Status.
#define KVS_RETURN_IF_ERROR(expr)        \
  do {                                   \
    ::absl::Status _kvs_st = (expr);     \
    if (!_kvs_st.ok()) return _kvs_st;   \
  } while (0)

#define KVS_CONCAT_INNER(a, b) a##b
#define KVS_CONCAT(a, b) KVS_CONCAT_INNER(a, b)
// KVS_ASSIGN_OR_RETURN(auto x, StatusOrExpr());
#define KVS_ASSIGN_OR_RETURN(lhs, expr) \
  KVS_ASSIGN_OR_RETURN_IMPL(KVS_CONCAT(_kvs_so_, __LINE__), lhs, expr)
#define KVS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()
