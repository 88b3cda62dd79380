# tensor/cuda: the CUDA JIT, device memory pool, streams and events. Always compiled: without
# ORCHARD_CUDA every entry point throws tensor::cuda::CudaUnavailable ("built without CUDA").
file(GLOB TENSOR_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cpp)
target_sources(tensor PRIVATE ${TENSOR_CUDA_SOURCES})
if(ORCHARD_CUDA)
  target_compile_definitions(tensor PRIVATE ORCHARD_HAVE_CUDA=1)
  # Headers of the driver API (the library itself is dlopen'ed), NVRTC linked by its file: the CUDA::nvrtc
  # target also links the driver stub, and a binary that needs libcuda.so.1 at load time cannot start on a
  # machine without a driver (CI), where the tests must run and skip.
  target_include_directories(tensor SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(tensor PRIVATE ${CUDA_nvrtc_LIBRARY} ${CMAKE_DL_LIBS})
else()
  target_compile_definitions(tensor PRIVATE ORCHARD_HAVE_CUDA=0)
endif()
