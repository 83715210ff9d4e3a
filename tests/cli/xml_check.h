// A small XML well-formedness check for the SVG the commands write, written apart from herd's own
// escaping (core/xml.h) so that it can catch it: one root element, every start tag closed in order,
// attribute values quoted, '&' only as a known entity or a character reference, no '<' in text or
// attribute values, no control character XML 1.0 forbids. Returns "" when well formed, else the reason
// and the byte offset.
#pragma once

#include <cctype>
#include <string>
#include <vector>

namespace herd::testing {

inline std::string xml_wellformed_error(const std::string& s) {
  std::vector<std::string> open;
  int roots = 0;
  std::size_t i = 0;
  const auto at = [&](const std::string& why) { return why + " at byte " + std::to_string(i); };
  const auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == ':' || c == '.';
  };
  // '&' at s[i]: a known entity or a character reference; advances past it.
  const auto entity = [&]() -> bool {
    const std::size_t semi = s.find(';', i);
    if (semi == std::string::npos || semi - i > 10) return false;
    const std::string e = s.substr(i + 1, semi - i - 1);
    bool ok = e == "amp" || e == "lt" || e == "gt" || e == "quot" || e == "apos";
    if (!ok && e.size() >= 2 && e[0] == '#') {
      const bool hex = e[1] == 'x';
      ok = e.size() > (hex ? 2u : 1u);
      for (std::size_t k = hex ? 2 : 1; k < e.size(); ++k) {
        ok = ok &&
             (hex ? std::isxdigit(static_cast<unsigned char>(e[k])) : std::isdigit(static_cast<unsigned char>(e[k])));
      }
    }
    i = semi + 1;
    return ok;
  };
  const auto bad_control = [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 && c != '\t' && c != '\n' && c != '\r';
  };
  while (i < s.size()) {
    if (s[i] == '<') {
      if (s.compare(i, 4, "<!--") == 0) {
        const std::size_t e = s.find("-->", i);
        if (e == std::string::npos) return at("unterminated comment");
        i = e + 3;
      } else if (s.compare(i, 2, "<?") == 0 || s.compare(i, 2, "<!") == 0) {
        const std::size_t e = s.find('>', i);
        if (e == std::string::npos) return at("unterminated declaration");
        i = e + 1;
      } else if (s.compare(i, 2, "</") == 0) {
        std::size_t k = i + 2;
        while (k < s.size() && name_char(s[k])) ++k;
        const std::string name = s.substr(i + 2, k - i - 2);
        if (open.empty() || open.back() != name) return at("end tag </" + name + "> does not close the open element");
        open.pop_back();
        while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
        if (k >= s.size() || s[k] != '>') return at("malformed end tag");
        i = k + 1;
      } else {
        std::size_t k = i + 1;
        while (k < s.size() && name_char(s[k])) ++k;
        const std::string name = s.substr(i + 1, k - i - 1);
        if (name.empty()) return at("'<' that starts no tag");
        if (open.empty() && ++roots > 1) return at("a second root element");
        i = k;
        while (true) {
          while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
          if (i >= s.size()) return at("unterminated start tag");
          if (s.compare(i, 2, "/>") == 0) {
            i += 2;
            break;
          }
          if (s[i] == '>') {
            open.push_back(name);
            ++i;
            break;
          }
          std::size_t a = i;
          while (a < s.size() && name_char(s[a])) ++a;
          if (a == i || a + 1 >= s.size() || s[a] != '=' || (s[a + 1] != '"' && s[a + 1] != '\'')) {
            return at("malformed attribute in <" + name + ">");
          }
          const char q = s[a + 1];
          i = a + 2;
          while (i < s.size() && s[i] != q) {
            if (s[i] == '<' || bad_control(s[i])) return at("'<' or a control character in an attribute value");
            if (s[i] == '&') {
              if (!entity()) return at("'&' that is not an entity in an attribute value");
            } else {
              ++i;
            }
          }
          if (i >= s.size()) return at("unterminated attribute value");
          ++i;
        }
      }
    } else if (s[i] == '&') {
      if (!entity()) return at("'&' that is not an entity");
    } else {
      if (bad_control(s[i])) return at("a control character");
      if (open.empty() && !std::isspace(static_cast<unsigned char>(s[i]))) return at("text outside the root element");
      ++i;
    }
  }
  if (!open.empty()) return "element <" + open.back() + "> is never closed";
  if (roots != 1) return "no root element";
  return "";
}

}  // namespace herd::testing
