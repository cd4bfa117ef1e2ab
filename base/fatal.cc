#include "base/fatal.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

namespace kvserve::base {
namespace {

// Writes with write(2): after an allocation failure, stdio buffers may not be allocatable.
void WriteStderr(const char* text) {
  size_t len = 0;
  while (text[len] != '\0') ++len;
  while (len > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, len);
    if (n <= 0) return;
    text += n;
    len -= static_cast<size_t>(n);
  }
}

[[noreturn]] void OnTerminate() {
  const char* what = "std::terminate called without an active exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      what = "out of memory (std::bad_alloc escaped a thread)";
    } catch (const std::exception& ex) {
      WriteStderr("kvserve: fatal: uncaught exception: ");
      WriteStderr(ex.what());
      WriteStderr("; exiting\n");
      std::_Exit(kExitFatal);
    } catch (...) {
      what = "uncaught exception of unknown type";
    }
  }
  WriteStderr("kvserve: fatal: ");
  WriteStderr(what);
  WriteStderr("; exiting\n");
  std::_Exit(kExitFatal);
}

}  // namespace

void InstallFatalHandlers() { std::set_terminate(OnTerminate); }

}  // namespace kvserve::base
