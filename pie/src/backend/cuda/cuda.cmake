# The CUDA backend (ORCHARD_CUDA): its host code and its kernel sources, embedded as strings for NVRTC.
orchard_embed_sources(OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/pie_backend_cuda_sources.cpp NAMESPACE pie::cuda
                      SOURCES ${CMAKE_CURRENT_LIST_DIR}/decoder_ops.cu ${CMAKE_CURRENT_LIST_DIR}/lora_ops.cu
                              ${CMAKE_CURRENT_LIST_DIR}/nf4_ops.cu
                              ${CMAKE_CURRENT_LIST_DIR}/sampling_ops.cu ${CMAKE_CURRENT_LIST_DIR}/gemm_ops.cu
                              ${CMAKE_CURRENT_LIST_DIR}/matvec_mma_ops.cu ${CMAKE_CURRENT_LIST_DIR}/mmq_ops.cu
                              ${CMAKE_CURRENT_LIST_DIR}/weight_blocks.cuh)
target_sources(pie_backend PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cpp ${CMAKE_CURRENT_LIST_DIR}/cuda_lora.cpp
                                   ${CMAKE_CURRENT_LIST_DIR}/cuda_sampling.cpp ${CMAKE_CURRENT_LIST_DIR}/gemm.cpp
                                   ${CMAKE_CURRENT_LIST_DIR}/step_times.cpp
                                   ${CMAKE_CURRENT_LIST_DIR}/cuda_sources.cpp
                                   ${CMAKE_CURRENT_BINARY_DIR}/pie_backend_cuda_sources.cpp)
target_include_directories(pie_backend PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_compile_definitions(pie_backend PRIVATE ORCHARD_HAVE_CUDA=1)
