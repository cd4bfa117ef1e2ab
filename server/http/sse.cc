#include "server/http/sse.h"

namespace kvserve::server {

void AppendSseEvent(std::string_view json, std::string& out) {
  out.append("data: ");
  out.append(json);
  out.append("\n\n");
}

}  // namespace kvserve::server
