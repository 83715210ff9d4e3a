// Writing JSON as text: everything herd writes or prints as JSON (checkpoint manifests, metrics records,
// flight-recorder dumps, --json outputs, the previews in error messages) goes through json_text.
//
// A JSON string herd holds may not be UTF-8: an override or a path is whatever bytes the user gave.
// nlohmann's dump() throws on those, which once aborted herd (found by the train_config fuzzer,
// docs/fuzzing.md); json_text writes U+FFFD in place of each bad byte instead.
#pragma once

#include <string>

#include "herd/core/json.h"

namespace herd {

// The JSON text of `v`; indent -1: one line.
std::string json_text(const Json& v, int indent = -1);

}  // namespace herd
