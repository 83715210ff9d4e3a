// herd reports failures as values (core/error.h) and bugs through HERD_CHECK; an exception that still
// reaches one of its boundaries (a command, a rank's thread, the checkpoint writer's thread) is a defect
// of herd or of a library under it (oneDNN throws dnnl::error, the standard library std::system_error).
// Each boundary catches everything and turns it into one error line, never std::terminate's abort.
#pragma once

#include <string>

namespace herd {

// Called inside a catch block: the exception being handled as one line, "uncaught <type>: <what>; this
// is a defect in herd, please report it" (<type> demangled; "of unknown type" for what is not a
// std::exception).
std::string current_exception_message();

}  // namespace herd
