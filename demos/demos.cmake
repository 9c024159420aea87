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
