# kernels CUDA: the bitmask kernel source embedded as a string, and its host launcher.
orchard_embed_sources(OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/kernels_cuda_sources.cpp NAMESPACE kernels::cuda
                      SOURCES ${CMAKE_CURRENT_LIST_DIR}/bitmask.cu)
target_sources(kernels PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/bitmask_cuda.cpp
  ${CMAKE_CURRENT_BINARY_DIR}/kernels_cuda_sources.cpp)
