# Helpers of the example checks (cmake -P scripts).

# Runs a command; fails the test with its output unless it exits 0. The output is left in
# ${out_var}.
function(run_checked out_var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REPLACE ";" " " shown "${ARGN}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${shown}\n--- stdout\n${out}\n--- stderr\n${err}")
  endif()
  message(STATUS "ok: ${shown}")
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# Configures and builds the CMake project SOURCE in WORK against the dsrt installed in
# PREFIX, with this build's generator and compilers; checks that find_package found that
# installation and not another one.
function(build_against_prefix)
  file(REMOVE_RECURSE ${WORK})
  run_checked(out ${CMAKE_COMMAND} -G ${GENERATOR} -S ${SOURCE} -B ${WORK}
              -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}
              -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
              "-DCMAKE_C_FLAGS=${FLAGS}" "-DCMAKE_CXX_FLAGS=${FLAGS}"
              "-DCMAKE_EXE_LINKER_FLAGS=${FLAGS}"
              -DCMAKE_PREFIX_PATH=${PREFIX})
  file(STRINGS ${WORK}/CMakeCache.txt found REGEX "^dsrt_DIR:")
  if(NOT found STREQUAL "dsrt_DIR:PATH=${PREFIX}/${LIBDIR}/cmake/dsrt")
    message(FATAL_ERROR "find_package(dsrt) found '${found}', not ${PREFIX}/${LIBDIR}/cmake/dsrt")
  endif()
  run_checked(out ${CMAKE_COMMAND} --build ${WORK})
endfunction()

# Runs a command that must fail with exit status `rc` and print a line matching `regex` on
# stderr.
function(run_expect_failure expected_rc regex)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REPLACE ";" " " shown "${ARGN}")
  if(NOT rc EQUAL expected_rc OR NOT err MATCHES "${regex}")
    message(FATAL_ERROR "expected exit ${expected_rc} and '${regex}' on stderr from: ${shown}\n"
                        "got ${rc}\n--- stdout\n${out}\n--- stderr\n${err}")
  endif()
  string(STRIP "${err}" err)
  message(STATUS "fails as expected: ${shown}\n   ${err}")
endfunction()
