# The layers of docs/design.md, enforced by the include path: each target sees, as "DIR/x.h",
# only the directories of its own layer, and those of the layers below it through what it links.
#
#   include/depot  the public API (every target; the only thing a consumer or the Python binding sees)
#   common/        POSIX and CUDA helpers             (depot_common)
#   proto/         the protocol and shared layouts    (depot_proto: + common)
#   daemon/        depotd                             (depot_daemon: + proto, common)
#   client/src/    libdepot                           (depot_client_objects: + proto, common)
#   client/cli/    depotctl                           (the public API only)
#   python/src/    the Python binding                 (the public API only)
#
# There is no include path at the root of the source tree: a product file that includes a header
# of a layer it may not use fails to compile (tests/layers/ proves it in every test run). Tests,
# benchmarks and fuzz targets see every layer (include_directories in their directories).

# depot_layer(TARGET VISIBILITY DIR...): lets TARGET (and what links it, for PUBLIC) include the
# headers of the source directories DIR... as "DIR/header.h", through a directory of symbolic
# links of its own in the build tree.
function(depot_layer target visibility)
  set(root ${PROJECT_BINARY_DIR}/layers/${target})
  foreach(dir IN LISTS ARGN)
    cmake_path(GET dir PARENT_PATH parent)
    file(MAKE_DIRECTORY ${root}/${parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${dir} ${root}/${dir} SYMBOLIC)
  endforeach()
  target_include_directories(${target} ${visibility} $<BUILD_INTERFACE:${root}>)
endfunction()
