# find_package(dsrt) + dsrt::dsrt from a separate project (test/examples/version), in C and
# C++, and running what it built.
include(${CMAKE_CURRENT_LIST_DIR}/Common.cmake)

build_against_prefix()
run_checked(out ${WORK}/dsrt_version)
if(NOT out MATCHES "^dsrt [0-9]+\\.[0-9]+\\.[0-9]+ plan format [0-9]+")
  message(FATAL_ERROR "dsrt_version printed '${out}'")
endif()
run_checked(out ${WORK}/dsrt_version_cpp ${WORK}/no-such-plan.dsp)
if(NOT out MATCHES "dsrt::Error DSRT_[A-Z_]+: .+")
  message(FATAL_ERROR "dsrt_version_cpp printed '${out}'")
endif()
message(STATUS "${out}")
