# The Debian packages: `cpack -G DEB` in the build directory writes one package per component,
# the split Debian uses for a daemon with a library:
#
#   depot          depotd, depotctl, the systemd units and snippets, /etc/depot/depotd.conf,
#                  the manual pages and bash completion; the maintainer scripts (packaging/debian/)
#   libdepot0      libdepot.so.0 (named after its soname), with an ldconfig trigger and a shlibs file
#   libdepot-dev   the headers, libdepot.so, libdepot.a, the CMake package and depot.pc
#   python3-depot  the Python module depot (when the binding is built)
#
# Each has /usr/share/doc/PACKAGE/copyright and changelog.gz. The maintainer scripts create the
# system user and group depot and tell a running systemd about the units; they neither enable nor
# start depotd, which Debian leaves to the operator. Depends comes from dpkg-shlibdeps (dpkg-dev,
# with `file`; scripts/deps installs both) plus what the scripts run. `lintian` passes on all four
# with no error; docs/deployment.md explains each warning left.
set(DEPOT_PACKAGE_MAINTAINER "depot maintainers <depot@example.org>" CACHE STRING
    "Maintainer field of the Debian packages: NAME <ADDRESS> (the default's domain is reserved for examples: set yours)")
# Build trees configured before kept the old default, on localhost, which lintian refuses.
if(DEPOT_PACKAGE_MAINTAINER STREQUAL "depot maintainers <depot@localhost>")
  set(DEPOT_PACKAGE_MAINTAINER "depot maintainers <depot@example.org>" CACHE STRING "" FORCE)
endif()

# --- what every package carries: manual pages, bash completion, copyright and changelog --------
set(depot_doc_build ${PROJECT_BINARY_DIR}/packaging)
# Debian compresses manual pages and changelogs with gzip -9n (no name or time stamp inside, so
# that a rebuild is byte for byte the same).
function(depot_gzip source output)
  add_custom_command(OUTPUT ${output}
                     COMMAND gzip -9nc ${source} > ${output}
                     DEPENDS ${source} VERBATIM)
endfunction()
set(depot_compressed)
foreach(page depotd.8 depotctl.1 depotd.conf.5)
  depot_gzip(${PROJECT_SOURCE_DIR}/packaging/man/${page} ${depot_doc_build}/${page}.gz)
  list(APPEND depot_compressed ${depot_doc_build}/${page}.gz)
  string(REGEX MATCH "[0-9]$" section ${page})
  install(FILES ${depot_doc_build}/${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section}
          COMPONENT depot)
endforeach()
depot_gzip(${PROJECT_SOURCE_DIR}/packaging/debian/changelog ${depot_doc_build}/changelog.gz)
list(APPEND depot_compressed ${depot_doc_build}/changelog.gz)
add_custom_target(depot_package_docs ALL DEPENDS ${depot_compressed})
install(FILES ${PROJECT_SOURCE_DIR}/packaging/bash-completion/depotctl
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/bash-completion/completions COMPONENT depot)

set(depot_components depot lib dev)
if(TARGET depot_python)
  list(APPEND depot_components python)
endif()
set(depot_package_depot depot)
set(depot_package_lib libdepot0)
set(depot_package_dev libdepot-dev)
set(depot_package_python python3-depot)
foreach(component IN LISTS depot_components)
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/debian/copyright ${depot_doc_build}/changelog.gz
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${depot_package_${component}}
          COMPONENT ${component})
endforeach()

# --- the packages ---------------------------------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ${depot_components})
set(CPACK_PACKAGE_NAME depot)
set(CPACK_PACKAGE_VENDOR depot)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT ${DEPOT_PACKAGE_MAINTAINER})
set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${DEPOT_PACKAGE_MAINTAINER})

# Install with DESTDIR and the prefix /usr, so that what depends on the prefix (depot.pc,
# /etc/depot, the Python site directory) is written for /usr rather than for the staging directory.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Strips depotd, depotctl and libdepot.so (python/ strips its extension); CMake never strips an
# archive.
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# depotctl links libdepot.so.0 from the libdepot0 package built in the same run.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR}/client)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")

set(depot_about [[
depot lets the processes of one machine hand each other large buffers without
copying them. One process puts an object and gets a GUID; any other process
gets that GUID and receives a read-only mapping of the very same pages.]])

