// What every HTTP test does as a client of the OpenAI routes, in one place: the bearer
// header, the OpenAI error shape, SSE payloads, and why a response carried no body.
// Header-only so that tests which only talk to a daemon process over sockets (and do not
// link the in-process test doubles of kvserve_server_testing) can use it too.
#pragma once

#include <httplib.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::server::testing {

// `Authorization: Bearer <key>`, or no header when key is empty.
inline httplib::Headers BearerHeaders(const std::string& key) {
  httplib::Headers h;
  if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
  return h;
}

// Expects an OpenAI error object answered with HTTP `status` (a non-empty message, a type,
// a param member and code == status, or OpenAI's string code such as "model_not_found") and
// returns the `error` member (null when absent).
inline nlohmann::json ExpectOpenAiError(const httplib::Result& res, int status) {
  EXPECT_TRUE(res) << "no response";
  if (!res) return nlohmann::json();
  EXPECT_EQ(res->status, status) << res->body;
  nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
  EXPECT_TRUE(j.is_object() && j.contains("error")) << res->body;
  if (!j.is_object() || !j.contains("error")) return nlohmann::json();
  const nlohmann::json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << res->body;
  EXPECT_TRUE(e["type"].is_string()) << res->body;
  EXPECT_TRUE(e.contains("param")) << res->body;
  EXPECT_TRUE(e["code"] == status || e["code"].is_string()) << res->body;
  return e;
}

// A 200 response's body, or else why there is none (the client error, or the status and
// body), for tests that fire many requests from threads and report afterwards.
struct BodyOrFailure {
  std::string body;
  std::string failure;
};
inline BodyOrFailure TakeBody(const httplib::Result& res) {
  if (!res) return {"", "client error " + httplib::to_string(res.error())};
  if (res->status != 200) return {"", "status " + std::to_string(res->status) + ": " + res->body};
  return {res->body, ""};
}

// The payloads of the `data:` events of an SSE body, in order (comments skipped).
inline std::vector<std::string> SseData(std::string_view body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string_view::npos) end = body.size();
    std::string_view event = body.substr(pos, end - pos);
    if (event.starts_with("data: ")) out.emplace_back(event.substr(6));
    pos = end + 2;
  }
  return out;
}

}  // namespace kvserve::server::testing
