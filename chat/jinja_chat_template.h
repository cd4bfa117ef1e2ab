// The model's own chat template, rendered by kvserve::jinja (model.chat_template=auto when the
// model directory has a template). Compiled once at start-up; Render() is thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chat/chat_template.h"

namespace kvserve::chat {

// Errors name the template line (syntax errors are start-up errors).
absl::StatusOr<std::unique_ptr<ChatTemplate>> MakeJinjaChatTemplate(
    std::string_view jinja_text, const ChatTemplateTokens& tokens,
    std::function<absl::Time()> clock);

}  // namespace kvserve::chat
