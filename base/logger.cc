#include "base/logger.h"

#include <mutex>
#include <sstream>

#include "spdlog/logger.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace kvserve::base {

struct LogSinks::Impl {
  spdlog::sink_ptr sink;
  std::shared_ptr<std::ostringstream> memory;  // only for Memory()
  mutable std::mutex memory_mu;
};

namespace {

spdlog::level::level_enum ToSpd(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return spdlog::level::trace;
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kOff: return spdlog::level::off;
  }
  return spdlog::level::info;
}

std::string Pattern(LogFormat format) {
  if (format == LogFormat::kJson) {
    return R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ",%v})";
  }
  return "%Y-%m-%dT%H:%M:%S.%eZ %v";
}

std::string_view LevelName(LogLevel level, bool upper) {
  static constexpr std::string_view kLower[] = {"trace", "debug", "info", "warn", "error", "off"};
  static constexpr std::string_view kUpper[] = {"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "OFF"};
  return (upper ? kUpper : kLower)[static_cast<int>(level)];
}

void AppendJsonEscaped(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
}

}  // namespace

LogSinks::LogSinks(LogLevel level, LogFormat format, std::unique_ptr<Impl> impl)
    : level_(level), format_(format), impl_(std::move(impl)) {
  impl_->sink->set_formatter(
      std::make_unique<spdlog::pattern_formatter>(Pattern(format), spdlog::pattern_time_type::utc));
  impl_->sink->set_level(ToSpd(level));
}

LogSinks::~LogSinks() = default;

std::shared_ptr<LogSinks> LogSinks::Stderr(LogLevel level, LogFormat format) {
  auto impl = std::make_unique<Impl>();
  impl->sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  return std::shared_ptr<LogSinks>(new LogSinks(level, format, std::move(impl)));
}

std::shared_ptr<LogSinks> LogSinks::Memory(LogLevel level, LogFormat format) {
  auto impl = std::make_unique<Impl>();
  impl->memory = std::make_shared<std::ostringstream>();
  impl->sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*impl->memory, /*force_flush=*/true);
  return std::shared_ptr<LogSinks>(new LogSinks(level, format, std::move(impl)));
}

std::string LogSinks::memory_contents() const {
  if (!impl_->memory) return {};
  std::lock_guard<std::mutex> lock(impl_->memory_mu);
  return impl_->memory->str();
}

Logger::Logger(const std::shared_ptr<LogSinks>& sinks, std::string component)
    : sinks_(sinks), component_(std::move(component)) {
  if (sinks_) {
    logger_ = std::make_shared<spdlog::logger>(component_, sinks_->impl()->sink);
    logger_->set_level(ToSpd(sinks_->level()));
    logger_->flush_on(spdlog::level::warn);
  }
}

Logger Logger::child(std::string component) const { return Logger(sinks_, std::move(component)); }

bool Logger::enabled(LogLevel level) const {
  return logger_ != nullptr && logger_->should_log(ToSpd(level));
}

void Logger::log(LogLevel level, std::string_view request_id, std::string_view msg) const {
  if (!enabled(level)) return;
  std::string line;
  if (sinks_->format() == LogFormat::kJson) {
    line += absl::StrFormat("\"level\":\"%s\",\"component\":\"", LevelName(level, false));
    AppendJsonEscaped(line, component_);
    line += "\",";
    if (!request_id.empty()) {
      line += "\"req\":\"";
      AppendJsonEscaped(line, request_id);
      line += "\",";
    }
    line += "\"msg\":\"";
    AppendJsonEscaped(line, msg);
    line += "\"";
  } else {
    line += absl::StrFormat("%-5s %-9s ", LevelName(level, true), component_);
    if (!request_id.empty()) {
      line += "req=";
      line += request_id;
      line += ' ';
    }
    line += msg;
  }
  logger_->log(ToSpd(level), "{}", line);
}

}  // namespace kvserve::base
