# The CUDA demos, included from demos/CMakeLists.txt. Flags are set per target.

function(launchfit_add_demo name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE launchfit::launchfit CUDA::cudart_static)
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common)
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/demos)
endfunction()

# 1. launchfit::launch in place of <<<>>> for three everyday kernels (the README's demo).
launchfit_add_demo(dropin dropin/dropin.cu)

# 2. Why 50% occupancy beats 100%: bytes in flight vs occupancy, with an SVG of the sweep.
launchfit_add_demo(reduction_story reduction_story/reduction_story.cu)

# 3. A grid-synchronised (cooperative_groups::this_grid().sync()) kernel sized by launchfit::cooperative().
#    No -rdc: grid sync needs only the cooperative launch attribute, which launchfit sets.
launchfit_add_demo(cooperative cooperative/cooperative.cu)
