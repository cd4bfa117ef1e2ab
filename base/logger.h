// Structured logging over spdlog, without spdlog's global registry: a Logger is a
// cheap value (component name + shared sinks) handed to each component by its owner.
// A default-constructed Logger discards everything, which keeps unit tests quiet.
//
// Line format (text):  2026-12-02T12:00:00.123Z INFO  engine  req=42 message k=v
// Line format (json):  {"ts":"...","level":"info","component":"engine","req":"42","msg":"..."}
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/str_format.h"

namespace spdlog {
class logger;
}

namespace kvserve::base {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };
enum class LogFormat { kText, kJson };

// Owns the sinks (stderr by default). Create one per process (in main) and derive
// component loggers from it.
class LogSinks {
 public:
  // Writes to stderr. `format` picks the line shape; `level` the threshold.
  static std::shared_ptr<LogSinks> Stderr(LogLevel level, LogFormat format);
  // Collects lines in memory (for tests that assert on log output).
  static std::shared_ptr<LogSinks> Memory(LogLevel level, LogFormat format);

  ~LogSinks();
  std::string memory_contents() const;  // empty unless created by Memory()
  LogLevel level() const { return level_; }
  LogFormat format() const { return format_; }

  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  LogSinks(LogLevel level, LogFormat format, std::unique_ptr<Impl> impl);
  LogLevel level_;
  LogFormat format_;
  std::unique_ptr<Impl> impl_;
};

class Logger {
 public:
  Logger() = default;  // null logger
  Logger(const std::shared_ptr<LogSinks>& sinks, std::string component);

  // A logger for a sub-component sharing the same sinks.
  Logger child(std::string component) const;

  bool enabled(LogLevel level) const;
  void log(LogLevel level, std::string_view request_id, std::string_view msg) const;

  template <typename... Args>
  void info(const absl::FormatSpec<Args...>& fmt, const Args&... args) const {
    if (enabled(LogLevel::kInfo)) log(LogLevel::kInfo, {}, absl::StrFormat(fmt, args...));
  }
  template <typename... Args>
  void warn(const absl::FormatSpec<Args...>& fmt, const Args&... args) const {
    if (enabled(LogLevel::kWarn)) log(LogLevel::kWarn, {}, absl::StrFormat(fmt, args...));
  }
  template <typename... Args>
  void error(const absl::FormatSpec<Args...>& fmt, const Args&... args) const {
    if (enabled(LogLevel::kError)) log(LogLevel::kError, {}, absl::StrFormat(fmt, args...));
  }
  template <typename... Args>
  void debug(const absl::FormatSpec<Args...>& fmt, const Args&... args) const {
    if (enabled(LogLevel::kDebug)) log(LogLevel::kDebug, {}, absl::StrFormat(fmt, args...));
  }
  // Request-scoped line: carries the request id as its own field.
  template <typename... Args>
  void req_info(std::string_view request_id, const absl::FormatSpec<Args...>& fmt,
                const Args&... args) const {
    if (enabled(LogLevel::kInfo)) log(LogLevel::kInfo, request_id, absl::StrFormat(fmt, args...));
  }
  template <typename... Args>
  void req_warn(std::string_view request_id, const absl::FormatSpec<Args...>& fmt,
                const Args&... args) const {
    if (enabled(LogLevel::kWarn)) log(LogLevel::kWarn, request_id, absl::StrFormat(fmt, args...));
  }

  const std::string& component() const { return component_; }

 private:
  std::shared_ptr<LogSinks> sinks_;
  std::shared_ptr<spdlog::logger> logger_;
  std::string component_;
};

}  // namespace kvserve::base
