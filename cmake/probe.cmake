# attn_probe_package(NAME OUT_VAR): OUT_VAR is TRUE when find_package(NAME CONFIG) can run
# without error, tried first in a separate CMake process (cmake/probe/). Optional peers of
# the benchmarks go through this, so that none of them can stop the configure step.
function(attn_probe_package name out_var)
  set(dir ${CMAKE_BINARY_DIR}/probe-${name})
  file(REMOVE_RECURSE ${dir})
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S ${PROJECT_SOURCE_DIR}/cmake/probe -B ${dir}
            -DATTN_PROBE_PACKAGE=${name} -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER}
            -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
    RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
  if(rc EQUAL 0)
    set(${out_var} TRUE PARENT_SCOPE)
  else()
    # The first line of CMake's complaint says what was missing.
    string(REGEX MATCH "Could NOT find [^\n]*|Could not find a package[^\n]*" why "${log}")
    if(NOT why)
      set(why "its package config failed")
    endif()
    set(${out_var} FALSE PARENT_SCOPE)
    set(${out_var}_WHY "${why}" PARENT_SCOPE)
  endif()
  file(REMOVE_RECURSE ${dir})
endfunction()
