# DSC_RUNTIME_ONLY=ON: libdsrt and the tools that need only it (dsrun, dsbench, dsp-dump,
# dsp-roofline),
# without LLVM, MLIR, ONNX, protobuf, flatc or GoogleTest: the build bench/gpu/run.sh makes
# on the GPU machine from the working tree and scripts/gpu-bundle.sh's folder.
#
#   DSC_PLAN_GENERATED_DIR   a folder with flatc's plan_generated.h (no flatc needed)
#   DSC_BUNDLED_INCLUDE_DIR  header-only dependencies (flatbuffers/, nlohmann/, xxhash.h,
#                            CLI/, fmt/) searched after the system's
#   LLVM_EXTERNAL_LIT        lit: the GPU suite (test/gpu) becomes ctest's `lit-gpu` entry
#   DSC_EXTRA_TOOLS_DIR      where its tests find dsc (the bundle's bin/)
#
# The runtime's own tests need GoogleTest and protobuf; stand-in targets let CMake configure
# them, and only the named targets (ninja dsrt dsrun dsbench dsp-dump) are built.
if(DSC_BUNDLED_INCLUDE_DIR)
  list(APPEND CMAKE_INCLUDE_PATH ${DSC_BUNDLED_INCLUDE_DIR})
  include_directories(AFTER SYSTEM ${DSC_BUNDLED_INCLUDE_DIR})
  # The bundled nlohmann-json always (the same header as the bundle's build machine); the
  # runtime's find_package(nlohmann_json 3 REQUIRED) finds this stand-in config.
  if(EXISTS ${DSC_BUNDLED_INCLUDE_DIR}/nlohmann/json.hpp)
    add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED GLOBAL)
    set_target_properties(nlohmann_json::nlohmann_json PROPERTIES
                          INTERFACE_INCLUDE_DIRECTORIES ${DSC_BUNDLED_INCLUDE_DIR})
    file(WRITE ${PROJECT_BINARY_DIR}/bundled-cmake/nlohmann_jsonConfig.cmake
         "# Written by cmake/DscRuntimeOnly.cmake: the bundled header-only nlohmann-json.\n")
    file(WRITE ${PROJECT_BINARY_DIR}/bundled-cmake/nlohmann_jsonConfigVersion.cmake
         "set(PACKAGE_VERSION 3.11.2)\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n")
    set(nlohmann_json_DIR ${PROJECT_BINARY_DIR}/bundled-cmake CACHE PATH "" FORCE)
  endif()
endif()

find_package(GTest QUIET)
if(NOT GTest_FOUND)
  foreach(stand_in GTest::gtest GTest::gtest_main GTest::gmock GTest::gmock_main)
    add_library(${stand_in} INTERFACE IMPORTED GLOBAL)
  endforeach()
endif()
include(GoogleTest)
# The TensorProto reader's tests compare with protobuf's own; never built here.
add_library(protobuf::libprotobuf INTERFACE IMPORTED GLOBAL)

if(DSC_PLAN_GENERATED_DIR)
  if(NOT EXISTS ${DSC_PLAN_GENERATED_DIR}/plan_generated.h)
    message(FATAL_ERROR "DSC_PLAN_GENERATED_DIR has no plan_generated.h: ${DSC_PLAN_GENERATED_DIR}")
  endif()
  add_library(dsp_schema INTERFACE)
  target_include_directories(dsp_schema INTERFACE ${DSC_PLAN_GENERATED_DIR}
                                                  ${PROJECT_SOURCE_DIR}/schemas)
else()
  add_subdirectory(schemas)
endif()
add_subdirectory(runtime)
add_subdirectory(tools/common)
add_subdirectory(tools/dsrun)
add_subdirectory(tools/dsbench)
add_subdirectory(tools/dsp-dump)
add_subdirectory(tools/dsp-roofline)
add_subdirectory(tools/dseval)

# The GPU suite, with dsc from DSC_EXTRA_TOOLS_DIR (put on the tests' PATH where lit puts
# LLVM's tools) and everything else from this build.
if(LLVM_EXTERNAL_LIT)
  set(DSC_TOOLS_DIR ${PROJECT_BINARY_DIR}/bin)
  set(LLVM_TOOLS_BINARY_DIR ${DSC_EXTRA_TOOLS_DIR})
  configure_file(test/lit.site.cfg.py.in ${PROJECT_BINARY_DIR}/test/lit.site.cfg.py @ONLY)
  add_test(NAME lit-gpu
           COMMAND ${PROJECT_SOURCE_DIR}/test/gpu/run_gpu_suite.sh $<TARGET_FILE:dsrun>
                   ${LLVM_EXTERNAL_LIT} ${PROJECT_BINARY_DIR}/test)
  set_tests_properties(lit-gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
endif()
