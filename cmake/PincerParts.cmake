# The parts of the product, lowest first, each using only the parts before
# it (docs/architecture.md, "The allowed graph"; scripts/check-layers
# names the same parts by the same folders).
set(PINCER_PARTS mailbox runtime actors io store obs config providers tools hooks loop mock gateway cli)

# The headers of `part`, as paths relative to the project root.
function(pincer_part_headers part out)
  set(globs)
  if(part STREQUAL "store")
    set(globs io/store/*.h io/lock/*.h)
  elseif(part STREQUAL "loop")
    set(globs agents/agent*.h agents/slab.h agents/session/*.h agents/run/*.h agents/attempt/*.h
      agents/compaction/*.h agents/events/*.h)
  elseif(part MATCHES "^(mailbox|runtime|actors|io)$")
    set(globs ${part}/*.h)
  else()
    set(globs agents/${part}/*.h)
  endif()
  set(abs)
  foreach(g IN LISTS globs)
    list(APPEND abs ${PROJECT_SOURCE_DIR}/${g})
  endforeach()
  file(GLOB headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR} ${abs})
  list(SORT headers)
  set(${out} ${headers} PARENT_SCOPE)
endfunction()

# The public headers of `part`: all but the private ones (*_internal.h).
function(pincer_part_public_headers part out)
  pincer_part_headers(${part} headers)
  list(FILTER headers EXCLUDE REGEX "_internal\\.h$")
  set(${out} ${headers} PARENT_SCOPE)
endfunction()

# pincer_include_tree(<target> <part> [OWN <header>...] [SEAM <header>...])
#
# Gives <target> (the code of <part>) an include path of its own instead of
# the project root: a folder in the build tree, include/<target>/, holding
# links to the public headers of the parts below <part>, and to all of
# <part>'s own headers (its *_internal.h included), each at its path from
# the root. A header of a part above, or another part's private header, is
# not there, so including it fails to compile. OWN narrows the part's own
# headers (a library holding one file of a part); SEAM adds the headers a
# written seam shares (docs/architecture.md).
function(pincer_include_tree target part)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "" "OWN;SEAM")
  list(FIND PINCER_PARTS ${part} rank)
  if(rank LESS 0)
    message(FATAL_ERROR "pincer_include_tree: no part '${part}'")
  endif()
  set(headers ${arg_SEAM})
  foreach(p IN LISTS PINCER_PARTS)
    list(FIND PINCER_PARTS ${p} r)
    if(r LESS rank)
      pincer_part_public_headers(${p} hs)
    elseif(arg_OWN)
      set(hs ${arg_OWN})
    else()
      pincer_part_headers(${p} hs)
    endif()
    list(APPEND headers ${hs})
    if(r EQUAL rank)
      break()
    endif()
  endforeach()
  set(tree ${PROJECT_BINARY_DIR}/include/${target})
  file(REMOVE_RECURSE ${tree})
  foreach(h IN LISTS headers)
    get_filename_component(d ${tree}/${h} DIRECTORY)
    file(MAKE_DIRECTORY ${d})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${h} ${tree}/${h} SYMBOLIC)
  endforeach()
  target_include_directories(${target} PRIVATE ${tree})
endfunction()

# Installs the public headers of `part` under include/pincer/<path>.
function(pincer_install_part_headers part)
  pincer_part_public_headers(${part} headers)
  foreach(h IN LISTS headers)
    get_filename_component(d ${h} DIRECTORY)
    install(FILES ${PROJECT_SOURCE_DIR}/${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pincer/${d})
  endforeach()
endfunction()

# pincer_part_library(<target> <part> [OWN ...] [SEAM ...]): <target>, a
# library holding the code of <part>, gets its include tree; installed, it
# is pincer::<name without pincer_>, its headers found from the include
# folder both ways they are spelled (<pincer/io/buf.h>, "io/buf.h").
function(pincer_part_library target part)
  pincer_include_tree(${target} ${part} ${ARGN})
  target_include_directories(${target} INTERFACE
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/pincer>)
  string(REGEX REPLACE "^pincer_" "" name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  add_library(pincer::${name} ALIAS ${target})
  set_property(GLOBAL APPEND PROPERTY PINCER_PART_LIBRARIES "${target}:${part}")
endfunction()
