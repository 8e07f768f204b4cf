# `make uninstall [DESTDIR=...]`: removes every file the last install listed
# in its manifest, under DESTDIR (the manifest lists paths without it). The
# configuration file and the token in SYSCONFDIR/vram stay, as an
# administrator's files do.
cmake_minimum_required(VERSION 3.20) # policies of a script run with cmake -P
if(NOT EXISTS "${MANIFEST}")
  message(FATAL_ERROR "no install manifest at ${MANIFEST}: nothing was installed from this build")
endif()
file(STRINGS "${MANIFEST}" files)
foreach(f IN LISTS files)
  set(f "$ENV{DESTDIR}${f}")
  if(IS_SYMLINK "${f}" OR EXISTS "${f}")
    message(STATUS "Removing: ${f}")
    file(REMOVE "${f}")
  else()
    message(STATUS "Already gone: ${f}")
  endif()
  get_filename_component(dir "${f}" DIRECTORY)
  if(dir MATCHES "/doc/vram$")
    file(GLOB left "${dir}/*")
    if(NOT left)
      file(REMOVE_RECURSE "${dir}")
    endif()
  endif()
endforeach()
file(REMOVE "${MANIFEST}")
