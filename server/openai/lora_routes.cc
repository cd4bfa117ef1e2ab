#include "server/openai/lora_routes.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/errors/error_mapping.h"
#include "server/openai/openai_routes.h"

namespace kvserve::server {
namespace {

using json = nlohmann::json;

HttpResponse Error(const absl::Status& status) { return ErrorResponse(ToHttpError(status)); }

HttpResponse Text(std::string body) {
  HttpResponse r;
  r.status = 200;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(body);
  return r;
}

// The string member `key` of a JSON object body, or a field error naming it.
absl::StatusOr<std::string> Member(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || !it->is_string() || it->get<std::string>().empty()) {
    return FieldError(key, "is required (a non-empty string)");
  }
  return it->get<std::string>();
}

class LoraRoutes {
 public:
  LoraRoutes(Frontend& frontend, LoraRoutesOptions options)
      : frontend_(frontend), options_(std::move(options)) {}

  HttpResponse Load(const HttpRequest& req) {
    auto body = Admit(req);
    if (!body.ok()) return Error(body.status());
    auto name = Member(*body, "lora_name");
    if (!name.ok()) return Error(name.status());
    auto path = Member(*body, "lora_path");
    if (!path.ok()) return Error(path.status());
    if (*name == frontend_.options().model_name) {
      return Error(FieldError("lora_name", absl::StrCat("'", *name, "' is the base model's name")));
    }
    absl::Status st = frontend_.engine().LoadAdapter(*name, *path);
    if (absl::IsAlreadyExists(st)) {
      return Error(FieldError("lora_name", absl::StrCat("an adapter named '", *name,
                                                        "' is already loaded; unload it first")));
    }
    if (!st.ok()) return Error(absl::InvalidArgumentError(st.message()));
    return Text(absl::StrCat("Success: LoRA adapter '", *name, "' added successfully."));
  }

  HttpResponse Unload(const HttpRequest& req) {
    auto body = Admit(req);
    if (!body.ok()) return Error(body.status());
    auto name = Member(*body, "lora_name");
    if (!name.ok()) return Error(name.status());
    absl::Status st = frontend_.engine().UnloadAdapter(*name);
    if (absl::IsNotFound(st)) return Error(ModelNotFound(*name));
    if (!st.ok()) return Error(st);
    return Text(absl::StrCat("Success: LoRA adapter '", *name, "' removed successfully."));
  }

 private:
  absl::StatusOr<json> Admit(const HttpRequest& req) {
    if (options_.admin_key) {
      if (absl::Status st = options_.admin_key->Check(req.header("Authorization")); !st.ok())
        return st;
    } else if (!options_.open_server) {
      return absl::PermissionDeniedError(
          "loading and unloading LoRA adapters needs lora.admin_api_key on a server with tenant "
          "keys");
    }
    json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      return absl::InvalidArgumentError("the body must be a JSON object");
    }
    return body;
  }

  Frontend& frontend_;
  const LoraRoutesOptions options_;
};

}  // namespace

void RegisterLoraRoutes(HttpServer& http, Frontend& frontend, LoraRoutesOptions options) {
  auto routes = std::make_shared<LoraRoutes>(frontend, std::move(options));
  http.Post("/v1/load_lora_adapter", [routes](const HttpRequest& r) { return routes->Load(r); });
  http.Post("/v1/unload_lora_adapter",
            [routes](const HttpRequest& r) { return routes->Unload(r); });
}

}  // namespace kvserve::server
