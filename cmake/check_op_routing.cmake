# Fails when the step's code calls a kernel around its op interface (kernels/ops.h).
#
#   cmake -DHERD_ROOT=<repo root> -P cmake/check_op_routing.cmake
#
# nn/ and parallel/ run every kernel, copy, fill and sum through the kernels::Ops they are given at
# construction, so that one step's code runs on the device of the run (train.device). In
# src/herd/nn/** and src/herd/parallel/**, a call of a kernels/*.h function (`kernels::gemm(`,
# `kernels::copy_buffer(`, ...) other than the host-side helpers below, or a memcpy / memset, is
# printed as file: line and fails the check. A copy between two host buffers (checkpoint assembly)
# says so with `// host` on its line.
if(NOT HERD_ROOT)
  message(FATAL_ERROR "check_op_routing: pass -DHERD_ROOT=<repository root>")
endif()

# kernels:: functions that are not ops: the interface itself, its buffers, and host arithmetic.
set(allowed_calls cpu_ops ops_for has_ops zeroed_array array_of clip_coefficient rope_inv_freq device_name
                  parse_device)

set(violations 0)
foreach(folder nn parallel)
  file(GLOB_RECURSE files ${HERD_ROOT}/src/herd/${folder}/*.h ${HERD_ROOT}/src/herd/${folder}/*.cpp)
  foreach(f ${files})
    file(RELATIVE_PATH rel ${HERD_ROOT} ${f})
    file(STRINGS ${f} lines)
    foreach(line ${lines})
      if(line MATCHES "//[ \t]*host([ \t]|$)")
        continue()
      endif()
      string(REGEX REPLACE "//.*$" "" code "${line}")  # comments may name the functions
      string(REGEX MATCHALL "kernels::[a-z_][a-z_0-9]*[ \t]*(<[^>()]*>)?[ \t]*\\(" calls "${code}")
      foreach(call ${calls})
        string(REGEX REPLACE "^kernels::([a-z_0-9]+).*$" "\\1" name "${call}")
        list(FIND allowed_calls ${name} found)
        if(found EQUAL -1)
          string(STRIP "${line}" shown)
          message("${rel}: calls kernels::${name} around the op interface (kernels/ops.h): ${shown}")
          math(EXPR violations "${violations} + 1")
        endif()
      endforeach()
      if(code MATCHES "(^|[^a-z_])mem(cpy|set|move)[ \t]*\\(")
        string(STRIP "${line}" shown)
        message("${rel}: copies or fills memory around the op interface (kernels/ops.h): ${shown}")
        math(EXPR violations "${violations} + 1")
      endif()
    endforeach()
  endforeach()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "check_op_routing: ${violations} call(s) around the op interface in nn/ or parallel/")
endif()
message(STATUS "check_op_routing: nn/ and parallel/ call their kernels through the op interface")
