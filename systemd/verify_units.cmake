# Installs the systemd component into a temporary prefix and checks the files as installed:
#   systemd-analyze verify  jitllmd.service jitllmd.socket  (no message about either)
#   systemd-sysusers --root  and  systemd-tmpfiles --root  apply the entries to an empty tree
#   jitllmd --check-config   accepts the example config (when jitllmd is built)
# Prints "SKIPPED: ..." (ctest then reports the test as skipped) when systemd-analyze is missing.
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DSYSTEMD_ANALYZE=... [-DJITLLMD=...] -DCONF_EXAMPLE=... -P verify_units.cmake
cmake_minimum_required(VERSION 3.20)

if(NOT SYSTEMD_ANALYZE OR NOT EXISTS "${SYSTEMD_ANALYZE}")
  message("SKIPPED: systemd-analyze is not installed (apt-get install systemd), so the units are not verified")
  return()
endif()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(run_output "${out}${err}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}" --component systemd)
set(units "${prefix}/lib/systemd/system")
foreach(f "${units}/jitllmd.service" "${units}/jitllmd.socket" "${units}/jitllmd-http.socket" "${prefix}/lib/sysusers.d/jitllm.conf"
          "${prefix}/lib/tmpfiles.d/jitllm.conf" "${prefix}/share/jitllm/jitllmd.conf.example")
  if(NOT EXISTS "${f}")
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()

# The installed unit names the installed daemon.
file(READ "${units}/jitllmd.service" service)
if(NOT service MATCHES "\nExecStart=${prefix}/bin/jitllmd ")
  message(FATAL_ERROR "ExecStart does not name ${prefix}/bin/jitllmd:\n${service}")
endif()
if(service MATCHES "@[A-Z_]+@")
  message(FATAL_ERROR "an unconfigured @VARIABLE@ is left in jitllmd.service:\n${service}")
endif()

# verify checks that ExecStart is executable: put the daemon (or a stand-in) where it points.
file(MAKE_DIRECTORY "${prefix}/bin")
if(JITLLMD AND EXISTS "${JITLLMD}")
  file(COPY "${JITLLMD}" DESTINATION "${prefix}/bin")
else()
  file(WRITE "${prefix}/bin/jitllmd" "#!/bin/sh\nexit 0\n")
  file(CHMOD "${prefix}/bin/jitllmd" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endif()

execute_process(COMMAND "${SYSTEMD_ANALYZE}" verify --man=no "${units}/jitllmd.socket" "${units}/jitllmd-http.socket"
                        "${units}/jitllmd.service"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
message(STATUS "systemd-analyze verify: exit ${rc}\n${all}")
# Clean means: nothing said about our units. (In a container verify may also complain about the
# host's own units or missing /run/systemd; that is not ours to fix.)
string(REGEX MATCHALL "[^\n]*jitllm[^\n]*" ours "${all}")
if(NOT rc EQUAL 0 OR ours)
  message(FATAL_ERROR "systemd-analyze verify is not clean for the jitllm units:\n${all}")
endif()

# The sysusers.d and tmpfiles.d entries apply to an empty root.
set(root "${WORK_DIR}/root")
file(MAKE_DIRECTORY "${root}/etc")
find_program(SYSUSERS systemd-sysusers)
find_program(TMPFILES systemd-tmpfiles)
if(SYSUSERS)
  run(${SYSUSERS} "--root=${root}" "${prefix}/lib/sysusers.d/jitllm.conf")
  file(READ "${root}/etc/passwd" passwd)
  file(READ "${root}/etc/group" group)
  if(NOT passwd MATCHES "(^|\n)jitllm:" OR NOT group MATCHES "(^|\n)jitllm-admin:" OR NOT group MATCHES "(^|\n)render:[^\n]*jitllm")
    message(FATAL_ERROR "sysusers did not create jitllm, jitllm-admin and render membership:\n${passwd}\n${group}")
  endif()
endif()
if(TMPFILES)
  # With --root, tmpfiles reads the copy source of "C" inside the root too: mirror the install there.
  file(COPY "${prefix}/share/jitllm/jitllmd.conf.example" DESTINATION "${root}${prefix}/share/jitllm")
  execute_process(COMMAND ${TMPFILES} --create "--root=${root}" "${prefix}/lib/tmpfiles.d/jitllm.conf"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "systemd-tmpfiles: exit ${rc}\n${out}${err}")
  if(NOT EXISTS "${root}/var/lib/jitllm/models" OR NOT EXISTS "${root}/etc/jitllm/jitllmd.conf")
    message(FATAL_ERROR "systemd-tmpfiles did not create /var/lib/jitllm/models and /etc/jitllm/jitllmd.conf:\n${out}${err}")
  endif()
endif()

# The example config is one jitllmd accepts.
if(JITLLMD AND EXISTS "${JITLLMD}")
  run("${JITLLMD}" --check-config --config "${CONF_EXAMPLE}")
  message(STATUS "jitllmd --check-config on the example:\n${run_output}")
endif()
message(STATUS "systemd units, sysusers.d and tmpfiles.d entries: clean")
