# The Debian package: `cpack -G DEB` in the build directory writes depot_VERSION_ARCH.deb, which
# holds everything cmake/install.cmake installs, under /usr (and /etc/depot).
#
# The maintainer scripts (packaging/debian/) create the system user and group depot and tell a
# running systemd about the units; they neither enable nor start depotd, which Debian leaves to the
# operator. Depends comes from dpkg-shlibdeps (dpkg-dev, with `file`; scripts/deps installs both)
# plus what the maintainer scripts run.
set(DEPOT_PACKAGE_MAINTAINER "depot maintainers <depot@localhost>" CACHE STRING
    "Maintainer field of the Debian package: NAME <ADDRESS>")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME depot)
set(CPACK_PACKAGE_VENDOR depot)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT ${DEPOT_PACKAGE_MAINTAINER})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY ${PROJECT_DESCRIPTION})
set(CPACK_PACKAGE_DESCRIPTION [[
depot lets the processes of one machine hand each other large buffers without
copying them. One process puts an object and gets a GUID; any other process
gets that GUID and receives a read-only mapping of the very same pages.

This package holds the daemon depotd with its systemd units, the command-line
tool depotctl, and the C++ client library libdepot, shared and static, with its
headers, CMake package and pkg-config file. The service is installed neither
enabled nor started; systemctl enable --now depotd.socket does that.]])

# Install with DESTDIR and the prefix /usr, so that what depends on the prefix (depot.pc, /etc/depot)
# is written for /usr rather than for cpack's staging directory.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Strips depotd, depotctl and libdepot.so; CMake never strips a static library.
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# A shlibs file, so that packages built against libdepot.so.0 depend on this package.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# postinst creates the user with systemd-sysusers when the package has a sysusers.d snippet and
# systemd is there, with adduser otherwise.
if(DEPOT_SYSUSERS_SNIPPET)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser | systemd-sysusers")
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
endif()

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
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${depot_control_extra})
# Scripts 0755, conffiles 0644, whatever the modes in the source tree.
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "/build[^/]*/" "/out/" "/cmake-build-[^/]*/")

include(CPack)