# depot: the daemon and the tool.
set(CPACK_DEBIAN_DEPOT_PACKAGE_NAME depot)
set(CPACK_DEBIAN_DEPOT_PACKAGE_SECTION misc)
set(CPACK_COMPONENT_DEPOT_DEPENDS lib)
# postinst creates the user with systemd-sysusers when systemd is there, with adduser otherwise:
# both may run, so adduser is a dependency. procps: /bin/kill, which the unit's ExecReload= runs
# (a minimal system lacks it, and `systemctl reload depotd` then fails with 203/EXEC).
set(CPACK_DEBIAN_DEPOT_PACKAGE_DEPENDS "adduser, procps")
set(CPACK_COMPONENT_DEPOT_DESCRIPTION "${PROJECT_DESCRIPTION}: daemon and tools
${depot_about}

This package holds the daemon depotd with its systemd units and the
command-line tool depotctl. The service is installed neither enabled nor
started; systemctl enable --now depotd.socket does that.")
# Files under /etc are conffiles: an upgrade keeps the operator's edits, a purge removes them.
set(depot_conffiles "")
foreach(file IN LISTS DEPOT_CONFIG_FILES)
  cmake_path(GET file FILENAME name)
  string(APPEND depot_conffiles "/etc/depot/${name}\n")
endforeach()
set(depot_control_extra ${PROJECT_SOURCE_DIR}/packaging/debian/postinst
                        ${PROJECT_SOURCE_DIR}/packaging/debian/prerm
                        ${PROJECT_SOURCE_DIR}/packaging/debian/postrm)
if(depot_conffiles)
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/packaging/conffiles CONTENT "${depot_conffiles}")
  list(APPEND depot_control_extra ${PROJECT_BINARY_DIR}/packaging/conffiles)
endif()
set(CPACK_DEBIAN_DEPOT_PACKAGE_CONTROL_EXTRA ${depot_control_extra})

# libdepot0: the shared library, named after its soname.
set(CPACK_DEBIAN_LIB_PACKAGE_NAME libdepot0)
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# A shlibs file, so that packages built against libdepot.so.0 depend on this package; the
# trigger runs ldconfig once after dpkg installs or removes it.
# (CPack 3.25 also writes a postinst and postrm that call ldconfig: see docs/deployment.md.)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# And a symbols file (packaging/debian/libdepot0.symbols, checked against the library being
# packaged: a changed ABI fails the package build; docs/cpp-api.md, "ABI").
set(CPACK_DEPOT_SOURCE_DIR ${PROJECT_SOURCE_DIR})
set(CPACK_DEPOT_SYMBOLS_CONTROL ${PROJECT_BINARY_DIR}/packaging/symbols)
set(CPACK_PRE_BUILD_SCRIPTS ${PROJECT_SOURCE_DIR}/cmake/check_symbols.cmake)
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/debian/triggers
                                           ${CPACK_DEPOT_SYMBOLS_CONTROL})
set(CPACK_COMPONENT_LIB_DESCRIPTION "${PROJECT_DESCRIPTION}: client library
${depot_about}

This package holds libdepot, the C++ client library, as a shared library.")

# libdepot-dev: what a program needs to build against libdepot.
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libdepot-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DEPENDS lib)
set(CPACK_COMPONENT_DEV_DESCRIPTION "${PROJECT_DESCRIPTION}: development files
${depot_about}

This package holds the headers of libdepot, the C++ client library, its
static archive, its CMake package (find_package(depot)) and depot.pc.")

# python3-depot: the Python module (its extension links the static client library).
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-depot)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
if(TARGET depot_python)
  # The interpreter python/ built the extension for (found there; its result is cached).
  find_package(Python3 COMPONENTS Interpreter)
  math(EXPR depot_python_next "${Python3_VERSION_MINOR} + 1")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
      "python3 (>= ${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}), python3 (<< ${Python3_VERSION_MAJOR}.${depot_python_next}), python3-numpy")
  # depot.dask: the Dask releases it is tested with (docs/python-and-dask.md, "Dask releases"),
  # as pyproject.toml's optional dependencies declare them.
  set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS
      "python3-dask (>= 2022.12.1), python3-distributed (>= 2022.12.1)")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_BREAKS
      "python3-dask (<< 2022.12.1), python3-dask (>= 2026.8~), python3-distributed (<< 2022.12.1), python3-distributed (>= 2026.8~)")
endif()
# Its prerm removes the __pycache__ the interpreter wrote, which dpkg knows nothing of.
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/debian/python3-depot/prerm)
set(CPACK_COMPONENT_PYTHON_DESCRIPTION "${PROJECT_DESCRIPTION}: Python module
${depot_about}

This package holds the Python module depot and its Dask integration,
depot.dask.")

# Scripts 0755, conffiles 0644, whatever the modes in the source tree.
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "/build[^/]*/" "/out/" "/cmake-build-[^/]*/")

include(CPack)
