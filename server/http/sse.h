// Server-sent events framing for the OpenAI streaming endpoints:
//   data: {json}\n\n   ...   data: [DONE]\n\n
// plus a comment line used as a keep-alive probe while the engine is silent (clients
// ignore lines starting with ':'; writing one is how a vanished client is noticed).
#pragma once

#include <string>
#include <string_view>

namespace kvserve::server {

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
inline constexpr std::string_view kSseKeepAlive = ": keep-alive\n\n";

// Appends one `data:` event. `json` must be a single line (compact JSON is).
void AppendSseEvent(std::string_view json, std::string& out);

}  // namespace kvserve::server
