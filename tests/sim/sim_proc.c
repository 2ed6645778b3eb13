/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuGetProcAddress of the simulated CUDA driver, and the legacy 32-bit entry
 * points it can hand out.  Frameworks (PyTorch, CuPy, JAX) resolve every driver
 * call through cuGetProcAddress, so cupool's interposition of it must be tested
 * against a resolver that follows the driver's rules: a base name ("cuMemAlloc")
 * and the CUDA version the caller was built for select the newest variant
 * introduced at or before that version, and the per-thread-default-stream flag
 * selects the _ptds/_ptsz variant where one exists.  The table is one X-macro
 * list, one line per (base name, version introduced, stream flavour, symbol);
 * versions are those of the PFN_* typedefs in cudaTypedefs.h.
 */
#include "sim.h"

#include <string.h>

/* ---- legacy 32-bit entry points (CUDA < 3.2): present, never usable here ------- */

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define SIM_LEGACY_STUB(name, params) \
    SIM_API CUresult CUDAAPI name params { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_LEGACY_STUB(cuMemAlloc, (CUdeviceptr_v1 * dptr, unsigned int bytesize))
SIM_LEGACY_STUB(cuMemFree, (CUdeviceptr_v1 dptr))
SIM_LEGACY_STUB(cuMemAllocPitch, (CUdeviceptr_v1 * dptr, unsigned int *pitch, unsigned int width,
                                  unsigned int height, unsigned int element_size))
SIM_LEGACY_STUB(cuMemGetInfo, (unsigned int *free_bytes, unsigned int *total_bytes))
SIM_LEGACY_STUB(cuMemGetAddressRange, (CUdeviceptr_v1 * base, unsigned int *size, CUdeviceptr_v1 dptr))
SIM_LEGACY_STUB(cuDeviceTotalMem, (unsigned int *bytes, CUdevice dev))
SIM_LEGACY_STUB(cuMemcpyHtoD, (CUdeviceptr_v1 dst, const void *src, unsigned int bytes))
SIM_LEGACY_STUB(cuMemcpyDtoH, (void *dst, CUdeviceptr_v1 src, unsigned int bytes))
SIM_LEGACY_STUB(cuMemcpyDtoD, (CUdeviceptr_v1 dst, CUdeviceptr_v1 src, unsigned int bytes))
SIM_LEGACY_STUB(cuMemsetD8, (CUdeviceptr_v1 dst, unsigned char value, unsigned int n))
SIM_LEGACY_STUB(cuMemsetD16, (CUdeviceptr_v1 dst, unsigned short value, unsigned int n))
SIM_LEGACY_STUB(cuMemsetD32, (CUdeviceptr_v1 dst, unsigned int value, unsigned int n))
SIM_LEGACY_STUB(cuMemHostGetDevicePointer, (CUdeviceptr_v1 * pdptr, void *p, unsigned int flags))
#pragma GCC diagnostic pop

/* ---- the table ---------------------------------------------------------------------- */

/* X(base name, version introduced, per-thread-stream variant?, symbol) */
#define SIM_PROC_TABLE(X)                                                          \
    X(cuInit, 2000, 0, cuInit)                                                     \
    X(cuDriverGetVersion, 2020, 0, cuDriverGetVersion)                             \
    X(cuGetErrorName, 6000, 0, cuGetErrorName)                                     \
    X(cuGetErrorString, 6000, 0, cuGetErrorString)                                 \
    X(cuGetProcAddress, 11030, 0, cuGetProcAddress)                                \
    X(cuGetProcAddress, 12000, 0, cuGetProcAddress_v2)                             \
    X(cuDeviceGet, 2000, 0, cuDeviceGet)                                           \
    X(cuDeviceGetCount, 2000, 0, cuDeviceGetCount)                                 \
    X(cuDeviceGetName, 2000, 0, cuDeviceGetName)                                   \
    X(cuDeviceGetUuid, 9020, 0, cuDeviceGetUuid)                                   \
    X(cuDeviceGetUuid, 11040, 0, cuDeviceGetUuid_v2)                               \
    X(cuDeviceTotalMem, 2000, 0, cuDeviceTotalMem)                                 \
    X(cuDeviceTotalMem, 3020, 0, cuDeviceTotalMem_v2)                              \
    X(cuDeviceGetAttribute, 2000, 0, cuDeviceGetAttribute)                         \
    X(cuDeviceCanAccessPeer, 4000, 0, cuDeviceCanAccessPeer)                       \
    X(cuDeviceGetDefaultMemPool, 11020, 0, cuDeviceGetDefaultMemPool)              \
    X(cuDeviceGetMemPool, 11020, 0, cuDeviceGetMemPool)                            \
    X(cuDeviceSetMemPool, 11020, 0, cuDeviceSetMemPool)                            \
    X(cuDevicePrimaryCtxRetain, 7000, 0, cuDevicePrimaryCtxRetain)                 \
    X(cuDevicePrimaryCtxRelease, 7000, 0, cuDevicePrimaryCtxRelease)               \
    X(cuDevicePrimaryCtxRelease, 11000, 0, cuDevicePrimaryCtxRelease_v2)           \
    X(cuDevicePrimaryCtxReset, 7000, 0, cuDevicePrimaryCtxReset)                   \
    X(cuDevicePrimaryCtxReset, 11000, 0, cuDevicePrimaryCtxReset_v2)               \
    X(cuDevicePrimaryCtxSetFlags, 7000, 0, cuDevicePrimaryCtxSetFlags)             \
    X(cuDevicePrimaryCtxSetFlags, 11000, 0, cuDevicePrimaryCtxSetFlags_v2)         \
    X(cuDevicePrimaryCtxGetState, 7000, 0, cuDevicePrimaryCtxGetState)             \
    X(cuCtxCreate, 2000, 0, cuCtxCreate)                                           \
    X(cuCtxCreate, 3020, 0, cuCtxCreate_v2)                                        \
    X(cuCtxCreate, 11040, 0, cuCtxCreate_v3)                                       \
    X(cuCtxCreate, 12050, 0, cuCtxCreate_v4)                                       \
    X(cuCtxDestroy, 2000, 0, cuCtxDestroy)                                         \
    X(cuCtxDestroy, 4000, 0, cuCtxDestroy_v2)                                      \
    X(cuCtxPushCurrent, 2000, 0, cuCtxPushCurrent)                                 \
    X(cuCtxPushCurrent, 4000, 0, cuCtxPushCurrent_v2)                              \
    X(cuCtxPopCurrent, 2000, 0, cuCtxPopCurrent)                                   \
    X(cuCtxPopCurrent, 4000, 0, cuCtxPopCurrent_v2)                                \
    X(cuCtxSetCurrent, 4000, 0, cuCtxSetCurrent)                                   \
    X(cuCtxGetCurrent, 4000, 0, cuCtxGetCurrent)                                   \
    X(cuCtxGetDevice, 2000, 0, cuCtxGetDevice)                                     \
    X(cuCtxGetDevice, 13000, 0, cuCtxGetDevice_v2)                                 \
    X(cuCtxGetFlags, 7000, 0, cuCtxGetFlags)                                       \
    X(cuCtxSetFlags, 12010, 0, cuCtxSetFlags)                                      \
    X(cuCtxGetId, 12000, 0, cuCtxGetId)                                            \
    X(cuCtxGetApiVersion, 3020, 0, cuCtxGetApiVersion)                             \
    X(cuCtxSynchronize, 2000, 0, cuCtxSynchronize)                                 \
    X(cuCtxSynchronize, 13000, 0, cuCtxSynchronize_v2)                             \
    X(cuCtxEnablePeerAccess, 4000, 0, cuCtxEnablePeerAccess)                       \
    X(cuCtxDisablePeerAccess, 4000, 0, cuCtxDisablePeerAccess)                     \
    X(cuStreamCreate, 2000, 0, cuStreamCreate)                                     \
    X(cuStreamCreateWithPriority, 5050, 0, cuStreamCreateWithPriority)             \
    X(cuStreamDestroy, 2000, 0, cuStreamDestroy)                                   \
    X(cuStreamDestroy, 4000, 0, cuStreamDestroy_v2)                                \
    X(cuStreamSynchronize, 2000, 0, cuStreamSynchronize)                           \
    X(cuStreamSynchronize, 7000, 1, cuStreamSynchronize_ptsz)                      \
    X(cuStreamQuery, 2000, 0, cuStreamQuery)                                       \
    X(cuStreamQuery, 7000, 1, cuStreamQuery_ptsz)                                  \
    X(cuStreamGetFlags, 5050, 0, cuStreamGetFlags)                                 \
    X(cuStreamGetFlags, 7000, 1, cuStreamGetFlags_ptsz)                            \
    X(cuStreamGetPriority, 5050, 0, cuStreamGetPriority)                           \
    X(cuStreamGetPriority, 7000, 1, cuStreamGetPriority_ptsz)                      \
    X(cuStreamGetCtx, 9020, 0, cuStreamGetCtx)                                     \
    X(cuStreamGetCtx, 9020, 1, cuStreamGetCtx_ptsz)                                \
    X(cuStreamGetCtx, 12050, 0, cuStreamGetCtx_v2)                                 \
    X(cuStreamGetCtx, 12050, 1, cuStreamGetCtx_v2_ptsz)                            \
    X(cuStreamGetId, 12000, 0, cuStreamGetId)                                      \
    X(cuStreamGetId, 12000, 1, cuStreamGetId_ptsz)                                 \
    X(cuStreamWaitEvent, 3020, 0, cuStreamWaitEvent)                               \
    X(cuStreamWaitEvent, 7000, 1, cuStreamWaitEvent_ptsz)                          \
    X(cuStreamBeginCapture, 10000, 0, cuStreamBeginCapture)                        \
    X(cuStreamBeginCapture, 10000, 1, cuStreamBeginCapture_ptsz)                   \
    X(cuStreamBeginCapture, 10010, 0, cuStreamBeginCapture_v2)                     \
    X(cuStreamBeginCapture, 10010, 1, cuStreamBeginCapture_v2_ptsz)                \
    X(cuStreamBeginCaptureToGraph, 12030, 0, cuStreamBeginCaptureToGraph)          \
    X(cuStreamBeginCaptureToGraph, 12030, 1, cuStreamBeginCaptureToGraph_ptsz)     \
    X(cuStreamEndCapture, 10000, 0, cuStreamEndCapture)                            \
    X(cuStreamEndCapture, 10000, 1, cuStreamEndCapture_ptsz)                       \
    X(cuStreamIsCapturing, 10000, 0, cuStreamIsCapturing)                          \
    X(cuStreamIsCapturing, 10000, 1, cuStreamIsCapturing_ptsz)                     \
    X(cuStreamGetCaptureInfo, 10010, 0, cuStreamGetCaptureInfo)                    \
    X(cuStreamGetCaptureInfo, 10010, 1, cuStreamGetCaptureInfo_ptsz)               \
    X(cuStreamGetCaptureInfo, 11030, 0, cuStreamGetCaptureInfo_v2)                 \
    X(cuStreamGetCaptureInfo, 11030, 1, cuStreamGetCaptureInfo_v2_ptsz)            \
    X(cuStreamGetCaptureInfo, 12030, 0, cuStreamGetCaptureInfo_v3)                 \
    X(cuStreamGetCaptureInfo, 12030, 1, cuStreamGetCaptureInfo_v3_ptsz)            \
    X(cuThreadExchangeStreamCaptureMode, 10010, 0, cuThreadExchangeStreamCaptureMode) \
    X(cuEventCreate, 2000, 0, cuEventCreate)                                       \
    X(cuEventRecord, 2000, 0, cuEventRecord)                                       \
    X(cuEventRecord, 7000, 1, cuEventRecord_ptsz)                                  \
    X(cuEventRecordWithFlags, 11010, 0, cuEventRecordWithFlags)                    \
    X(cuEventRecordWithFlags, 11010, 1, cuEventRecordWithFlags_ptsz)               \
    X(cuEventQuery, 2000, 0, cuEventQuery)                                         \
    X(cuCtxRecordEvent, 12050, 0, cuCtxRecordEvent)                                \
    X(cuEventSynchronize, 2000, 0, cuEventSynchronize)                             \
    X(cuEventDestroy, 2000, 0, cuEventDestroy)                                     \
    X(cuEventDestroy, 4000, 0, cuEventDestroy_v2)                                  \
    X(cuEventElapsedTime, 2000, 0, cuEventElapsedTime)                             \
    X(cuEventElapsedTime, 12080, 0, cuEventElapsedTime_v2)                         \
    X(cuMemAlloc, 2000, 0, cuMemAlloc)                                             \
    X(cuMemAlloc, 3020, 0, cuMemAlloc_v2)                                          \
    X(cuMemFree, 2000, 0, cuMemFree)                                               \
    X(cuMemFree, 3020, 0, cuMemFree_v2)                                            \
    X(cuMemAllocPitch, 2000, 0, cuMemAllocPitch)                                   \
    X(cuMemAllocPitch, 3020, 0, cuMemAllocPitch_v2)                                \
    X(cuMemGetInfo, 2000, 0, cuMemGetInfo)                                         \
    X(cuMemGetInfo, 3020, 0, cuMemGetInfo_v2)                                      \
    X(cuMemGetAddressRange, 2000, 0, cuMemGetAddressRange)                         \
    X(cuMemGetAddressRange, 3020, 0, cuMemGetAddressRange_v2)                      \
    X(cuMemAllocHost, 2000, 0, cuMemAllocHost)                                     \
    X(cuMemAllocHost, 3020, 0, cuMemAllocHost_v2)                                  \
    X(cuMemHostAlloc, 2020, 0, cuMemHostAlloc)                                     \
    X(cuMemFreeHost, 2000, 0, cuMemFreeHost)                                       \
    X(cuMemHostGetDevicePointer, 2020, 0, cuMemHostGetDevicePointer)               \
    X(cuMemHostGetDevicePointer, 3020, 0, cuMemHostGetDevicePointer_v2)            \
    X(cuMemHostGetFlags, 2030, 0, cuMemHostGetFlags)                               \
    X(cuMemAllocManaged, 6000, 0, cuMemAllocManaged)                               \
    X(cuMemAdvise, 8000, 0, cuMemAdvise)                                           \
    X(cuMemAdvise, 12020, 0, cuMemAdvise_v2)                                       \
    X(cuMemPrefetchAsync, 8000, 0, cuMemPrefetchAsync)                             \
    X(cuMemPrefetchAsync, 8000, 1, cuMemPrefetchAsync_ptsz)                        \
    X(cuMemPrefetchAsync, 12020, 0, cuMemPrefetchAsync_v2)                         \
    X(cuMemPrefetchAsync, 12020, 1, cuMemPrefetchAsync_v2_ptsz)                    \
    X(cuMemRangeGetAttribute, 8000, 0, cuMemRangeGetAttribute)                     \
    X(cuMemRangeGetAttributes, 8000, 0, cuMemRangeGetAttributes)                   \
    X(cuStreamAttachMemAsync, 6000, 0, cuStreamAttachMemAsync)                     \
    X(cuStreamAttachMemAsync, 7000, 1, cuStreamAttachMemAsync_ptsz)                \
    X(cuMemcpy, 4000, 0, cuMemcpy)                                                 \
    X(cuMemcpy, 7000, 1, cuMemcpy_ptds)                                            \
    X(cuMemcpyAsync, 4000, 0, cuMemcpyAsync)                                       \
    X(cuMemcpyAsync, 7000, 1, cuMemcpyAsync_ptsz)                                  \
    X(cuMemcpyHtoD, 2000, 0, cuMemcpyHtoD)                                         \
    X(cuMemcpyHtoD, 3020, 0, cuMemcpyHtoD_v2)                                      \
    X(cuMemcpyHtoD, 7000, 1, cuMemcpyHtoD_v2_ptds)                                 \
    X(cuMemcpyDtoH, 2000, 0, cuMemcpyDtoH)                                         \
    X(cuMemcpyDtoH, 3020, 0, cuMemcpyDtoH_v2)                                      \
    X(cuMemcpyDtoH, 7000, 1, cuMemcpyDtoH_v2_ptds)                                 \
    X(cuMemcpyDtoD, 2000, 0, cuMemcpyDtoD)                                         \
    X(cuMemcpyDtoD, 3020, 0, cuMemcpyDtoD_v2)                                      \
    X(cuMemcpyDtoD, 7000, 1, cuMemcpyDtoD_v2_ptds)                                 \
    X(cuMemcpyHtoDAsync, 3020, 0, cuMemcpyHtoDAsync_v2)                            \
    X(cuMemcpyHtoDAsync, 7000, 1, cuMemcpyHtoDAsync_v2_ptsz)                       \
    X(cuMemcpyDtoHAsync, 3020, 0, cuMemcpyDtoHAsync_v2)                            \
    X(cuMemcpyDtoHAsync, 7000, 1, cuMemcpyDtoHAsync_v2_ptsz)                       \
    X(cuMemcpyDtoDAsync, 3020, 0, cuMemcpyDtoDAsync_v2)                            \
    X(cuMemcpyDtoDAsync, 7000, 1, cuMemcpyDtoDAsync_v2_ptsz)                       \
    X(cuMemsetD8, 2000, 0, cuMemsetD8)                                             \
    X(cuMemsetD8, 3020, 0, cuMemsetD8_v2)                                          \
    X(cuMemsetD8, 7000, 1, cuMemsetD8_v2_ptds)                                     \
    X(cuMemsetD16, 2000, 0, cuMemsetD16)                                           \
    X(cuMemsetD16, 3020, 0, cuMemsetD16_v2)                                        \
    X(cuMemsetD16, 7000, 1, cuMemsetD16_v2_ptds)                                   \
    X(cuMemsetD32, 2000, 0, cuMemsetD32)                                           \
    X(cuMemsetD32, 3020, 0, cuMemsetD32_v2)                                        \
    X(cuMemsetD32, 7000, 1, cuMemsetD32_v2_ptds)                                   \
    X(cuMemsetD2D8, 3020, 0, cuMemsetD2D8_v2)                                      \
    X(cuMemsetD2D8, 7000, 1, cuMemsetD2D8_v2_ptds)                                 \
    X(cuMemsetD2D16, 3020, 0, cuMemsetD2D16_v2)                                    \
    X(cuMemsetD2D16, 7000, 1, cuMemsetD2D16_v2_ptds)                               \
    X(cuMemsetD2D32, 3020, 0, cuMemsetD2D32_v2)                                    \
    X(cuMemsetD2D32, 7000, 1, cuMemsetD2D32_v2_ptds)                               \
    X(cuMemsetD8Async, 3020, 0, cuMemsetD8Async)                                   \
    X(cuMemsetD8Async, 7000, 1, cuMemsetD8Async_ptsz)                              \
    X(cuMemsetD16Async, 3020, 0, cuMemsetD16Async)                                 \
    X(cuMemsetD16Async, 7000, 1, cuMemsetD16Async_ptsz)                            \
    X(cuMemsetD32Async, 3020, 0, cuMemsetD32Async)                                 \
    X(cuMemsetD32Async, 7000, 1, cuMemsetD32Async_ptsz)                            \
    X(cuMemsetD2D8Async, 3020, 0, cuMemsetD2D8Async)                               \
    X(cuMemsetD2D8Async, 7000, 1, cuMemsetD2D8Async_ptsz)                          \
    X(cuMemsetD2D16Async, 3020, 0, cuMemsetD2D16Async)                             \
    X(cuMemsetD2D16Async, 7000, 1, cuMemsetD2D16Async_ptsz)                        \
    X(cuMemsetD2D32Async, 3020, 0, cuMemsetD2D32Async)                             \
    X(cuMemsetD2D32Async, 7000, 1, cuMemsetD2D32Async_ptsz)                        \
    X(cuMemPoolCreate, 11020, 0, cuMemPoolCreate)                                  \
    X(cuMemPoolDestroy, 11020, 0, cuMemPoolDestroy)                                \
    X(cuMemPoolTrimTo, 11020, 0, cuMemPoolTrimTo)                                  \
    X(cuMemPoolSetAttribute, 11020, 0, cuMemPoolSetAttribute)                      \
    X(cuMemPoolGetAttribute, 11020, 0, cuMemPoolGetAttribute)                      \
    X(cuMemPoolSetAccess, 11020, 0, cuMemPoolSetAccess)                            \
    X(cuMemPoolGetAccess, 11020, 0, cuMemPoolGetAccess)                            \
    X(cuMemPoolExportToShareableHandle, 11020, 0, cuMemPoolExportToShareableHandle) \
    X(cuMemPoolImportFromShareableHandle, 11020, 0, cuMemPoolImportFromShareableHandle) \
    X(cuMemPoolExportPointer, 11020, 0, cuMemPoolExportPointer)                    \
    X(cuMemPoolImportPointer, 11020, 0, cuMemPoolImportPointer)                    \
    X(cuMemGetDefaultMemPool, 13000, 0, cuMemGetDefaultMemPool)                    \
    X(cuMemGetMemPool, 13000, 0, cuMemGetMemPool)                                  \
    X(cuMemSetMemPool, 13000, 0, cuMemSetMemPool)                                  \
    X(cuMemAllocAsync, 11020, 0, cuMemAllocAsync)                                  \
    X(cuMemAllocAsync, 11020, 1, cuMemAllocAsync_ptsz)                             \
    X(cuMemAllocFromPoolAsync, 11020, 0, cuMemAllocFromPoolAsync)                  \
    X(cuMemAllocFromPoolAsync, 11020, 1, cuMemAllocFromPoolAsync_ptsz)             \
    X(cuMemFreeAsync, 11020, 0, cuMemFreeAsync)                                    \
    X(cuMemFreeAsync, 11020, 1, cuMemFreeAsync_ptsz)                               \
    X(cuPointerGetAttribute, 4000, 0, cuPointerGetAttribute)                       \
    X(cuPointerGetAttributes, 7000, 0, cuPointerGetAttributes)                     \
    X(cuIpcGetMemHandle, 4010, 0, cuIpcGetMemHandle)                               \
    X(cuIpcOpenMemHandle, 4010, 0, cuIpcOpenMemHandle)                             \
    X(cuIpcOpenMemHandle, 11000, 0, cuIpcOpenMemHandle_v2)                         \
    X(cuIpcCloseMemHandle, 4010, 0, cuIpcCloseMemHandle)                           \
    X(cuModuleLoadData, 2000, 0, cuModuleLoadData)                                 \
    X(cuModuleLoadDataEx, 2010, 0, cuModuleLoadDataEx)                             \
    X(cuModuleUnload, 2000, 0, cuModuleUnload)                                     \
    X(cuModuleGetFunction, 2000, 0, cuModuleGetFunction)                           \
    X(cuLaunchKernel, 4000, 0, cuLaunchKernel)                                     \
    X(cuLaunchKernel, 7000, 1, cuLaunchKernel_ptsz)                                \
    X(cuGraphCreate, 10000, 0, cuGraphCreate)                                      \
    X(cuGraphDestroy, 10000, 0, cuGraphDestroy)                                    \
    X(cuGraphAddMemsetNode, 10000, 0, cuGraphAddMemsetNode)                        \
    X(cuGraphAddKernelNode, 10000, 0, cuGraphAddKernelNode)                        \
    X(cuGraphAddKernelNode, 12000, 0, cuGraphAddKernelNode_v2)                     \
    X(cuGraphAddEmptyNode, 10000, 0, cuGraphAddEmptyNode)                          \
    X(cuGraphAddNode, 12020, 0, cuGraphAddNode)                                    \
    X(cuGraphAddNode, 12030, 0, cuGraphAddNode_v2)                                 \
    X(cuGraphMemsetNodeGetParams, 10000, 0, cuGraphMemsetNodeGetParams)            \
    X(cuGraphMemsetNodeSetParams, 10000, 0, cuGraphMemsetNodeSetParams)            \
    X(cuGraphKernelNodeGetParams, 10000, 0, cuGraphKernelNodeGetParams)            \
    X(cuGraphKernelNodeGetParams, 12000, 0, cuGraphKernelNodeGetParams_v2)         \
    X(cuGraphKernelNodeSetParams, 10000, 0, cuGraphKernelNodeSetParams)            \
    X(cuGraphKernelNodeSetParams, 12000, 0, cuGraphKernelNodeSetParams_v2)         \
    X(cuGraphNodeGetType, 10000, 0, cuGraphNodeGetType)                            \
    X(cuGraphNodeSetParams, 12020, 0, cuGraphNodeSetParams)                        \
    X(cuGraphGetNodes, 10000, 0, cuGraphGetNodes)                                  \
    X(cuGraphGetRootNodes, 10000, 0, cuGraphGetRootNodes)                          \
    X(cuGraphGetEdges, 10000, 0, cuGraphGetEdges)                                  \
    X(cuGraphGetEdges, 12030, 0, cuGraphGetEdges_v2)                               \
    X(cuGraphNodeGetDependencies, 10000, 0, cuGraphNodeGetDependencies)            \
    X(cuGraphNodeGetDependencies, 12030, 0, cuGraphNodeGetDependencies_v2)         \
    X(cuGraphNodeGetDependentNodes, 10000, 0, cuGraphNodeGetDependentNodes)        \
    X(cuGraphNodeGetDependentNodes, 12030, 0, cuGraphNodeGetDependentNodes_v2)     \
    X(cuGraphAddDependencies, 10000, 0, cuGraphAddDependencies)                    \
    X(cuGraphAddDependencies, 12030, 0, cuGraphAddDependencies_v2)                 \
    X(cuGraphRemoveDependencies, 10000, 0, cuGraphRemoveDependencies)              \
    X(cuGraphRemoveDependencies, 12030, 0, cuGraphRemoveDependencies_v2)           \
    X(cuGraphDestroyNode, 10000, 0, cuGraphDestroyNode)                            \
    X(cuGraphClone, 10000, 0, cuGraphClone)                                        \
    X(cuGraphNodeFindInClone, 10000, 0, cuGraphNodeFindInClone)                    \
    X(cuGraphInstantiate, 10000, 0, cuGraphInstantiate)                            \
    X(cuGraphInstantiate, 11000, 0, cuGraphInstantiate_v2)                         \
    X(cuGraphInstantiate, 12000, 0, cuGraphInstantiateWithFlags)                   \
    X(cuGraphInstantiateWithFlags, 11040, 0, cuGraphInstantiateWithFlags)          \
    X(cuGraphInstantiateWithParams, 12000, 0, cuGraphInstantiateWithParams)        \
    X(cuGraphInstantiateWithParams, 12000, 1, cuGraphInstantiateWithParams_ptsz)   \
    X(cuGraphExecDestroy, 10000, 0, cuGraphExecDestroy)                            \
    X(cuGraphLaunch, 10000, 0, cuGraphLaunch)                                      \
    X(cuGraphLaunch, 10000, 1, cuGraphLaunch_ptsz)                                 \
    X(cuGraphUpload, 11010, 0, cuGraphUpload)                                      \
    X(cuGraphUpload, 11010, 1, cuGraphUpload_ptsz)                                 \
    X(cuGraphExecMemsetNodeSetParams, 10020, 0, cuGraphExecMemsetNodeSetParams)    \
    X(cuGraphExecKernelNodeSetParams, 10010, 0, cuGraphExecKernelNodeSetParams)    \
    X(cuGraphExecKernelNodeSetParams, 12000, 0, cuGraphExecKernelNodeSetParams_v2) \
    X(cuGraphExecNodeSetParams, 12020, 0, cuGraphExecNodeSetParams)                \
    X(cuGraphExecUpdate, 10020, 0, cuGraphExecUpdate)                              \
    X(cuGraphExecUpdate, 12000, 0, cuGraphExecUpdate_v2)

typedef struct {
    const char *name;
    int version;
    bool per_thread;
    void *fn;
} sim_proc_entry;

static const sim_proc_entry proc_table[] = {
#define X(base, version, per_thread, symbol) { #base, version, per_thread, (void *)symbol },
    SIM_PROC_TABLE(X)
#undef X
};

/* The best entry for a request: among variants introduced by cudaVersion, a
 * per-thread one when asked for and available, else the newest plain one. */
static const sim_proc_entry *proc_lookup(const char *symbol, int version, bool per_thread, bool *name_known)
{
    const sim_proc_entry *best = NULL;
    *name_known = false;
    for (size_t i = 0; i < sizeof proc_table / sizeof *proc_table; i++) {
        const sim_proc_entry *e = &proc_table[i];
        if (strcmp(e->name, symbol) != 0) continue;
        *name_known = true;
        if (e->version > version || (e->per_thread && !per_thread)) continue;
        bool better = !best || (e->per_thread && !best->per_thread) ||
                      (e->per_thread == best->per_thread && e->version >= best->version);
        if (better) best = e;
    }
    return best;
}

SIM_API CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                             CUdriverProcAddressQueryResult *status)
{
    const cuuint64_t known = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if (!symbol || !pfn || (flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
    SIM_LOCKED;
    bool name_known;
    const sim_proc_entry *e =
        proc_lookup(symbol, version, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, &name_known);
    *pfn = e ? e->fn : NULL;
    if (status)
        *status = e ? CU_GET_PROC_ADDRESS_SUCCESS
                    : name_known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return e ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

SIM_API CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
