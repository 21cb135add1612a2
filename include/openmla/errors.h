// The library's one error-message shape, for code that checks its own
// arguments before calling OpenMLA (bindings, engine integrations):
//   "<entry>: argument '<name>' <problem>: got <got>, expected <expected>"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "openmla/status.h"

namespace openmla {

Status argument_error(StatusCode code, const char* entry, std::string_view name, std::string_view problem,
                      std::string_view got, std::string_view expected);

// "name = value", for the `got` part of a message.
std::string show(std::string_view name, int64_t value);
std::string show(std::string_view name, std::string_view value);

}  // namespace openmla
