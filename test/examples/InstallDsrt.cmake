# `cmake --install` of the build into PREFIX; checks the installed files and that the
# installed library needs no compiler library (LLVM, MLIR, ONNX, protobuf).
include(${CMAKE_CURRENT_LIST_DIR}/Common.cmake)

file(REMOVE_RECURSE ${PREFIX})
run_checked(out ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX})
foreach(file include/dsrt/dsrt.h include/dsrt/dsrt.hpp ${LIBDIR}/libdsrt.so
             ${LIBDIR}/cmake/dsrt/dsrtConfig.cmake ${LIBDIR}/cmake/dsrt/dsrtConfigVersion.cmake
             ${LIBDIR}/cmake/dsrt/dsrtTargets.cmake)
  if(NOT EXISTS ${PREFIX}/${file})
    message(FATAL_ERROR "cmake --install did not install ${file}:\n${out}")
  endif()
endforeach()
# Nothing of the build tree may leak into the package (it must work once the build is gone).
file(GLOB package_files ${PREFIX}/${LIBDIR}/cmake/dsrt/*.cmake)
foreach(file ${package_files})
  file(READ ${file} text)
  string(FIND "${text}" "${BUILD_DIR}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "${file} refers to the build directory ${BUILD_DIR}")
  endif()
endforeach()
run_checked(out ${CMAKE_COMMAND} -DLIBRARY=${PREFIX}/${LIBDIR}/libdsrt.so -P ${CHECK_DEPS})
