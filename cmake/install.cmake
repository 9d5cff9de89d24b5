# What `cmake --install` puts under the prefix, in the GNU layout (GNUInstallDirs):
#
#   bin/depotd, bin/depotctl                       (rules in daemon/ and client/)
#   lib/libdepot.so.X.Y.Z, .so.0, .so, libdepot.a  (rules in client/)
#   include/depot/*.h                              (rule in client/)
#   lib/cmake/depot/                               find_package(depot): depot::depot, depot::depot_static
#   lib/pkgconfig/depot.pc                         pkg-config depot
#   lib/systemd/system/*.service, *.socket         from systemd/, when there
#   lib/sysusers.d/depot.conf, lib/tmpfiles.d/depot.conf   from systemd/, when there
#   share/depot/depotd.service.d/*.conf            optional drop-ins, from systemd/drop-ins/
#   etc/depot/*.conf                               from config/, when there; /etc/depot for the prefix /usr
#
# Two paths depend on the prefix itself, which is known only when installing (`cmake --install
# --prefix`, or cpack, which installs with the prefix /usr): depot.pc, which names it, and the
# configuration directory. Both are therefore written by install(CODE) rather than install(FILES).
include(CMakePackageConfigHelpers)

# --- CMake package ------------------------------------------------------------------------------
set(DEPOT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/depot)
install(EXPORT depotTargets NAMESPACE depot:: DESTINATION ${DEPOT_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/depotConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/depotConfig.cmake
                              INSTALL_DESTINATION ${DEPOT_CMAKE_DIR})
# The major version is the shared library's SOVERSION: one major, one ABI.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/depotConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/depotConfig.cmake ${PROJECT_BINARY_DIR}/depotConfigVersion.cmake
        DESTINATION ${DEPOT_CMAKE_DIR} COMPONENT dev)

