// Escaping text for SVG (XML) documents.
//
// Every SVG herd writes (loss plots, schedule figures, planner reports) passes user-supplied text
// (titles, labels, file names) through xml_text, so a title such as `R&D <v2>` or a label holding a
// stray byte still yields a well-formed document.
#pragma once

#include <string>
#include <string_view>

namespace herd {

// Text safe inside an XML element or a quoted attribute: & < > " ' become entities; control characters
// XML 1.0 forbids (all below 0x20 but tab, newline and carriage return) are dropped; bytes that are not
// valid UTF-8 become U+FFFD (the replacement character).
std::string xml_text(std::string_view s);

}  // namespace herd
