// The last line of defence for errors the daemon cannot recover from. Anything that reaches
// std::terminate (an exception that escaped a thread — above all std::bad_alloc when memory
// runs out mid-serving) ends the process with one clear line on stderr and a distinct exit
// code, instead of libstdc++'s "terminate called ..." and SIGABRT:
//
//   kvserve: fatal: out of memory (std::bad_alloc escaped a thread); exiting
//   exit code kExitFatal (3)
//
// Errors with a cause that can be named (a corrupt checkpoint, a KV pool that cannot be
// allocated at start-up) never get here: they are Status errors reported by the command with
// exit code 1. A broken invariant (KVS_CHECK) still aborts, with its own message.
#pragma once

namespace kvserve::base {

inline constexpr int kExitFatal = 3;

// Installs the terminate handler. Call once, first thing in main.
void InstallFatalHandlers();

}  // namespace kvserve::base
