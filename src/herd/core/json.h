// Typed access to JSON objects with errors that name the field.
//
// Config and cluster files are read through these helpers so that every missing, mistyped or
// out-of-range field yields one line such as `tiers[1].bw_gb_per_s: expected a positive number, got
// "fast"`. Paths are built by the caller ("tiers[1]") and prefixed to the key.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "herd/core/error.h"

namespace herd {

using Json = nlohmann::json;

// The deepest nesting of arrays and objects herd reads: every JSON herd parses (configs, cluster files,
// manifests, metrics lines, Hugging Face config.json and tokenizer.json, safetensors headers) goes
// through parse_json_text, which refuses deeper text with one error before nlohmann parses it, so no
// reader or error message walks an unbounded depth.
inline constexpr int kMaxJsonDepth = 64;

Result<Json> parse_json_text(std::string_view text, const std::string& source_name);
Result<Json> read_json_file(const std::string& path);

// One-line rendering of a JSON value for error messages (strings quoted): at most kPreviewChars
// characters, a longer value cut to end in "...", whatever the value's size or depth.
inline constexpr std::size_t kPreviewChars = 40;
std::string json_preview(const Json& v);

// Full field name: "tiers[1]" + "size" -> "tiers[1].size"; "" + "size" -> "size".
std::string field_path(const std::string& parent, const std::string& key);

// Required fields: error when missing, null or of the wrong type.
Result<std::int64_t> json_int(const Json& obj, const std::string& parent, const std::string& key);
Result<double> json_number(const Json& obj, const std::string& parent, const std::string& key);
Result<std::string> json_string(const Json& obj, const std::string& parent, const std::string& key);
Result<bool> json_bool(const Json& obj, const std::string& parent, const std::string& key);

// Optional fields: the default when missing or null, an error when present with the wrong type.
Result<std::int64_t> json_int_or(const Json& obj, const std::string& parent, const std::string& key,
                                 std::int64_t fallback);
Result<double> json_number_or(const Json& obj, const std::string& parent, const std::string& key, double fallback);
Result<std::string> json_string_or(const Json& obj, const std::string& parent, const std::string& key,
                                   const std::string& fallback);
Result<bool> json_bool_or(const Json& obj, const std::string& parent, const std::string& key, bool fallback);

// Positivity checks with the field name in the message.
Status require_positive(double value, const std::string& field);
Status require_positive(std::int64_t value, const std::string& field);

}  // namespace herd
