// library_types.h (CUDA simulator): the data-type enum cuBLASLt descriptors name. Values are
// CUDA's own, so a dump of a descriptor reads the same on both.
#ifndef CUDASIM_LIBRARY_TYPES_H
#define CUDASIM_LIBRARY_TYPES_H
typedef enum cudaDataType_t {
  CUDA_R_16F = 2,
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16BF = 14,
  CUDA_R_8I = 3,
  CUDA_R_32I = 10,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;
#endif
