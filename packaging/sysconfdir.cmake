# vram_sysconfdir(VAR PREFIX): the configuration directory for PREFIX, by
# GNUInstallDirs' rule: /usr -> /etc, /opt/X -> /etc/opt/X, else PREFIX/etc.
function(vram_sysconfdir var prefix)
  string(REGEX REPLACE "/+$" "" prefix "${prefix}")
  if(prefix STREQUAL "/usr" OR prefix STREQUAL "")
    set(dir "/etc")
  elseif(prefix MATCHES "^/opt/")
    set(dir "/etc${prefix}")
  else()
    set(dir "${prefix}/etc")
  endif()
  set(${var} "${dir}" PARENT_SCOPE)
endfunction()
