// A small reader of the Prometheus text exposition format for tests: samples by name and
// labels, and the # TYPE of each family. It reads what prometheus::TextSerializer writes.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::server::testing {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0.0;
};

class Exposition {
 public:
  // Fails (returns nullopt, with the offending line in `error`) on a malformed line.
  static std::optional<Exposition> Parse(std::string_view text, std::string* error);

  // Samples named `name` whose labels include all of `labels`.
  std::vector<Sample> Find(const std::string& name, const std::map<std::string, std::string>& labels = {}) const;
  // Sum of those samples' values; nullopt when there is none.
  std::optional<double> Sum(const std::string& name, const std::map<std::string, std::string>& labels = {}) const;
  // "counter", "gauge", "histogram", ... or "" when the family has no # TYPE line.
  std::string Type(const std::string& family) const;
  const std::vector<Sample>& samples() const { return samples_; }

 private:
  std::vector<Sample> samples_;
  std::map<std::string, std::string> types_;
};

}  // namespace kvserve::server::testing
