# Builds and runs tests/consumer/main.cpp the two ways a user consumes lat (DESIGN.md, C++ API):
#   MODE=subdirectory: a parent project with add_subdirectory(<repo> lat), default options;
#   MODE=package:      `cmake --install` of the tested build tree, then find_package(lat).
# Usage: cmake -DMODE=... -DLAT_SOURCE_DIR=... -DLAT_BINARY_DIR=... -DWORK_DIR=...
#              -DCXX_COMPILER=... -DJOBS=N -P run_consumer.cmake
foreach(var MODE LAT_SOURCE_DIR LAT_BINARY_DIR WORK_DIR CXX_COMPILER JOBS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake: ${var} is not set")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer (${MODE}): ${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "consumer (${MODE}): ${what}: ok")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

set(consumer_dir ${LAT_SOURCE_DIR}/tests/consumer)
set(build_dir ${WORK_DIR}/${MODE})
file(REMOVE_RECURSE ${build_dir})

if(MODE STREQUAL "subdirectory")
  # Only lat's library and the consumer are built (the child's tests and benchmarks are off
  # because lat is not the top-level project); ccache keeps the rebuild short.
  run_step("configure" ${CMAKE_COMMAND} -S ${consumer_dir}/subdirectory -B ${build_dir}
           -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DLAT_SOURCE_DIR=${LAT_SOURCE_DIR})
elseif(MODE STREQUAL "package")
  set(prefix ${WORK_DIR}/prefix)
  file(REMOVE_RECURSE ${prefix})
  run_step("install" ${CMAKE_COMMAND} --install ${LAT_BINARY_DIR} --prefix ${prefix})
  run_step("configure" ${CMAKE_COMMAND} -S ${consumer_dir}/package -B ${build_dir}
           -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix})
else()
  message(FATAL_ERROR "run_consumer.cmake: MODE must be subdirectory or package, got '${MODE}'")
endif()

run_step("build" ${CMAKE_COMMAND} --build ${build_dir} --target consumer -j${JOBS})
run_step("run" ${build_dir}/consumer)
message(STATUS "${last_output}")
