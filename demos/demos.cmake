# SPDX-License-Identifier: MIT
# The CUDA demos, included from demos/CMakeLists.txt. Flags are set per target.

function(launchfit_add_demo name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE launchfit::launchfit CUDA::cudart_static CLI11::CLI11)
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common)
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>
                         $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/demos)
endfunction()

# 1. launchfit::launch in place of <<<>>> for three everyday kernels (the README's demo). Without a GPU it
#    plans them offline from its own cubin, read with launchfit-calc's reader (launchfit-cubin).
launchfit_add_demo(dropin dropin/dropin.cu)
target_link_libraries(dropin PRIVATE launchfit-cubin)

# 2. Why 50% occupancy beats 100%: bytes in flight vs occupancy, with an SVG of the sweep.
launchfit_add_demo(reduction_story reduction_story/reduction_story.cu)

# 3. A grid-synchronised (cooperative_groups::this_grid().sync()) kernel sized by launchfit::cooperative().
#    No -rdc: grid sync needs only the cooperative launch attribute, which launchfit sets.
launchfit_add_demo(cooperative cooperative/cooperative.cu)

# 4. Driver-API kernels: driver_api/kernels.cu is compiled at build time to PTX and to a cubin (next to the
#    demo binaries); the plain C++ program loads them at run time. It looks next to itself first, so the
#    build folder may be moved; the build paths below are the fallback.
list(GET CMAKE_CUDA_ARCHITECTURES 0 _launchfit_demo_arch)
string(REGEX REPLACE "[^0-9].*$" "" _launchfit_demo_arch "${_launchfit_demo_arch}")
if(NOT _launchfit_demo_arch)
  set(_launchfit_demo_arch 90)
endif()
set(_launchfit_demo_kernels ${CMAKE_CURRENT_SOURCE_DIR}/driver_api/kernels.cu)
set(_launchfit_demo_ptx ${CMAKE_BINARY_DIR}/demos/driver_api_kernels.ptx)
set(_launchfit_demo_cubin ${CMAKE_BINARY_DIR}/demos/driver_api_kernels.cubin)
set(_launchfit_demo_ccbin)
if(CMAKE_CUDA_HOST_COMPILER)
  set(_launchfit_demo_ccbin -ccbin=${CMAKE_CUDA_HOST_COMPILER})
endif()
add_custom_command(OUTPUT ${_launchfit_demo_ptx}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/demos
  COMMAND ${CMAKE_CUDA_COMPILER} ${_launchfit_demo_ccbin} -ptx -arch=compute_${_launchfit_demo_arch}
          -o ${_launchfit_demo_ptx} ${_launchfit_demo_kernels}
  DEPENDS ${_launchfit_demo_kernels}
  COMMENT "nvcc -ptx demos/driver_api/kernels.cu (compute_${_launchfit_demo_arch})" VERBATIM)
add_custom_command(OUTPUT ${_launchfit_demo_cubin}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/demos
  COMMAND ${CMAKE_CUDA_COMPILER} ${_launchfit_demo_ccbin} -cubin -arch=sm_${_launchfit_demo_arch}
          -o ${_launchfit_demo_cubin} ${_launchfit_demo_kernels}
  DEPENDS ${_launchfit_demo_kernels}
  COMMENT "nvcc -cubin demos/driver_api/kernels.cu (sm_${_launchfit_demo_arch})" VERBATIM)
add_custom_target(driver_api_kernels DEPENDS ${_launchfit_demo_ptx} ${_launchfit_demo_cubin})
launchfit_add_demo(driver_api driver_api/driver_api.cpp)
add_dependencies(driver_api driver_api_kernels)
target_compile_definitions(driver_api PRIVATE
  LAUNCHFIT_DEMO_PTX="${_launchfit_demo_ptx}" LAUNCHFIT_DEMO_CUBIN="${_launchfit_demo_cubin}")

# 5. Production logging: text and JSON plan lines, the spill and shortfall warnings, custom spdlog sinks.
launchfit_add_demo(logging logging/logging.cu)

# 6. A 32x32-tiled SGEMM over 2-D work: items({n, m}) with fixed({32, 32}) and with max_occupancy() + a block rule.
launchfit_add_demo(matmul_2d matmul_2d/matmul_2d.cu)

# 7. A cluster-wide histogram in distributed shared memory, .cluster({4, 1, 1}) sized by cluster occupancy.
launchfit_add_demo(cluster_dsmem cluster_dsmem/cluster_dsmem.cu)

# 8. A chain of small dependent kernels with and without programmatic dependent launch (.pdl()), timed.
launchfit_add_demo(pdl_chain pdl_chain/pdl_chain.cu)
