# Fails when an #include breaks the dependency table of cmake/HerdDeps.cmake.
#
#   cmake -DHERD_ROOT=<repo root> -P cmake/check_includes.cmake
#
# Checks src/herd/<folder>/** and tests/<folder>/**: a file may include "herd/<other>/..." only when
# <other> is its own folder or listed for it. The pure (planner-side) folders may not include BLAS,
# MPI or CUDA headers. Every violation is printed as file:line: message; the exit status is non-zero
# when there is one.
if(NOT HERD_ROOT)
  message(FATAL_ERROR "check_includes: pass -DHERD_ROOT=<repository root>")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/HerdDeps.cmake)

set(violations 0)
foreach(area src/herd tests)
  foreach(folder ${HERD_FOLDERS})
    set(dir ${HERD_ROOT}/${area}/${folder})
    if(NOT IS_DIRECTORY ${dir})
      continue()
    endif()
    file(GLOB_RECURSE files ${dir}/*.h ${dir}/*.hpp ${dir}/*.cpp ${dir}/*.cu ${dir}/*.cuh)
    set(allowed ${folder} ${HERD_DEPS_${folder}})
    list(FIND HERD_PURE_FOLDERS ${folder} pure_index)
    foreach(f ${files})
      file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include")
      file(RELATIVE_PATH rel ${HERD_ROOT} ${f})
      foreach(line ${lines})
        if(line MATCHES "#[ \t]*include[ \t]*[\"<]herd/([a-z_]+)/")
          set(target ${CMAKE_MATCH_1})
          list(FIND allowed ${target} found)
          if(found EQUAL -1)
            message("${rel}: includes herd/${target}/, but ${folder}/ may depend only on: ${allowed}")
            math(EXPR violations "${violations} + 1")
          endif()
        endif()
        if(NOT pure_index EQUAL -1)
          foreach(bad ${HERD_FORBIDDEN_IN_PURE})
            if(line MATCHES "[\"</]${bad}[\">]")
              message("${rel}: ${folder}/ is planner-side pure computation and may not include ${bad}")
              math(EXPR violations "${violations} + 1")
            endif()
          endforeach()
        endif()
      endforeach()
    endforeach()
  endforeach()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "check_includes: ${violations} include(s) break the dependency table (cmake/HerdDeps.cmake)")
endif()
message(STATUS "check_includes: every include respects the dependency table")
