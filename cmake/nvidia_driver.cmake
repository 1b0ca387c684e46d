# Signs of an NVIDIA driver or GPU on the building machine (libcuda, nvidia-smi, /dev/nvidia*): a
# build that finds one but no CUDA compiler says that CUDA was left out. `cmake -P` on this file
# prints the signs found (tests/test_build.py).
function(flowgrad_nvidia_driver_signs out)
  find_library(libcuda NAMES libcuda.so.1 cuda NO_CACHE)  # the driver; the toolkit's stub lives in stubs/
  find_program(nvidia_smi nvidia-smi NO_CACHE)
  set(signs "")
  foreach(found IN ITEMS "${libcuda}" "${nvidia_smi}" /dev/nvidiactl /dev/nvidia0)
    if(found AND EXISTS "${found}" AND NOT found MATCHES "/stubs/")
      list(APPEND signs "${found}")
    endif()
  endforeach()
  set(${out} "${signs}" PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  flowgrad_nvidia_driver_signs(signs)
  message(STATUS "nvidia driver signs: ${signs}")
endif()
