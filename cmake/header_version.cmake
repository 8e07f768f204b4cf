# Sets VRAM_HEADER_VERSION ("0.1.0") from include/vram.h's VRAM_VERSION_*
# lines and checks that VRAM_VERSION_STRING agrees with the numbers.
file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/../include/vram.h" _vram_version_lines
     REGEX "^#define VRAM_VERSION_(MAJOR|MINOR|PATCH|STRING) ")
foreach(_part MAJOR MINOR PATCH STRING)
  set(_value "")
  foreach(_line IN LISTS _vram_version_lines)
    if(_line MATCHES "^#define VRAM_VERSION_${_part} +\"?([0-9.]+)\"?$")
      set(_value "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  if(_value STREQUAL "")
    message(FATAL_ERROR "include/vram.h: no '#define VRAM_VERSION_${_part}' line")
  endif()
  set(_vram_${_part} "${_value}")
endforeach()
set(VRAM_HEADER_VERSION "${_vram_MAJOR}.${_vram_MINOR}.${_vram_PATCH}")
if(NOT _vram_STRING STREQUAL VRAM_HEADER_VERSION)
  message(FATAL_ERROR "include/vram.h: VRAM_VERSION_STRING \"${_vram_STRING}\" does not match "
                      "VRAM_VERSION_MAJOR.MINOR.PATCH ${VRAM_HEADER_VERSION}")
endif()
