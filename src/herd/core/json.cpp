#include "herd/core/json.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "herd/core/json_text.h"

namespace herd {

namespace {

// "[json.exception.out_of_range.406] number overflow parsing '1e400'" -> "number overflow parsing '1e400'".
std::string without_exception_tag(const std::string& what) {
  const std::size_t close = what.find("] ");
  return what.rfind("[json.exception.", 0) == 0 && close != std::string::npos ? what.substr(close + 2) : what;
}

// The byte at which `text` opens its (kMaxJsonDepth + 1)-th nested array or object, if it does. Brackets
// inside strings do not count; the syntax itself is left to the parser.
std::optional<std::size_t> too_deep_at(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

}  // namespace

Result<Json> parse_json_text(std::string_view text, const std::string& source_name) {
  if (const std::optional<std::size_t> at = too_deep_at(text)) {
    return make_error(source_name, ": nested more than ", kMaxJsonDepth, " arrays or objects deep (byte ", *at,
                      "); herd reads JSON at most ", kMaxJsonDepth, " levels deep");
  }
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Re-parse with exceptions only to recover nlohmann's byte position for the message.
    try {
      Json again = Json::parse(text);
      (void)again;
    } catch (const Json::parse_error& e) {
      return make_error(source_name, ": not valid JSON (byte ", e.byte, "); fix the syntax");
    } catch (const Json::out_of_range& e) {
      // A number beyond a double (1e400): nlohmann reports it as out_of_range, not as a parse_error.
      return make_error(source_name, ": ", without_exception_tag(e.what()), "; write a number within +-1.7e308");
    } catch (const Json::exception& e) {
      return make_error(source_name, ": not valid JSON (", without_exception_tag(e.what()), "); fix the syntax");
    }
    return make_error(source_name, ": not valid JSON; fix the syntax");
  }
  return j;
}

Result<Json> read_json_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return make_error(path, ": is a directory, not a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path, ": cannot open file; check the path");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_json_text(ss.str(), path);
}

std::string json_text(const Json& v, int indent) { return v.dump(indent, ' ', false, Json::error_handler_t::replace); }

namespace {

// Appends the one-line text of `v` to `out` until `out` holds more than `limit` characters, so that a
// value of any size or depth costs at most about `limit` characters and as many levels of recursion.
void append_preview(const Json& v, std::string& out, std::size_t limit) {
  if (out.size() > limit) return;
  auto append_string = [&](const std::string& s) {
    out += json_text(Json(s.size() > limit ? s.substr(0, limit + 1) : s));
  };
  if (v.is_array()) {
    out += '[';
    for (auto it = v.begin(); it != v.end() && out.size() <= limit; ++it) {
      if (it != v.begin()) out += ',';
      append_preview(*it, out, limit);
    }
    out += ']';
  } else if (v.is_object()) {
    out += '{';
    for (auto it = v.begin(); it != v.end() && out.size() <= limit; ++it) {
      if (it != v.begin()) out += ',';
      append_string(it.key());
      out += ':';
      append_preview(it.value(), out, limit);
    }
    out += '}';
  } else if (v.is_string()) {
    append_string(v.get_ref<const std::string&>());
  } else {
    out += json_text(v);
  }
}

}  // namespace

std::string json_preview(const Json& v) {
  std::string s;
  append_preview(v, s, kPreviewChars);
  if (s.size() > kPreviewChars) s = s.substr(0, kPreviewChars - 3) + "...";
  return s;
}

std::string field_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

namespace {

const Json* find_field(const Json& obj, const std::string& key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Error missing(const std::string& parent, const std::string& key, const char* what) {
  return make_error(field_path(parent, key), ": missing; expected ", what);
}

Error mistyped(const std::string& parent, const std::string& key, const char* what, const Json& got) {
  return make_error(field_path(parent, key), ": expected ", what, ", got ", json_preview(got));
}

Result<std::int64_t> to_int(const Json& v, const std::string& parent, const std::string& key) {
  if (v.is_number_unsigned()) {
    // Above 2^63 - 1 the value would wrap to a negative int64.
    if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return mistyped(parent, key, "an integer below 2^63", v);
    }
    return static_cast<std::int64_t>(v.get<std::uint64_t>());
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<std::int64_t>(d);
  }
  return mistyped(parent, key, "an integer", v);
}

Result<double> to_number(const Json& v, const std::string& parent, const std::string& key) {
  if (v.is_number()) return v.get<double>();
  return mistyped(parent, key, "a number", v);
}

}  // namespace

Result<std::int64_t> json_int(const Json& obj, const std::string& parent, const std::string& key) {
  const Json* v = find_field(obj, key);
  if (!v) return missing(parent, key, "an integer");
  return to_int(*v, parent, key);
}

Result<double> json_number(const Json& obj, const std::string& parent, const std::string& key) {
  const Json* v = find_field(obj, key);
  if (!v) return missing(parent, key, "a number");
  return to_number(*v, parent, key);
}

Result<std::string> json_string(const Json& obj, const std::string& parent, const std::string& key) {
  const Json* v = find_field(obj, key);
  if (!v) return missing(parent, key, "a string");
  if (!v->is_string()) return mistyped(parent, key, "a string", *v);
  return v->get<std::string>();
}

Result<bool> json_bool(const Json& obj, const std::string& parent, const std::string& key) {
  const Json* v = find_field(obj, key);
  if (!v) return missing(parent, key, "true or false");
  if (!v->is_boolean()) return mistyped(parent, key, "true or false", *v);
  return v->get<bool>();
}

Result<std::int64_t> json_int_or(const Json& obj, const std::string& parent, const std::string& key,
                                 std::int64_t fallback) {
  const Json* v = find_field(obj, key);
  if (!v) return fallback;
  return to_int(*v, parent, key);
}

Result<double> json_number_or(const Json& obj, const std::string& parent, const std::string& key, double fallback) {
  const Json* v = find_field(obj, key);
  if (!v) return fallback;
  return to_number(*v, parent, key);
}

Result<std::string> json_string_or(const Json& obj, const std::string& parent, const std::string& key,
                                   const std::string& fallback) {
  const Json* v = find_field(obj, key);
  if (!v) return fallback;
  if (!v->is_string()) return mistyped(parent, key, "a string", *v);
  return v->get<std::string>();
}

Result<bool> json_bool_or(const Json& obj, const std::string& parent, const std::string& key, bool fallback) {
  const Json* v = find_field(obj, key);
  if (!v) return fallback;
  if (!v->is_boolean()) return mistyped(parent, key, "true or false", *v);
  return v->get<bool>();
}

Status require_positive(double value, const std::string& field) {
  if (!(value > 0) || !std::isfinite(value)) {
    return make_error(field, ": must be a positive number, got ", value);
  }
  return Status::Ok();
}

Status require_positive(std::int64_t value, const std::string& field) {
  if (value <= 0) return make_error(field, ": must be a positive integer, got ", value);
  return Status::Ok();
}

}  // namespace herd
