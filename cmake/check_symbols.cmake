# Run by cpack after it installs and before it packages (CPACK_PRE_BUILD_SCRIPTS): the package
# build fails when libdepot.so's exported symbols differ from packaging/debian/libdepot0.symbols,
# and libdepot0 gets the symbols control file dpkg-gensymbols writes from it.
file(GLOB_RECURSE library "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/libdepot.so.*.*.*")
if(NOT library)
  return()  # a package set without the library
endif()
execute_process(COMMAND ${CPACK_DEPOT_SOURCE_DIR}/packaging/check-symbols ${library}
                        ${CPACK_PACKAGE_VERSION} --write ${CPACK_DEPOT_SYMBOLS_CONTROL}
                RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "libdepot0's ABI changed: see above")
endif()
