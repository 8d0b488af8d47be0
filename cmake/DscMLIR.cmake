# MLIR and LLVM, linked statically into our tools.
#
# Debian's MLIR CMake package exports static component libraries whose link interface
# names the `LLVM` target, i.e. the 150 MB libLLVM.so. A dsc linked that way cannot run on
# the GPU machine (no LLVM there, and the working tree that travels is capped at 64 MiB).
# We therefore flatten the link interface of the MLIR components we use into a list of
# archives, substitute LLVM's own static Support/Demangle archives for `LLVM`, and link that
# list as one group. The result depends only on libc/libstdc++ (and libz/libzstd when the
# code that needs them is pulled in). libMLIR.so is never linked.

find_package(MLIR REQUIRED CONFIG HINTS /usr/lib/llvm-22/lib/cmake/mlir)
message(STATUS "Using MLIRConfig.cmake in: ${MLIR_DIR}")
message(STATUS "Using LLVMConfig.cmake in: ${LLVM_DIR}")

list(APPEND CMAKE_MODULE_PATH "${MLIR_CMAKE_DIR}" "${LLVM_CMAKE_DIR}")
include(TableGen)
include(AddLLVM)
include(AddMLIR)

# Debian's package points LLVM_EXTERNAL_LIT at a missing llvm-lit.
if(NOT LLVM_EXTERNAL_LIT OR NOT EXISTS "${LLVM_EXTERNAL_LIT}")
  find_program(LLVM_EXTERNAL_LIT NAMES lit llvm-lit
               HINTS "${LLVM_TOOLS_BINARY_DIR}" /usr/lib/llvm-22/bin REQUIRED)
endif()

function(_dsc_imported_archive target out_var)
  foreach(prop IMPORTED_LOCATION_RELWITHDEBINFO IMPORTED_LOCATION_RELEASE IMPORTED_LOCATION)
    get_target_property(loc ${target} ${prop})
    if(loc)
      set(${out_var} "${loc}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "no archive found for imported target ${target}")
endfunction()

# dsc_mlir_static_library(<name> <MLIR components...>): an INTERFACE target that links the
# components and everything they need as static archives in one --start-group.
function(dsc_mlir_static_library name)
  set(pending ${ARGN})
  set(seen)
  set(archives)
  while(pending)
    list(POP_FRONT pending lib)
    if(lib IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${lib})
    if(lib STREQUAL "LLVM")
      # libLLVM.so in Debian's export. MLIR's IR, passes and mlir-opt's driver need only
      # these components of it (remarks for --remarks-*); their own deps follow.
      list(APPEND pending LLVMSupport LLVMDemangle LLVMRemarks LLVMBitstreamReader)
      continue()
    endif()
    if(NOT TARGET ${lib})
      continue()   # system libraries (rt, dl, m, libz3.so, ...) are added below
    endif()
    get_target_property(type ${lib} TYPE)
    if(type STREQUAL "STATIC_LIBRARY")
      _dsc_imported_archive(${lib} archive)
      list(APPEND archives "${archive}")
    endif()
    get_target_property(deps ${lib} INTERFACE_LINK_LIBRARIES)
    if(deps)
      list(APPEND pending ${deps})
    endif()
  endwhile()
  add_library(${name} INTERFACE)
  target_include_directories(${name} SYSTEM INTERFACE ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
  separate_arguments(llvm_defs UNIX_COMMAND "${LLVM_DEFINITIONS}")
  target_compile_options(${name} INTERFACE ${llvm_defs})
  # Z3 is only referenced by LLVM's SMT solver glue, which MLIR does not pull in.
  target_link_libraries(${name} INTERFACE
    -Wl,--start-group ${archives} -Wl,--end-group
    -Wl,--push-state,--as-needed z zstd tinfo -Wl,--pop-state
    Threads::Threads dl rt m)
endfunction()

find_package(Threads REQUIRED)
