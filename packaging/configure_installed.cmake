# Included by `cmake --install` (packaging/CMakeLists.txt): configures the
# files that name install paths for the prefix of this install run.
include("${VRAM_SOURCE_DIR}/sysconfdir.cmake")
function(vram_under_prefix var dir)
  if(IS_ABSOLUTE "${dir}")
    set(${var} "${dir}" PARENT_SCOPE)
  else()
    set(${var} "${CMAKE_INSTALL_PREFIX}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

set(prefix "${CMAKE_INSTALL_PREFIX}")
vram_under_prefix(bindir "${VRAM_BINDIR}")
vram_under_prefix(libdir "${VRAM_LIBDIR}")
vram_under_prefix(includedir "${VRAM_INCLUDEDIR}")
vram_sysconfdir(sysconfdir "${CMAKE_INSTALL_PREFIX}")
set(version "${VRAM_VERSION}")
configure_file("${VRAM_SOURCE_DIR}/vram.pc.in" "${VRAM_OUT_DIR}/vram.pc" @ONLY)
configure_file("${VRAM_SOURCE_DIR}/vramd.service.in" "${VRAM_OUT_DIR}/vramd.service" @ONLY)
