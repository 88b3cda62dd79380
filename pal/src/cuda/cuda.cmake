# pal CUDA kernels: the .cu/.cuh sources embedded as strings, and their host launchers.
set(PAL_CUDA_KERNELS
  ${CMAKE_CURRENT_LIST_DIR}/cuda_common.cuh
  ${CMAKE_CURRENT_LIST_DIR}/decode_attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/prefill_attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/kv_write.cu)
orchard_embed_sources(OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/pal_cuda_sources.cpp NAMESPACE pal::cuda
                      SOURCES ${PAL_CUDA_KERNELS})
target_sources(pal PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/launch_cache.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kv_write_cuda.cpp
  ${CMAKE_CURRENT_BINARY_DIR}/pal_cuda_sources.cpp)
