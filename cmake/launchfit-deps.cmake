# Every dependency comes from a distribution package; nothing is vendored.
find_package(CUDAToolkit REQUIRED)   # headers only for the library: cuda.h, cuda_occupancy.h
find_package(spdlog CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(Boost 1.81 REQUIRED)    # header-only Boost.PFR
find_package(Threads REQUIRED)
# launchfit-calc's command line (Debian libcli11-dev, header-only, with a CMake config): the demos only.
if(LAUNCHFIT_BUILD_DEMOS)
  find_package(CLI11 CONFIG REQUIRED)
endif()