# --- pkg-config -----------------------------------------------------------------------------------
# Written when installing, with the prefix then in force, so that `pkg-config depot` names the
# directories the files are in (and pkg-config can drop /usr/include and /usr/lib as system paths).
string(CONFIGURE [[
  set(DEPOT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(DEPOT_PC_LIBDIR "@CMAKE_INSTALL_LIBDIR@")
  set(DEPOT_PC_INCLUDEDIR "@CMAKE_INSTALL_INCLUDEDIR@")
  set(pkgconfig_dir "${CMAKE_INSTALL_PREFIX}/${DEPOT_PC_LIBDIR}/pkgconfig")
  if(IS_ABSOLUTE "${DEPOT_PC_LIBDIR}")
    set(pkgconfig_dir "${DEPOT_PC_LIBDIR}/pkgconfig")
  else()
    set(DEPOT_PC_LIBDIR "\${prefix}/${DEPOT_PC_LIBDIR}")
  endif()
  if(NOT IS_ABSOLUTE "${DEPOT_PC_INCLUDEDIR}")
    set(DEPOT_PC_INCLUDEDIR "\${prefix}/${DEPOT_PC_INCLUDEDIR}")
  endif()
  set(PROJECT_VERSION "@PROJECT_VERSION@")
  set(PROJECT_DESCRIPTION "@PROJECT_DESCRIPTION@")
  configure_file("@CMAKE_CURRENT_LIST_DIR@/depot.pc.in" "@PROJECT_BINARY_DIR@/pkgconfig/depot.pc" @ONLY)
  file(INSTALL DESTINATION "${pkgconfig_dir}" TYPE FILE FILES "@PROJECT_BINARY_DIR@/pkgconfig/depot.pc")
]] depot_install_pc @ONLY)
install(CODE "${depot_install_pc}" COMPONENT dev)

# --- systemd --------------------------------------------------------------------------------------
# systemd/ holds the units (*.service, *.socket) and one sysusers.d and one tmpfiles.d snippet
# (any file whose path under systemd/ says "sysusers" or "tmpfiles"). The snippets are installed
# as depot.conf, the name the package's postinst passes to systemd-sysusers and systemd-tmpfiles.
# The directory is read when CMake configures, and again at each build (CONFIGURE_DEPENDS), so
# files added later are installed after the next build.
set(DEPOT_SYSTEMD_UNITS "")
set(DEPOT_SYSUSERS_SNIPPET "")
set(DEPOT_TMPFILES_SNIPPET "")
set(DEPOT_DROP_INS "")
file(GLOB_RECURSE depot_systemd_files CONFIGURE_DEPENDS LIST_DIRECTORIES false
     RELATIVE ${PROJECT_SOURCE_DIR}/systemd ${PROJECT_SOURCE_DIR}/systemd/*)
foreach(file IN LISTS depot_systemd_files)
  set(path ${PROJECT_SOURCE_DIR}/systemd/${file})
  if(file MATCHES "\\.(service|socket)$")
    list(APPEND DEPOT_SYSTEMD_UNITS ${path})
  elseif(file MATCHES "^drop-ins/.*\\.conf$")
    # Optional drop-ins for depotd.service, shipped for the operator to link (not applied).
    list(APPEND DEPOT_DROP_INS ${path})
  elseif(file MATCHES "sysusers|tmpfiles")
    string(TOUPPER ${CMAKE_MATCH_0} kind)
    if(DEPOT_${kind}_SNIPPET)
      message(FATAL_ERROR "systemd/: two ${CMAKE_MATCH_0} snippets (${DEPOT_${kind}_SNIPPET} and "
                          "${path}); depot installs one, as lib/${CMAKE_MATCH_0}.d/depot.conf")
    endif()
    set(DEPOT_${kind}_SNIPPET ${path})
  elseif(NOT file MATCHES "(^|/)(README|.*\\.md)$")
    message(WARNING "systemd/${file} is not installed: only *.service, *.socket and the "
                    "sysusers.d and tmpfiles.d snippets are")
  endif()
endforeach()
if(DEPOT_SYSTEMD_UNITS)
  install(FILES ${DEPOT_SYSTEMD_UNITS} DESTINATION lib/systemd/system COMPONENT depot)
endif()
if(DEPOT_DROP_INS)
  install(FILES ${DEPOT_DROP_INS} DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/depot/depotd.service.d
          COMPONENT depot)
endif()
if(DEPOT_SYSUSERS_SNIPPET)
  install(FILES ${DEPOT_SYSUSERS_SNIPPET} DESTINATION lib/sysusers.d RENAME depot.conf
          COMPONENT depot)
endif()
if(DEPOT_TMPFILES_SNIPPET)
  install(FILES ${DEPOT_TMPFILES_SNIPPET} DESTINATION lib/tmpfiles.d RENAME depot.conf
          COMPONENT depot)
endif()

# --- configuration --------------------------------------------------------------------------------
# config/*.conf go to etc/depot under the prefix, except that the prefix /usr (a package) puts
# them in /etc/depot, and /opt/NAME in /etc/opt/NAME/depot: GNUInstallDirs' rule for
# CMAKE_INSTALL_FULL_SYSCONFDIR, applied to the prefix in force when installing.
file(GLOB DEPOT_CONFIG_FILES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/config/*.conf)
if(DEPOT_CONFIG_FILES)
  list(JOIN DEPOT_CONFIG_FILES "\" \"" depot_config_files_quoted)
  string(CONFIGURE [[
    set(sysconfdir "@CMAKE_INSTALL_SYSCONFDIR@")
    if(IS_ABSOLUTE "${sysconfdir}")
      # as given: -DCMAKE_INSTALL_SYSCONFDIR=/etc
    elseif(sysconfdir STREQUAL "etc" AND CMAKE_INSTALL_PREFIX MATCHES "^/(usr/?)?$")
      set(sysconfdir "/etc")
    elseif(sysconfdir STREQUAL "etc" AND CMAKE_INSTALL_PREFIX MATCHES "^/opt/(.+)$")
      set(sysconfdir "/etc/opt/${CMAKE_MATCH_1}")
    else()
      set(sysconfdir "${CMAKE_INSTALL_PREFIX}/${sysconfdir}")
    endif()
    file(INSTALL DESTINATION "${sysconfdir}/depot" TYPE FILE FILES "@depot_config_files_quoted@")
  ]] depot_install_config @ONLY)
  install(CODE "${depot_install_config}" COMPONENT depot)
endif()
