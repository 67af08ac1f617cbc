# The SIMD objects may define, for the linker, nothing but their table fillers
# (ferrox::detail::<isa>::override_*): any other symbol they export, such as an inline
# function of external linkage emitted out of line, may be the copy the linker keeps for
# baseline callers too, which then run AVX2 or AVX-512 instructions on CPUs without them
# (SIGILL). See src/kernels/simd_avx2.h.
# -DNM=<nm> -DOBJECTS=<objects separated by |>
string(REPLACE "|" ";" objects "${OBJECTS}")
set(n 0)
foreach(o IN LISTS objects)
  execute_process(COMMAND ${NM} -C --defined-only ${o} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${o}")
  endif()
  string(REPLACE ";" "," out "${out}")
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line IN LISTS lines)
    # Global (T, W, V, D, B, R, u) symbols; local ones (t, r, d, b) cannot be shared.
    if(line MATCHES "^[0-9a-f]+ [TWVDBRuvw] (.*)$")
      set(symbol "${CMAKE_MATCH_1}")
      if(symbol STREQUAL "DW.ref.__gxx_personality_v0")  # data for exception tables, not code
        continue()
      endif()
      if(NOT symbol MATCHES "^ferrox::detail::avx(2|512)::override_")
        message(FATAL_ERROR "${o} exports ${symbol}")
      endif()
      math(EXPR n "${n} + 1")
    endif()
  endforeach()
endforeach()
if(n EQUAL 0)
  message(FATAL_ERROR "no table filler found in ${OBJECTS}")
endif()
message(STATUS "${n} exported symbols, all table fillers")
